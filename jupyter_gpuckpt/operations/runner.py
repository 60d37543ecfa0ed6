"""How every operation on a kernel runs: its events, its calls into the kernel, its safe state.

:class:`OperationRunner` is the base of :class:`~.operations.KernelOperations` (checkpoint,
suspend, resume, rebuild) and :class:`~.failover.Failover`. :meth:`OperationRunner._run` is the
one place that emits an operation's ``started`` / ``progress`` / ``done`` / ``failed`` events
and, whatever raises (a failed call into the kernel, a bug, the server stopping), puts the
kernel back in a safe state and keeps the reason in ``last_error``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuckpt_store import protocol

from ..errors import GPUCheckpointError, KernelNotFound, OperationFailed, StoreUnavailable
from ..events import Emit
from ..kernels import kernel_calls
from ..kernels.lifecycle import KernelRecord, State
from ..kernels.registry import KernelRegistry
from ..kernels.relocation import Relocation
from ..placement.gpus import GPUPool
from ..staging.host_memory import HostMemory
from ..staging.retention import Retention
from ..staging.write_behind import WriteBehind
from ..tasks import BackgroundTasks

SafeState = Callable[[str], Awaitable[tuple[State, str | None]]]
"""``safe_state(reason)`` after a failure: the state to go back to, and what cells waiting
for the kernel are told (None: they run)."""


@dataclass
class Operation:
    """One running operation: what its ``done`` event will say."""

    event: str
    reason: str
    started: float = field(default_factory=time.time)
    done: dict[str, Any] = field(default_factory=dict)


def _message(error: BaseException) -> str:
    if isinstance(error, asyncio.CancelledError):
        return "the server stopped during the operation"
    if isinstance(error, GPUCheckpointError | kernel_calls.KernelCallError):
        return str(error)
    return f"{type(error).__name__}: {error}"


class OperationRunner:
    """What every operation shares: the parts below it, given, and the one way to run.

    Parameters
    ----------
    registry
        The kernels and their records.
    relocation
        Told when a kernel may listen elsewhere (after a resume or a restart).
    retention
        The store, and pruning after a checkpoint.
    write_behind
        Where staged checkpoints are made durable.
    host_memory
        Where staged suspends put the kernel's state.
    tasks
        Where background work runs.
    emit
        ``emit(event, data)`` for lifecycle events (see ``events.py``).
    """

    def __init__(self, registry: KernelRegistry, relocation: Relocation, retention: Retention,
                 write_behind: WriteBehind, host_memory: HostMemory, tasks: BackgroundTasks, emit: Emit) -> None:
        self.registry = registry
        self.relocation = relocation
        self.retention = retention
        self.write_behind = write_behind
        self.host_memory = host_memory
        self.tasks = tasks
        self.emit = emit

    # -- the one way to run an operation -------------------------------------------------

    @asynccontextmanager
    async def _run(self, record: KernelRecord, event: str, reason: str, busy: State,
                   safe_state: SafeState) -> AsyncIterator[Operation]:
        op = Operation(event, reason)
        record.enter(busy)
        record.last_error = None
        record.progress = None
        if reason != "periodic":  # a new operation's outcome replaces the last one's notice
            record.notice = None
        self.emit(event, {"kernel_id": record.kernel_id, "phase": "started", "reason": reason})
        try:
            yield op
        except BaseException as error:
            message = _message(error)
            try:
                state, waiting = await safe_state(message)
            except Exception as cleanup:
                self.tasks.log.error("gpuckpt: cleaning up after %s of %s failed", event,
                                             record.kernel_id, exc_info=cleanup)
                state, waiting = State.FAILED, message
            record.fall_back(state, message)
            record.progress = None
            record.back(waiting)
            self.registry.records.save()
            self.emit(event, {"kernel_id": record.kernel_id, "phase": "failed", "reason": reason,
                              "error": message})
            if isinstance(error, Exception) and self.registry.shutting_down(record.kernel_id):
                # a DELETE ended it meanwhile: no failure of the operation's, the kernel is gone
                raise KernelNotFound(f"kernel {record.kernel_id} was shut down during its {event}") from error
            if isinstance(error, Exception) and not isinstance(error, GPUCheckpointError):
                raise OperationFailed(message) from error
            raise
        record.progress = None
        self.registry.records.save()
        # whoever is told it is done (suspended, say) can count on the ledger: a server killed
        # right after registers the kernel again as it was told
        await self.registry.records.saved()
        self.emit(event, {"kernel_id": record.kernel_id, "phase": "done", "reason": reason, **op.done,
                          "seconds": time.time() - op.started})

    async def _call(self, record: KernelRecord, function: str, event: str | None, **args: Any) -> dict[str, Any]:
        """Run ``function`` in the kernel (see :mod:`.kernel_calls`); its result.

        Its progress becomes the record's ``progress`` (0 to 1) and ``event`` events. The call
        is not the user's activity: a caller that runs it for the user says so itself.
        """
        kernel_id = record.kernel_id
        km = self.registry.km(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)

        def on_progress(done: int, total: int) -> None:
            record.progress = done / total
            if event is not None:
                self.emit(event, {"kernel_id": kernel_id, "phase": "progress", "bytes_done": done,
                                  "bytes_total": total})

        settings = self.registry.settings
        answer = await kernel_calls.call(km, function, ready_timeout=settings.ready_timeout,
                                         stall_timeout=settings.stall_timeout,
                                         alive=provisioner.running if provisioner else None,
                                         on_progress=on_progress, **args)
        if not answer["ok"]:
            raise OperationFailed(answer["error"])
        return dict(answer["result"])

    async def _check_store(self, record: KernelRecord) -> None:
        """Refuse before anything starts when the store cannot be written; the reason is also
        kept in ``last_error``, where the panel and ``jupyter gpuckpt list`` show it."""
        try:
            await self.retention.check_store()
        except StoreUnavailable as e:
            record.last_error = str(e)
            raise

    def _result(self, kernel_id: str, outcome: str) -> dict[str, Any]:
        """The kernel's model after an operation, with the GPUs' last reading (which GPUs it
        holds is current; reading them again would keep the answer waiting on NVML)."""
        return {**self.registry.model_with(kernel_id, GPUPool.instance().last.gpus), "outcome": outcome}

    async def _source(self, kernel_id: str, checkpoint_id: str) -> Path:
        """Where to read a checkpoint from: host memory when its staged copy is there and the
        kernel runs on this host (no disk read), else the store."""
        provisioner = self.registry.provisioner(kernel_id)
        host = self.host_memory
        if (provisioner is not None and provisioner.host_memory_shared
                and await asyncio.to_thread(host.has, checkpoint_id)):
            return host.root
        return self.registry.settings.store_root

    async def _restore(self, record: KernelRecord, checkpoint_id: str, event: str, comms_kept: bool) -> dict[str, Any]:
        """Restore ``checkpoint_id`` into the kernel's new process; ``comms_kept``: the notebook's
        pages kept the comms of the process checkpointed (see :data:`gpuckpt_store.protocol.COMMS_KEPT`)."""
        source = await self._source(record.kernel_id, checkpoint_id)
        args = {"checkpoint_id": checkpoint_id, protocol.COMMS_KEPT: comms_kept}
        try:
            report = await self._call(record, "restore", event, store=str(source), **args)
        except OperationFailed:
            # a copy in host memory that could not be read: the store's, if it has it (a failed
            # restore leaves the kernel's namespace as it was)
            store = self.registry.settings.store_root
            if source == store or checkpoint_id not in await asyncio.to_thread(self.retention.store().ids):
                raise
            source = store
            report = await self._call(record, "restore", event, store=str(source), **args)
        record.report = {**report, "source": "host memory" if source == self.host_memory.root else "store"}
        return record.report

    def _tell(self, record: KernelRecord, headline: str, report: dict[str, Any], notice: bool = False) -> None:
        """Keep the restore report for the notebook's next cell, and a notice for the panel when
        something was not restored (or always, with ``notice``)."""
        cells = ", ".join(map(str, report.get("cells_to_rerun") or []))
        offer = {"ask": f"Run `%gpuckpt rebuild` to re-run cell(s) {cells} and rebuild what was not restored.",
                 "always": f"Re-running cell(s) {cells} to rebuild what was not restored."}
        lines = [headline, str(report.get("text") or ""),
                 offer.get(self.registry.settings.rebuild_skipped, "") if cells else ""]
        record.pending_report = "\n".join(line for line in lines if line)
        missing = [s["name"] for kind in ("skipped", "lost", "not_set_up") for s in report.get(kind) or []]
        if missing or notice:  # the report has the reasons
            record.notice = headline + (f" Not restored: {', '.join(missing)}." if missing else "")
