"""Failover: a kernel whose process died without being asked to comes back from its last
checkpoint, with the same id, while the notebook's cells wait for it."""

from __future__ import annotations

import asyncio
import time

from .errors import OperationFailed
from .lifecycle import KernelRecord, State
from .runner import OperationRunner


class Failover(OperationRunner):
    """Notices lost processes and restores the last checkpoint into the restarted one."""

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
                                   f"Cells run after that checkpoint: {cells}.", report, notice=True)
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
