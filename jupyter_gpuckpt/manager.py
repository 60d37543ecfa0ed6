"""The server-side lifecycle of checkpointable kernels: checkpoint, suspend, resume, failover.

One :class:`CheckpointManager` per server. Every operation on a kernel takes that kernel's
lock and checks its state first, so two suspends, or a suspend racing a resume, run one
after the other and the second sees what the first did. A failed operation returns the
kernel to its last safe state and keeps the reason in ``last_error``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_client.session import Session
from tornado.web import HTTPError

from kernel_hooks.listing import list_checkpoints
from kernel_hooks.store import CheckpointStore

from . import kernel_calls
from .ledger import Ledger
from .lifecycle import KernelRecord, State
from .provisioner import START_SUSPENDED, GPUCheckpointProvisioner

Emit = Callable[[str, dict[str, Any]], None]


class CheckpointManager:
    """Runs checkpoint operations against jupyter_server's kernel manager.

    Parameters
    ----------
    kernel_manager
        The server's ``MappingKernelManager``.
    store_root
        Checkpoint store root handed to the in-kernel engine.
    ledger
        Where suspended kernels are remembered across restarts.
    call_timeout
        Seconds a checkpoint or restore may take inside the kernel.
    emit
        ``emit(event, data)`` for lifecycle events (see ``events.py``).
    """

    def __init__(self, kernel_manager: Any, store_root: Path, ledger: Ledger, call_timeout: float,
                 emit: Emit, keep_checkpoints: int = 0, session_manager: Any = None) -> None:
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.store_root = store_root
        self.keep_checkpoints = keep_checkpoints
        self.ledger = ledger
        self.call_timeout = call_timeout
        self.emit = emit
        self.records: dict[str, KernelRecord] = {}
        self.executions: dict[str, list[int]] = {}
        self._watchers: dict[str, Any] = {}

    # -- records -------------------------------------------------------------------------

    def km(self, kernel_id: str) -> Any:
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            raise HTTPError(404, f"no kernel {kernel_id}") from None

    def provisioner(self, kernel_id: str) -> GPUCheckpointProvisioner | None:
        provisioner = getattr(self.km(kernel_id), "provisioner", None)
        return provisioner if isinstance(provisioner, GPUCheckpointProvisioner) else None

    def record(self, kernel_id: str) -> KernelRecord:
        km = self.km(kernel_id)
        if kernel_id not in self.records:
            self.records[kernel_id] = KernelRecord(kernel_id, kernelspec=km.kernel_name)
            km.add_restart_callback(lambda: self._on_restarted(kernel_id), "restart")
            self._watch(kernel_id)
        return self.records[kernel_id]

    def _watch(self, kernel_id: str) -> None:
        """Follow the cells the kernel runs, to name those a failure loses."""
        km = self.km(kernel_id)
        stream = km.connect_iopub()
        session = Session(key=km.session.key)
        counts = self.executions.setdefault(kernel_id, [])

        def on_message(parts: list[bytes]) -> None:
            _, frames = session.feed_identities(parts)
            msg = session.deserialize(frames)
            if msg["header"]["msg_type"] == "execute_input":
                counts.append(int(msg["content"]["execution_count"]))

        stream.on_recv(on_message)
        self._watchers[kernel_id] = stream

    def forget(self, kernel_id: str) -> None:
        self.records.pop(kernel_id, None)
        self.executions.pop(kernel_id, None)
        stream = self._watchers.pop(kernel_id, None)
        if stream is not None:
            stream.close()

    def save_ledger(self) -> None:
        self.ledger.save({k: r.ledger_entry() for k, r in self.records.items()
                          if r.state in (State.SUSPENDED, State.RESTORING) or r.last_checkpoint})

    def model(self, kernel_id: str) -> dict[str, Any]:
        km = self.km(kernel_id)
        record = self.record(kernel_id)
        provisioner = self.provisioner(kernel_id)
        model = record.to_json()
        model.update({
            "name": km.kernel_name,
            "execution_state": getattr(km, "execution_state", None),
            "last_activity": km.last_activity.isoformat() if getattr(km, "last_activity", None) else None,
            "idle_seconds": self.idle_seconds(kernel_id),
            "gpus": [g.to_json() for g in provisioner.pool.held_by(kernel_id)] if provisioner else [],
            "waiting_for_gpus": provisioner.waiting_for_gpus if provisioner else None,
            "suspendable": provisioner is not None,
            "connections": self.kernel_manager._kernel_connections.get(kernel_id, 0),
        })
        return model

    def idle_seconds(self, kernel_id: str) -> float | None:
        last = getattr(self.km(kernel_id), "last_activity", None)
        return None if last is None else max(0.0, time.time() - last.timestamp())

    # -- operations ----------------------------------------------------------------------

    async def _call(self, kernel_id: str, function: str, event: str, /, **kwargs: Any) -> dict[str, Any]:
        """Call the engine in the kernel without counting as the user's activity.

        Its progress becomes the record's ``progress`` (0 to 1) and ``event`` events.
        """
        km = self.km(kernel_id)
        record = self.record(kernel_id)
        before = getattr(km, "last_activity", None)

        def on_progress(done: int, total: int) -> None:
            record.progress = done / total
            self.emit(event, {"kernel_id": kernel_id, "phase": "progress", "bytes_done": done,
                              "bytes_total": total})

        try:
            return await kernel_calls.call(km, function, self.call_timeout, on_progress=on_progress, **kwargs)
        finally:
            record.progress = None
            # jupyter_server's iopub watcher sees our busy/idle status messages on its own
            # socket; let it drain, then put the user's last activity back.
            await asyncio.sleep(0.2)
            if before is not None:
                km.last_activity = before

    async def _save(self, kernel_id: str, record: KernelRecord, event: str) -> dict[str, Any]:
        answer = await self._call(kernel_id, "save", event, store=str(self.store_root), kernel_id=kernel_id,
                                  kernelspec=record.kernelspec)
        if not answer["ok"]:
            raise HTTPError(500, f"checkpoint failed: {answer['error']}")
        record.last_checkpoint = {**answer["result"], "time": time.time()}
        if self.keep_checkpoints:
            await asyncio.to_thread(self._prune, kernel_id)
        return dict(answer["result"])

    def _prune(self, kernel_id: str) -> None:
        """Delete this kernel's oldest checkpoints beyond ``keep_checkpoints``."""
        store = CheckpointStore(self.store_root)
        mine = [info.id for info in list_checkpoints(store) if info.kernel_id == kernel_id]
        for checkpoint_id in mine[: -self.keep_checkpoints]:
            store.delete(checkpoint_id)

    async def checkpoint(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Checkpoint a running kernel; it keeps running."""
        record = self.record(kernel_id)
        async with record.lock:
            if record.state != State.RUNNING:
                raise HTTPError(409, f"kernel {kernel_id} is {record.state.value}, not running")
            started = time.time()
            self.emit("checkpoint", {"kernel_id": kernel_id, "phase": "started", "reason": reason})
            try:
                result = await self._save(kernel_id, record, "checkpoint")
            except (HTTPError, kernel_calls.KernelCallError) as e:
                record.last_error = _message(e)
                self.emit("checkpoint", {"kernel_id": kernel_id, "phase": "failed", "reason": reason,
                                         "error": record.last_error})
                raise HTTPError(500, record.last_error) from e
            record.last_error = None
            self.save_ledger()
            self.emit("checkpoint", {"kernel_id": kernel_id, "phase": "done", "reason": reason,
                                     "checkpoint_id": result["id"], "bytes": result["bytes_total"],
                                     "bytes_written": result["bytes_written"],
                                     "seconds": time.time() - started})
            return self.model(kernel_id)

    async def suspend(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Checkpoint, then end the process and free its GPUs; the kernel stays registered."""
        record = self.record(kernel_id)
        provisioner = self.provisioner(kernel_id)
        if provisioner is None:
            raise HTTPError(409, f"kernel {kernel_id} was not started with a gpuckpt kernelspec; "
                                 "it can be checkpointed but not suspended")
        async with record.lock:
            if record.state == State.SUSPENDED:
                return self.model(kernel_id)
            if record.state != State.RUNNING:
                raise HTTPError(409, f"kernel {kernel_id} is {record.state.value}")
            started = time.time()
            record.state = State.CHECKPOINTING
            self.emit("suspend", {"kernel_id": kernel_id, "phase": "started", "reason": reason})
            try:
                record.kernel_info = await self._kernel_info(kernel_id)
                record.session = await self._session_of(kernel_id)
                result = await self._save(kernel_id, record, "suspend")
            except (HTTPError, kernel_calls.KernelCallError) as e:
                record.state = State.RUNNING
                record.last_error = _message(e)
                self.emit("suspend", {"kernel_id": kernel_id, "phase": "failed", "reason": reason,
                                      "error": record.last_error})
                raise HTTPError(500, record.last_error) from e
            gpus = len(provisioner.pool.held_by(kernel_id))
            await provisioner.suspend()
            record.state = State.SUSPENDED
            record.suspended_at = time.time()
            record.last_error = None
            record.resumed.clear()
            self.save_ledger()
            self.emit("suspend", {"kernel_id": kernel_id, "phase": "done", "reason": reason,
                                  "checkpoint_id": result["id"], "gpus_released": gpus,
                                  "bytes": result["bytes_total"], "bytes_written": result["bytes_written"],
                                  "seconds": time.time() - started})
            return self.model(kernel_id)

    async def _session_of(self, kernel_id: str) -> dict[str, Any] | None:
        if self.session_manager is None:
            return None
        for session in await self.session_manager.list_sessions():
            if session["kernel"]["id"] == kernel_id:
                return {key: session.get(key) for key in ("path", "name", "type")}
        return None

    async def _kernel_info(self, kernel_id: str) -> dict[str, Any]:
        client = self.km(kernel_id).client()
        client.session.session = f"{kernel_calls.INTERNAL_SESSION_PREFIX}info"
        client.start_channels(stdin=False, hb=False, control=False)
        try:
            reply = await client.kernel_info(reply=True, timeout=self.call_timeout)
            return dict(reply["content"])
        finally:
            client.stop_channels()

    async def resume(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Relaunch a suspended kernel's process and restore its last checkpoint into it."""
        record = self.record(kernel_id)
        provisioner = self.provisioner(kernel_id)
        async with record.lock:
            if record.state == State.RUNNING:
                return self.model(kernel_id)
            if record.state != State.SUSPENDED or provisioner is None or record.last_checkpoint is None:
                raise HTTPError(409, f"kernel {kernel_id} is {record.state.value}, not suspended")
            started = time.time()
            record.state = State.RESTORING
            self.emit("resume", {"kernel_id": kernel_id, "phase": "started", "reason": reason})
            try:
                await provisioner.resume()
                report = await self._restore(kernel_id, record, "resume")
            except (HTTPError, kernel_calls.KernelCallError) as e:
                await provisioner.suspend()
                record.state = State.SUSPENDED
                record.last_error = _message(e)
                self.emit("resume", {"kernel_id": kernel_id, "phase": "failed", "reason": reason,
                                     "error": record.last_error})
                raise HTTPError(500, record.last_error) from e
            record.state = State.RUNNING
            record.suspended_at = None
            record.last_error = None
            record.notice = _report_notice(report)
            self.save_ledger()
            record.resumed.set()
            self.emit("resume", {"kernel_id": kernel_id, "phase": "done", "reason": reason,
                                 "checkpoint_id": report["id"], "seconds": time.time() - started})
            return self.model(kernel_id)

    async def _restore(self, kernel_id: str, record: KernelRecord, event: str) -> dict[str, Any]:
        assert record.last_checkpoint is not None
        answer = await self._call(kernel_id, "restore", event, checkpoint_id=record.last_checkpoint["id"],
                                  store=str(self.store_root))
        if not answer["ok"]:
            raise HTTPError(500, f"restore failed: {answer['error']}")
        return dict(answer["result"])

    def _on_restarted(self, kernel_id: str) -> None:
        """jupyter_server's restarter relaunched a dead kernel: bring its state back."""
        asyncio.ensure_future(self._failover(kernel_id))

    async def _failover(self, kernel_id: str) -> None:
        record = self.record(kernel_id)
        async with record.lock:
            checkpoint = record.last_checkpoint
            if checkpoint is None:
                record.notice = "The kernel died and had no checkpoint; it restarted empty."
                return
            record.state = State.RESTORING
            started = time.time()
            self.emit("restore-after-failure", {"kernel_id": kernel_id, "phase": "started"})
            ran = self.executions.get(kernel_id, [])
            lost = sorted({c for c in ran if c > checkpoint["last_cell"]})
            try:
                report = await self._restore(kernel_id, record, "restore-after-failure")
            except (HTTPError, kernel_calls.KernelCallError) as e:
                record.state = State.RUNNING
                record.last_error = f"restore after failure: {_message(e)}"
                self.emit("restore-after-failure", {"kernel_id": kernel_id, "phase": "failed",
                                                    "error": record.last_error})
                return
            record.state = State.RUNNING
            cells = ", ".join(map(str, lost)) or "none"
            record.notice = (f"The kernel's process died; it was restored from checkpoint "
                             f"{report['id']}. Cells run after that checkpoint: {cells}. "
                             + (_report_notice(report) or ""))
            self.emit("restore-after-failure", {"kernel_id": kernel_id, "phase": "done",
                                                "checkpoint_id": report["id"], "lost_cells": lost,
                                                "seconds": time.time() - started})

    # -- server restart ------------------------------------------------------------------

    async def reregister_suspended(self) -> None:
        """Register again, suspended and with the same ids, the kernels the ledger lists."""
        for kernel_id, entry in self.ledger.load().items():
            if entry.get("state") not in (State.SUSPENDED.value, State.RESTORING.value):
                continue
            if kernel_id in self.kernel_manager:
                continue
            await self.kernel_manager.start_kernel(kernel_id=kernel_id, kernel_name=entry["kernelspec"],
                                                   env={**os.environ, START_SUSPENDED: "1"})
            record = self.record(kernel_id)
            record.state = State.SUSPENDED
            record.last_checkpoint = entry.get("last_checkpoint")
            record.suspended_at = entry.get("suspended_at")
            record.kernel_info = entry.get("kernel_info")
            record.session = entry.get("session")
            if record.session and self.session_manager is not None:
                # the notebook finds its suspended kernel again, and resumes it by running a cell
                await self.session_manager.create_session(kernel_id=kernel_id, **record.session)


def _message(error: Exception) -> str:
    return str(error.log_message) if isinstance(error, HTTPError) else str(error)


def _report_notice(report: dict[str, Any]) -> str | None:
    skipped = report.get("skipped") or []
    if not skipped:
        return None
    names = ", ".join(f"{s['name']} ({s['reason']})" for s in skipped)
    cells = ", ".join(map(str, report.get("cells_to_rerun") or []))
    return f"Not restored: {names}. Re-run cells {cells} to rebuild them."
