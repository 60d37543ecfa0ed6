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
from typing import TYPE_CHECKING, Any

from gpuckpt_store import protocol

from ..errors import GPUCheckpointError, OperationFailed, StoreUnavailable
from ..extension.events import Emit
from ..kernels import kernel_calls
from ..kernels.lifecycle import KernelRecord, State
from ..placement.gpus import GPUPool

if TYPE_CHECKING:
    from ..kernels.manager import CheckpointManager

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
    """What every operation of one :class:`~.manager.CheckpointManager` shares."""

    def __init__(self, manager: CheckpointManager, emit: Emit) -> None:
        self.manager = manager
        self.emit = emit

    # -- the one way to run an operation -------------------------------------------------

    @asynccontextmanager
    async def _run(self, record: KernelRecord, event: str, reason: str, busy: State,
                   safe_state: SafeState) -> AsyncIterator[Operation]:
        op = Operation(event, reason)
        record.state = busy
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
                record.state, waiting = await safe_state(message)
            except Exception as cleanup:
                self.manager.tasks.log.error("gpuckpt: cleaning up after %s of %s failed", event,
                                             record.kernel_id, exc_info=cleanup)
                record.state, waiting = State.FAILED, message
            record.last_error = message
            record.progress = None
            record.back(waiting)
            self.manager.records.save()
            self.emit(event, {"kernel_id": record.kernel_id, "phase": "failed", "reason": reason,
                              "error": message})
            if isinstance(error, Exception) and not isinstance(error, GPUCheckpointError):
                raise OperationFailed(message) from error
            raise
        record.progress = None
        self.manager.records.save()
        # whoever is told it is done (suspended, say) can count on the ledger: a server killed
        # right after registers the kernel again as it was told
        await self.manager.records.saved()
        self.emit(event, {"kernel_id": record.kernel_id, "phase": "done", "reason": reason, **op.done,
                          "seconds": time.time() - op.started})

    async def _call(self, record: KernelRecord, function: str, event: str | None, **args: Any) -> dict[str, Any]:
        """Run ``function`` in the kernel (see :mod:`.kernel_calls`); its result.

        Its progress becomes the record's ``progress`` (0 to 1) and ``event`` events. The call
        is not the user's activity: a caller that runs it for the user says so itself.
        """
        kernel_id = record.kernel_id
        km = self.manager.km(kernel_id)
        provisioner = self.manager.provisioner(kernel_id)

        def on_progress(done: int, total: int) -> None:
            record.progress = done / total
            if event is not None:
                self.emit(event, {"kernel_id": kernel_id, "phase": "progress", "bytes_done": done,
                                  "bytes_total": total})

        settings = self.manager.settings
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
            await self.manager.check_store()
        except StoreUnavailable as e:
            record.last_error = str(e)
            raise

    def _result(self, kernel_id: str, outcome: str) -> dict[str, Any]:
        """The kernel's model after an operation, with the GPUs' last reading (which GPUs it
        holds is current; reading them again would keep the answer waiting on NVML)."""
        return {**self.manager.model_with(kernel_id, GPUPool.instance().last.gpus), "outcome": outcome}

    async def _source(self, kernel_id: str, checkpoint_id: str) -> Path:
        """Where to read a checkpoint from: host memory when its staged copy is there and the
        kernel runs on this host (no disk read), else the store."""
        provisioner = self.manager.provisioner(kernel_id)
        host = self.manager.host_memory
        if (provisioner is not None and provisioner.host_memory_shared
                and await asyncio.to_thread(host.has, checkpoint_id)):
            return host.root
        return self.manager.settings.store_root

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
            store = self.manager.settings.store_root
            if source == store or checkpoint_id not in await asyncio.to_thread(self.manager.store().ids):
                raise
            source = store
            report = await self._call(record, "restore", event, store=str(source), **args)
        record.report = {**report, "source": "host memory" if source == self.manager.host_memory.root else "store"}
        return record.report

    def _tell(self, record: KernelRecord, headline: str, report: dict[str, Any], notice: bool = False) -> None:
        """Keep the restore report for the notebook's next cell, and a notice for the panel when
        something was not restored (or always, with ``notice``)."""
        cells = ", ".join(map(str, report.get("cells_to_rerun") or []))
        offer = {"ask": f"Run `%gpuckpt rebuild` to re-run cell(s) {cells} and rebuild what was not restored.",
                 "always": f"Re-running cell(s) {cells} to rebuild what was not restored."}
        lines = [headline, str(report.get("text") or ""),
                 offer.get(self.manager.settings.rebuild_skipped, "") if cells else ""]
        record.pending_report = "\n".join(line for line in lines if line)
        missing = [s["name"] for s in [*(report.get("skipped") or []), *(report.get("lost") or [])]]
        if missing or notice:  # the report has the reasons
            record.notice = headline + (f" Not restored: {', '.join(missing)}." if missing else "")
