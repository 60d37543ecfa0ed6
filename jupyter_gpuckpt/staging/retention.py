"""Retention: a kernel's checkpoints, in the store and staged in host memory, listed,
deleted and pruned, never one a suspended kernel needs to come back."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuckpt_store import CheckpointStore, list_checkpoints, writable_problem

from ..errors import CheckpointInUse, StoreUnavailable
from ..kernels.lifecycle import KernelRecord, State
from ..kernels.record_parts import DURABLE, STAGED, CheckpointRef
from ..kernels.registry import KernelRegistry
from .host_memory import HostMemory


class Retention:
    """The checkpoints of the registry's kernels.

    Parameters
    ----------
    registry
        The kernels, whose records say which checkpoints they need.
    host_memory
        Where staged checkpoints are.
    """

    def __init__(self, registry: KernelRegistry, host_memory: HostMemory) -> None:
        self.registry = registry
        self.host_memory = host_memory

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.registry.settings.store_root)

    async def check_store(self) -> None:
        """Raise :class:`StoreUnavailable` if checkpoints cannot be written now (asked off the
        event loop: a store on a network file system may take its time to answer)."""
        problem = await asyncio.to_thread(writable_problem, self.registry.settings.store_root)
        if problem is not None:
            raise StoreUnavailable(f"{problem}; set GPUCheckpointApp.store_root to a writable folder "
                                   "(`jupyter gpuckpt doctor` checks it)")

    async def checkpoints(self, kernel_id: str) -> list[dict[str, Any]]:
        """The kernel's checkpoints, oldest first, each ``durable`` (in the store) or
        ``staged`` (in host memory only, until its write-behind ends)."""
        self.registry.km(kernel_id)
        durable = await asyncio.to_thread(list_checkpoints, self.store())
        staged = await asyncio.to_thread(list_checkpoints, self.host_memory.store())
        known = {info.id for info in durable}
        infos = [(info, DURABLE) for info in durable] + [(i, STAGED) for i in staged if i.id not in known]
        return [{**info.to_json(), "durability": durability}
                for info, durability in sorted(infos, key=lambda pair: pair[0].id) if info.kernel_id == kernel_id]

    def _needed_by(self, checkpoint_id: str) -> tuple[KernelRecord, str] | None:
        """The kernel that needs the checkpoint to come back, and why, if one does."""
        for record in self.registry.records:
            if record.state not in (State.SUSPENDED, State.PARKED, State.RESTORING, State.CHECKPOINTING):
                continue
            notebook = f" ({record.session.path})" if record.session else ""
            if record.last_checkpoint_id == checkpoint_id:
                return record, (f"checkpoint {checkpoint_id} is the one {record.state.value} kernel "
                                f"{record.kernel_id}{notebook} resumes from; resume the kernel or shut it down first")
            writing = record.last_checkpoint is not None and record.last_checkpoint.staged
            if record.durable_checkpoint == checkpoint_id and writing:
                return record, (f"checkpoint {checkpoint_id} is what {record.state.value} kernel "
                                f"{record.kernel_id}{notebook} falls back to until its newest checkpoint is "
                                "written to the store; try again once that is durable")
        return None

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint, unless a suspended or restoring kernel needs it.

        Raises
        ------
        CheckpointInUse
            A kernel of this server resumes from it.
        gpuckpt_store.CheckpointNotFound
            There is no such checkpoint.
        """
        needed = self._needed_by(checkpoint_id)
        if needed is not None:
            raise CheckpointInUse(needed[1])
        await asyncio.to_thread(self.store().delete, checkpoint_id)
        await self._after_delete({checkpoint_id})

    async def prune(self, kernel_id: str) -> None:
        """Delete the kernel's oldest checkpoints beyond ``keep_checkpoints``."""
        keep = self.registry.settings.keep_checkpoints
        if not keep:
            return
        store = self.store()
        mine = [i.id for i in await asyncio.to_thread(list_checkpoints, store) if i.kernel_id == kernel_id]
        doomed = [c for c in mine[:-keep] if self._needed_by(c) is None]
        for checkpoint_id in doomed:
            await asyncio.to_thread(store.delete, checkpoint_id)
        await self._after_delete(set(doomed))

    async def _after_delete(self, gone: set[str]) -> None:
        """A running kernel whose last checkpoint went falls back to its newest remaining one."""
        records = self.registry.records
        affected = [r for r in records if r.last_checkpoint_id in gone]
        if not affected:
            return
        infos = await asyncio.to_thread(list_checkpoints, self.store())
        for record in affected:
            remaining = [i for i in infos if i.kernel_id == record.kernel_id and not i.problem]
            record.last_checkpoint = CheckpointRef.listed(remaining[-1]) if remaining else None
            if record.durable_checkpoint in gone:
                record.durable_checkpoint = remaining[-1].id if remaining else None
        records.save()
