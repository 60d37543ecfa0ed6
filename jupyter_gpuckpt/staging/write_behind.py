"""The write-behind of staged suspends: a staged checkpoint made durable after the GPU is free.

For each staged checkpoint the server runs ``python -m kernel_hooks.write_behind`` (a
process of its own, so the server never imports the engine and a writer can be killed
cleanly), follows its progress, and retries it until the checkpoint is in the store: a
failed or killed writer leaves the staged copy and every durable checkpoint as they were.
A server stopped meanwhile kills its writers; the next one starts them again from the
ledger (:meth:`WriteBehind.resume_pending`). Host memory is shared by all of a user's servers:
each handles only the staged copies of its own kernels.

Events (``suspend``): ``writing`` (bytes of the durable write), ``write_failed`` (the
reason, and when it is tried again), ``durable``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from gpuckpt_store import list_checkpoints

from ..events import Emit
from ..kernels.lifecycle import AWAY, KernelRecord, State
from ..kernels.record_parts import CheckpointRef, WriteBehindStatus
from ..kernels.registry import KernelRegistry
from ..tasks import BackgroundTasks
from ..waiting import retry_delay
from .host_memory import HostMemory
from .retention import Retention

RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Waits between attempts; the last repeats."""

class WriteBehind:
    """Runs and retries the durable writes of the registry's staged checkpoints."""

    def __init__(self, registry: KernelRegistry, retention: Retention, host_memory: HostMemory,
                 tasks: BackgroundTasks, emit: Emit, python: str = sys.executable) -> None:
        self.registry = registry
        self.retention = retention
        self.host_memory = host_memory
        self.tasks = tasks
        self.emit = emit
        self.python = python
        self._writing: dict[str, asyncio.Task[Any]] = {}
        """By checkpoint id."""

    def start(self, record: KernelRecord, checkpoint_id: str) -> None:
        """Make ``checkpoint_id`` (staged, of ``record``'s kernel) durable in the background."""
        task = self._writing.get(checkpoint_id)
        if task is None or task.done():
            self._writing[checkpoint_id] = self.tasks.start(
                f"write-behind {checkpoint_id} of {record.kernel_id}", self._write(record, checkpoint_id))

    def writing(self) -> set[str]:
        """The checkpoints being written now."""
        return {c for c, task in self._writing.items() if not task.done()}

    def staged_in_use(self) -> set[str]:
        """Staged copies that must stay in host memory: not yet in the store, being written to
        it, or being read by a resume."""
        ids = self.writing()
        for record in self.registry.records:
            last = record.last_checkpoint
            if last is not None and (last.staged or record.state == State.RESTORING):
                ids.add(last.id)
        return ids

    async def resume_pending(self, ours: Callable[[str], bool]) -> None:
        """After a server restart: write what this server left staged when it stopped, the
        copies of kernels it no longer knows (shut down meanwhile) included; drop those already
        written that no kernel of this server needs.

        Parameters
        ----------
        ours
            Whether a kernel that this server does not run is this server's (in its entries of
            the ledger, or adopted), whose staged copies it handles. Another running server's
            copies are left alone: it writes them, and keeps those its kernels resume from.
        """
        for record in self.registry.records:
            last = record.last_checkpoint
            if last is not None and last.staged:
                self.start(record, last.id)
        durable = set(await asyncio.to_thread(self.retention.store().ids))
        for info in await asyncio.to_thread(list_checkpoints, self.host_memory.store()):
            if info.id in self._writing or not info.kernel_id:
                continue
            known = self.registry.records.get(info.kernel_id)
            if known is None and not ours(info.kernel_id):
                continue
            if info.id not in durable:
                self.start(known or KernelRecord(info.kernel_id), info.id)
            elif known is None:
                await asyncio.to_thread(self.host_memory.drop, info.id)

    async def durable(self, checkpoint_id: str) -> None:
        """Wait until ``checkpoint_id``'s write-behind has ended (tests, the benchmark)."""
        task = self._writing.get(checkpoint_id)
        if task is not None:
            await asyncio.shield(task)

    # -- one checkpoint ------------------------------------------------------------------

    async def _write(self, record: KernelRecord, checkpoint_id: str) -> None:
        host = self.host_memory
        attempt = 0
        started = time.monotonic()
        try:
            while True:
                if not await asyncio.to_thread(host.has, checkpoint_id):
                    if checkpoint_id not in await asyncio.to_thread(self.retention.store().ids):
                        await self._lost(record, checkpoint_id)
                        return
                    result: dict[str, Any] = {}  # a writer finished it, and its server stopped before it heard
                    break
                attempt += 1
                result, error = await self._attempt(record, checkpoint_id)
                if error is None:
                    break
                if result.get("permanent"):  # a damaged copy: retrying cannot help
                    await asyncio.to_thread(host.drop, checkpoint_id)
                    await self._lost(record, checkpoint_id, f"could not be written to the store ({error})")
                    return
                wait = retry_delay(attempt, RETRY_SECONDS)
                record.write_behind = WriteBehindStatus.failed(checkpoint_id, attempt, error)
                self.emit("suspend", {"kernel_id": record.kernel_id, "phase": "write_failed",
                                      "checkpoint_id": checkpoint_id, "error": error, "retry_in": wait})
                await asyncio.sleep(wait)
        finally:
            self._writing.pop(checkpoint_id, None)
        record.write_behind = None
        if record.last_checkpoint is not None and record.last_checkpoint.id == checkpoint_id:
            record.last_checkpoint = record.last_checkpoint.made_durable()
        if record.durable_checkpoint is None or checkpoint_id > record.durable_checkpoint:  # ids sort by time
            record.durable_checkpoint = checkpoint_id
        self.registry.records.save()
        self.emit("suspend", {"kernel_id": record.kernel_id, "phase": "durable", "checkpoint_id": checkpoint_id,
                              "bytes_written": int(result.get("bytes_written", 0)),
                              "seconds": time.monotonic() - started})
        await self.tidy(record)
        await self.retention.prune(record.kernel_id)

    async def _attempt(self, record: KernelRecord, checkpoint_id: str) -> tuple[dict[str, Any], str | None]:
        """Run one writer process to its end: its last line, and the error if it failed."""
        settings = self.registry.settings
        process = await asyncio.create_subprocess_exec(
            self.python, "-m", "kernel_hooks.write_behind", "--staged", str(self.host_memory.root),
            "--store", str(settings.store_root), "--checkpoint", checkpoint_id,
            "--bandwidth", str(settings.write_behind_bandwidth),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        last: dict[str, Any] = {}
        assert process.stdout is not None and process.stderr is not None
        stderr = asyncio.ensure_future(process.stderr.read())  # read beside stdout: a full pipe would block it
        try:
            async for line in process.stdout:
                try:
                    last = json.loads(line)
                except ValueError:
                    continue
                if "done" in last:
                    record.write_behind = WriteBehindStatus.writing(checkpoint_id, int(last["done"]),
                                                                    int(last["total"]))
                    self.emit("suspend", {"kernel_id": record.kernel_id, "phase": "writing",
                                          "checkpoint_id": checkpoint_id, "bytes_done": int(last["done"]),
                                          "bytes_total": int(last["total"])})
            errors = (await stderr).decode(errors="replace").strip()
            code = await process.wait()
        except BaseException:  # the server stops: the next one writes it again
            if process.returncode is None:
                process.kill()
                await process.wait()
            stderr.cancel()
            raise
        if last.get("ok"):
            return last, None
        if "error" in last:
            return last, str(last["error"])
        tail = errors.splitlines()[-1] if errors else "no output"
        return last, f"the writer process ended with code {code} before it finished ({tail})"

    async def _lost(self, record: KernelRecord, checkpoint_id: str,
                    why: str = "was lost before it reached the store (host memory was cleared)") -> None:
        """The staged copy is gone, or damaged, before it was written. The kernel falls back
        to its last durable checkpoint, and says so."""
        record.write_behind = None
        if record.last_checkpoint_id != checkpoint_id:
            return
        durable = record.durable_checkpoint
        infos = await asyncio.to_thread(list_checkpoints, self.retention.store()) if durable else []
        fallback = next((info for info in infos if info.id == durable and not info.problem), None)
        record.last_checkpoint = (CheckpointRef.listed(fallback) if fallback else
                                  CheckpointRef.durable_id(durable) if durable else None)
        record.notice = (f"The staged checkpoint {checkpoint_id} {why}; " +
                         (f"the kernel resumes from {durable}, its last durable checkpoint." if durable else
                          "there is no earlier checkpoint to resume from."))
        self.registry.records.save()
        self.emit("suspend", {"kernel_id": record.kernel_id, "phase": "write_failed", "checkpoint_id": checkpoint_id,
                              "error": record.notice})

    async def tidy(self, record: KernelRecord) -> None:
        """Drop the kernel's staged copies that are in the store and that no resume needs now
        (a suspended kernel keeps its copy, for a resume from memory; a running one keeps its
        files as spare ones, for its next suspend to write over; a shut down one keeps none).
        A copy not in the store yet is never dropped here."""
        host = self.host_memory
        known = self.registry.records.get(record.kernel_id) is record
        kept = record.state in AWAY and known
        keep = record.last_checkpoint_id if kept else None
        durable = set(await asyncio.to_thread(self.retention.store().ids))
        staged = await asyncio.to_thread(list_checkpoints, host.store())
        for info in staged:
            if (info.kernel_id == record.kernel_id and info.id in durable and info.id != keep
                    and info.id not in self.writing()):
                # a kernel that may suspend again keeps the memory, for its next copy to write over
                await asyncio.to_thread(host.drop, info.id, recycle_for=record.kernel_id if known else None)
