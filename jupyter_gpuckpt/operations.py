"""The operations on a kernel: checkpoint, suspend, resume, failover, rebuild.

Every operation takes the kernel's lock and checks its state first, so two suspends, or a
suspend racing a resume, run one after the other and the second sees what the first did;
a request that finds nothing to do says so (``outcome``: ``already running``, ``already
suspended``). Each runs inside :meth:`KernelOperations._run`, the one place that emits its
``started`` / ``progress`` / ``done`` / ``failed`` events and, whatever raises (a failed call
into the kernel, a bug, the server stopping), puts the kernel back in a safe state and keeps
the reason in ``last_error``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import activity, kernel_calls
from .errors import GPUCheckpointError, NotSuspendable, OperationFailed, StoreUnavailable, WrongState
from .events import Emit
from .lifecycle import KernelRecord, State

if TYPE_CHECKING:
    from .manager import CheckpointManager

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


class KernelOperations:
    """The operations of one :class:`~.manager.CheckpointManager`."""

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
        self.emit(event, {"kernel_id": record.kernel_id, "phase": "done", "reason": reason, **op.done,
                          "seconds": time.time() - op.started})

    async def _call(self, record: KernelRecord, function: str, event: str | None, *, unseen: bool = True,
                    **args: Any) -> dict[str, Any]:
        """Run ``function`` in the kernel (see :mod:`.kernel_calls`); its result.

        Its progress becomes the record's ``progress`` (0 to 1) and ``event`` events; with
        ``unseen`` the call does not count as the user's activity.
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
        call = kernel_calls.call(km, function, ready_timeout=settings.ready_timeout,
                                 stall_timeout=settings.stall_timeout,
                                 alive=provisioner.running if provisioner else None, on_progress=on_progress,
                                 **args)
        if unseen:
            async with activity.unseen(km):
                answer = await call
        else:
            answer = await call
        if not answer["ok"]:
            raise OperationFailed(answer["error"])
        return dict(answer["result"])

    def _check_store(self, record: KernelRecord) -> None:
        """Refuse before anything starts when the store cannot be written; the reason is also
        kept in ``last_error``, where the panel and ``jupyter gpuckpt list`` show it."""
        try:
            self.manager.check_store()
        except StoreUnavailable as e:
            record.last_error = str(e)
            raise

    def _result(self, kernel_id: str, outcome: str) -> dict[str, Any]:
        return {**self.manager.model(kernel_id), "outcome": outcome}

    # -- checkpoint ----------------------------------------------------------------------

    async def _save(self, record: KernelRecord, event: str) -> dict[str, Any]:
        session = record.session or await self.manager.session_of(record.kernel_id)
        result = await self._call(record, "save", event, store=str(self.manager.settings.store_root),
                                  kernel_id=record.kernel_id, kernelspec=record.kernelspec,
                                  notebook=(session or {}).get("path"))
        record.last_checkpoint = {**result, "time": time.time()}
        await self.manager.prune(record.kernel_id)
        return result

    @staticmethod
    def _saved(result: dict[str, Any]) -> dict[str, Any]:
        return {"checkpoint_id": result["id"], "bytes": result["bytes_total"],
                "bytes_written": result["bytes_written"]}

    async def checkpoint(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Checkpoint a running kernel; it keeps running."""
        record = self.manager.record(kernel_id)
        async with record.lock:
            if record.state != State.RUNNING:
                raise WrongState(f"kernel {kernel_id} is {record.state.value}, not running")
            self._check_store(record)

            async def safe_state(message: str) -> tuple[State, str | None]:
                return (State.RESTORING if record.state == State.RESTORING else State.RUNNING), None

            async with self._run(record, "checkpoint", reason, State.RUNNING, safe_state) as op:
                op.done = self._saved(await self._save(record, "checkpoint"))
            return self._result(kernel_id, "done")

    # -- suspend -------------------------------------------------------------------------

    async def suspend(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Checkpoint, then end the process tree and free its GPUs; the kernel stays registered."""
        record = self.manager.record(kernel_id)
        provisioner = self.manager.provisioner(kernel_id)
        if provisioner is None:
            raise NotSuspendable(f"kernel {kernel_id} was not started with a gpuckpt kernelspec; "
                                 "it can be checkpointed but not suspended")
        async with record.lock:
            if record.state == State.SUSPENDED:
                return self._result(kernel_id, "already suspended")
            if record.state != State.RUNNING:
                raise WrongState(f"kernel {kernel_id} is {record.state.value}, not running")
            self._check_store(record)
            km = self.manager.km(kernel_id)
            gpus = len(provisioner.held_gpus())
            record.away()

            async def safe_state(message: str) -> tuple[State, str | None]:
                if await provisioner.running():  # still there: it keeps running, cells may go
                    provisioner.suspended = False
                    return State.RUNNING, None
                if provisioner.suspended:  # saved and ended, but ending it raised: suspended
                    return State.SUSPENDED, None
                return State.RESTORING, None  # it died: jupyter_client's restarter brings it back

            async with self._run(record, "suspend", reason, State.CHECKPOINTING, safe_state) as op:
                record.kernel_info = await self._kernel_info(kernel_id)
                record.session = await self.manager.session_of(kernel_id)
                result = await self._save(record, "suspend")
                idle = activity.idle_seconds(km)
                record.last_activity = None if idle is None else time.time() - idle
                survivors = await provisioner.suspend()
                record.state = State.SUSPENDED
                record.suspended_at = time.time()
                if survivors:
                    record.notice = (f"{len(survivors)} process(es) of the kernel outlived the suspend and may "
                                     f"still hold GPU memory, so its GPUs stay held: {', '.join(survivors)}")
                op.done = {**self._saved(result), "gpus_released": 0 if survivors else gpus,
                           "survivors": survivors}
            return self._result(kernel_id, "done")

    async def _kernel_info(self, kernel_id: str) -> dict[str, Any]:
        """The kernel's ``kernel_info`` reply, which the websocket answers with while it is away."""
        client = self.manager.km(kernel_id).client()
        client.session.session = f"{kernel_calls.INTERNAL_SESSION_PREFIX}info"
        client.start_channels(stdin=False, hb=False, control=False)
        try:
            reply = await client.kernel_info(reply=True, timeout=self.manager.settings.ready_timeout)
            return dict(reply["content"])
        except TimeoutError as e:
            raise OperationFailed("the kernel did not answer kernel_info") from e
        finally:
            client.stop_channels()

    # -- resume --------------------------------------------------------------------------

    async def resume(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Relaunch a suspended kernel's process and restore its last checkpoint into it."""
        record = self.manager.record(kernel_id)
        provisioner = self.manager.provisioner(kernel_id)
        async with record.lock:
            if record.state == State.RUNNING:
                return self._result(kernel_id, "already running")
            if record.state != State.SUSPENDED or provisioner is None or record.last_checkpoint is None:
                raise WrongState(f"kernel {kernel_id} is {record.state.value}, not suspended")
            checkpoint = record.last_checkpoint

            async def safe_state(message: str) -> tuple[State, str | None]:
                await provisioner.suspend()  # end what was started; the checkpoint is kept
                return State.SUSPENDED, f"the kernel could not be resumed: {message}"

            try:
                async with self._run(record, "resume", reason, State.RESTORING, safe_state) as op:
                    await provisioner.resume()
                    report = await self._restore(record, checkpoint["id"], "resume")
                    record.state = State.RUNNING
                    record.suspended_at = None
                    self._tell(record, f"Resumed from checkpoint {report['id']}.", report)
                    op.done = {"checkpoint_id": report["id"]}
                    record.back(None)
            finally:
                provisioner.started()
            if report.get("cells_to_rerun") and self.manager.settings.rebuild_skipped == "always":
                self.manager.tasks.start(f"rebuild {kernel_id}", self.rebuild(kernel_id, "resume"))
            return self._result(kernel_id, "done")

    async def _restore(self, record: KernelRecord, checkpoint_id: str, event: str) -> dict[str, Any]:
        report = await self._call(record, "restore", event, checkpoint_id=checkpoint_id,
                                  store=str(self.manager.settings.store_root))
        record.report = report
        return report

    def _tell(self, record: KernelRecord, headline: str, report: dict[str, Any]) -> None:
        """Keep the restore report for the notebook's next cell and the panel's notice."""
        lines = [headline, str(report.get("text") or "")]
        cells = report.get("cells_to_rerun") or []
        if cells and self.manager.settings.rebuild_skipped == "ask":
            lines.append(f"Run `%gpuckpt rebuild` to re-run cell(s) {', '.join(map(str, cells))} and rebuild "
                         "what was not restored.")
        elif cells and self.manager.settings.rebuild_skipped == "always":
            lines.append(f"Re-running cell(s) {', '.join(map(str, cells))} to rebuild what was not restored.")
        record.pending_report = "\n".join(line for line in lines if line)
        skipped = [*(report.get("skipped") or []), *(report.get("lost") or [])]
        if skipped or headline.startswith("The kernel's process died"):
            record.notice = "\n".join([headline, *[f"Not restored: {s['name']} ({s['reason']})" for s in skipped]])

    # -- failover ------------------------------------------------------------------------

    def process_lost(self, kernel_id: str, restarting: bool) -> None:
        """The kernel's process ended without being asked to.

        Called by jupyter_client's restarter just before it starts a new process
        (``restarting``), or by the websocket that found the process gone first. From now
        until the restore is over the notebook's messages wait.
        """
        record = self.manager.records.get(kernel_id)
        if record is None or record.state in (State.SUSPENDED, State.CHECKPOINTING):
            return  # a suspend ends the process on purpose; a dying suspend handles it
        first = record.state != State.RESTORING
        record.state = State.RESTORING
        record.away()
        if restarting:
            dead = getattr(self.manager.km(kernel_id).provisioner, "pid", None)
            self.manager.tasks.start(f"failover {kernel_id}", self.failover(kernel_id, dead))
        elif first:
            self.manager.tasks.start(f"restart watch {kernel_id}", self._expect_restart(record))

    async def _expect_restart(self, record: KernelRecord) -> None:
        """A process found gone is restarted by jupyter_client within seconds; if not, the
        waiting cells are told rather than left waiting."""
        await asyncio.sleep(self.manager.settings.failover_grace)
        if record.state == State.RESTORING and not record.lock.locked():
            record.state = State.FAILED
            record.last_error = "the kernel's process died and was not restarted"
            record.back(f"{record.last_error}; restart the kernel")

    async def failover(self, kernel_id: str, dead_pid: int | None = None) -> None:
        """jupyter_client's restarter is starting a new process (instead of ``dead_pid``):
        restore the last checkpoint in it."""
        record = self.manager.record(kernel_id)
        async with record.lock:
            checkpoint = record.last_checkpoint
            if checkpoint is None:
                record.state = State.RUNNING
                record.notice = "The kernel's process died and it had no checkpoint: it restarted empty."
                record.back("the kernel's process died and it had no checkpoint, so it restarted with nothing "
                            "defined; the cell was not run: run the cells it needs again")
                return

            async def safe_state(message: str) -> tuple[State, str | None]:
                return State.RUNNING, (f"the kernel's process died and its checkpoint could not be restored "
                                       f"({message}); the cell was not run against an empty kernel")

            async with self._run(record, "restore-after-failure", "failure", State.RESTORING, safe_state) as op:
                lost = self.manager.watcher.ran_after(kernel_id, checkpoint.get("last_cell") or 0)
                await self._started_again(kernel_id, dead_pid)
                report = await self._restore(record, checkpoint["id"], "restore-after-failure")
                record.state = State.RUNNING
                cells = ", ".join(map(str, lost)) or "none"
                self._tell(record, f"The kernel's process died; it was restored from checkpoint {report['id']}. "
                                   f"Cells run after that checkpoint: {cells}.", report)
                op.done = {"checkpoint_id": report["id"], "lost_cells": lost}
                record.back(None)

    async def _started_again(self, kernel_id: str, dead_pid: int | None) -> None:
        """Wait until jupyter_client has started the new process: the call into it must use
        the connection info of the new one (its ports may be new)."""
        km = self.manager.km(kernel_id)
        deadline = time.monotonic() + self.manager.settings.ready_timeout
        while not (getattr(km.provisioner, "pid", None) not in (None, dead_pid) and km.ready.done()
                   and await km.is_alive()):
            if time.monotonic() > deadline:
                raise OperationFailed("jupyter_client did not start the kernel again")
            await asyncio.sleep(0.2)

    # -- rebuild -------------------------------------------------------------------------

    async def rebuild(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Re-run, in order, the recorded cells that created what the last restore could not
        bring back; answers the model with ``rebuilt``: what ran, and what failed."""
        record = self.manager.record(kernel_id)
        async with record.lock:
            if record.state != State.RUNNING:
                raise WrongState(f"kernel {kernel_id} is {record.state.value}, not running")
            result = await self._call(record, "rebuild", None, unseen=False)
        record.report = {**(record.report or {}), "rebuilt": result}
        record.notice = str(result.get("text") or "") or None
        return {**self._result(kernel_id, "done"), "rebuilt": result}
