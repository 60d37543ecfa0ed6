"""The operations users and the policy ask for: checkpoint, suspend, resume, rebuild.

Every operation takes the kernel's lock and checks its state first, so two suspends, or a
suspend racing a resume, run one after the other and the second sees what the first did;
a request that finds nothing to do says so (``outcome``: ``already running``, ``already
suspended``). Each runs inside :meth:`~.runner.OperationRunner._run`, which emits its events
and returns the kernel to a safe state whatever raises.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from . import activity, kernel_calls
from .errors import NotSuspendable, OperationFailed, WrongState
from .lifecycle import KernelRecord, State
from .placement import GPUNeeds
from .runner import OperationRunner


class KernelOperations(OperationRunner):
    """The operations users and the policy ask for, on the kernels of one
    :class:`~.manager.CheckpointManager`."""

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
            gpus = len(provisioner.location().gpus)
            record.away()

            async def safe_state(message: str) -> tuple[State, str | None]:
                if await provisioner.running():  # still there: it keeps running, cells may go
                    provisioner.keep_running()
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
                self.manager.note_placement(kernel_id)
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
                    needs = GPUNeeds.of_manifest(await asyncio.to_thread(self.manager.store().read_manifest,
                                                                         checkpoint["id"]))
                    await provisioner.resume(needs)
                    await self.manager.connection_changed(kernel_id)
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
