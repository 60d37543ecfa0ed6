"""Failover: a kernel that ended without being asked to (its process died, its job was
preempted, its node failed) comes back from its last checkpoint, with the same id, wherever
its placement starts it again, while the notebook's cells wait for it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..errors import OperationFailed
from ..kernels.lifecycle import KernelRecord, State
from ..kernels.record_parts import CheckpointRef
from ..placement import Departure
from ..waiting import until
from .runner import OperationRunner


class Failover(OperationRunner):
    """Notices lost processes and restores the last checkpoint into the restarted one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry.on_first_use.append(self._follow_restarts)

    def _follow_restarts(self, kernel_id: str, km: Any) -> None:
        km.add_restart_callback(lambda: self.process_lost(kernel_id, restarting=True), "restart")

    def process_lost(self, kernel_id: str, restarting: bool) -> None:
        """The kernel's process ended without being asked to.

        Called by jupyter_client's restarter just before it starts a new process
        (``restarting``), or by the websocket that found the process gone first. From now
        until the restore is over the notebook's messages wait.
        """
        record = self.registry.records.get(kernel_id)
        if record is None or record.state in (State.SUSPENDED, State.CHECKPOINTING):
            return  # a suspend ends the process on purpose; a dying suspend handles it
        first = record.state != State.RESTORING
        record.enter(State.RESTORING)
        record.away()
        if restarting:
            provisioner = self.registry.provisioner(kernel_id)
            dead = provisioner.run_id if provisioner else None
            self.tasks.start(f"failover {kernel_id}", self.failover(kernel_id, dead))
        elif first:
            self.tasks.start(f"restart watch {kernel_id}", self._expect_restart(record))

    async def _expect_restart(self, record: KernelRecord) -> None:
        """A process found gone is restarted by jupyter_client within seconds; if not, the
        waiting cells are told rather than left waiting."""
        await asyncio.sleep(self.registry.settings.failover_grace)
        if record.state == State.RESTORING and not record.lock.locked():
            record.enter(State.FAILED)
            record.last_error = "the kernel's process died and was not restarted"
            record.back(f"{record.last_error}; restart the kernel")

    async def failover(self, kernel_id: str, dead_run: str | None = None) -> None:
        """jupyter_client's restarter is starting the kernel again (instead of run
        ``dead_run``): restore the last checkpoint in it (the one the kernel took itself as
        it was told to end, if it did)."""
        record = self.registry.record(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)
        departure = provisioner.departure() if provisioner else None
        async with record.lock:
            checkpoint = record.last_checkpoint
            interrupted = None
            if departure is not None and departure.checkpoint_id:
                interrupted = departure.interrupted_cell
                last_cell = interrupted if interrupted is not None else departure.last_cell
                checkpoint = CheckpointRef.taken_by_kernel(departure.checkpoint_id, last_cell, time.time())
                record.last_checkpoint = checkpoint

            async def safe_state(message: str) -> tuple[State, str | None]:
                if provisioner is not None and not await provisioner.running():
                    # nothing runs, and jupyter_client will not start it again by itself
                    self.registry.km(kernel_id).stop_restarter()
                    return State.FAILED, (f"the kernel could not be started again ({message}); the cell was not "
                                          "run: restart the kernel")
                return State.RUNNING, (f"the kernel's process died and its checkpoint could not be restored "
                                       f"({message}); the cell was not run against an empty kernel")

            async with self._run(record, "restore-after-failure", "failure", State.RESTORING, safe_state) as op:
                lost = self.registry.watcher.ran_after(kernel_id, (checkpoint.last_cell or 0) if checkpoint else 0)
                await self._started_again(kernel_id, dead_run)
                await self.relocation.connection_changed(kernel_id)
                if checkpoint is None:
                    record.enter(State.RUNNING)
                    record.notice = "The kernel's process died and it had no checkpoint: it restarted empty."
                    record.back("the kernel's process died and it had no checkpoint, so it restarted with "
                                "nothing defined; the cell was not run: run the cells it needs again")
                    return
                # the pages saw jupyter_client's restart ("restarting"), and dropped their widgets
                report = await self._restore(record, checkpoint.id, "restore-after-failure", comms_kept=False)
                record.enter(State.RUNNING)
                self._tell(record, self._headline(kernel_id, departure, report["id"], lost, interrupted),
                           report, notice=True)
                op.done = {"checkpoint_id": report["id"], "lost_cells": lost}
                record.back(None)

    def _headline(self, kernel_id: str, departure: Departure | None, checkpoint_id: str, lost: list[int],
                  interrupted: int | None) -> str:
        """What the notebook and the model's notice say: what happened, where the kernel is
        now, and which cells to run again."""
        provisioner = self.registry.provisioner(kernel_id)
        now = provisioner.location().node if provisioner else None
        if departure is None:
            what = "The kernel's process died"
        else:
            moved = f" from {departure.node} to {now}" if departure.node and now and departure.node != now else ""
            where = f" on {departure.node}" if departure.node and not moved else ""
            what = f"The kernel was moved{moved} after {departure.cause}{where}"
        lines = [f"{what}; it was restored from checkpoint {checkpoint_id}."]
        if interrupted is not None:
            lines.append(f"Cell {interrupted} was interrupted: re-run it.")
        rerun = [c for c in lost if c != interrupted]
        if interrupted is None or rerun:
            lines.append(f"Cells run after that checkpoint: {', '.join(map(str, rerun)) or 'none'}.")
        if departure is not None and departure.error:
            lines.append(f"(The kernel's own checkpoint failed: {departure.error}.)")
        return " ".join(lines)

    async def _started_again(self, kernel_id: str, dead_run: str | None) -> None:
        """Wait until jupyter_client has started the new run: the call into it must use
        the connection info of the new one (its host and ports may be new)."""
        km = self.registry.km(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)
        timeout = self.registry.settings.ready_timeout
        deadline = time.monotonic() + timeout

        async def started() -> bool:
            nonlocal deadline
            if provisioner is not None and provisioner.run_id not in (None, dead_run) and km.ready.done() \
                    and await km.is_alive():
                return True
            if provisioner is not None and provisioner.start_error:
                raise OperationFailed(provisioner.start_error)
            if provisioner is not None and provisioner.waiting:
                # queued in its placement (which bounds that wait itself): the clock starts after
                deadline = time.monotonic() + timeout
            if time.monotonic() > deadline:
                raise OperationFailed("jupyter_client did not start the kernel again")
            return False

        await until(started, None, 0.2)
