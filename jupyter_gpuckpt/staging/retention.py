"""Retention: a kernel's checkpoints, in the store and staged in host memory, listed,
deleted and pruned, never one a suspended kernel needs to come back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gpuckpt_store import CheckpointError, CheckpointInfo, CheckpointStore, list_checkpoints, writable_problem

from ..errors import CheckpointInUse, CheckpointUntouchable, StoreUnavailable
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
        ``staged`` (in host memory only, until its write-behind ends); one that cannot be
        trusted is listed with its ``problem``."""
        self.registry.km(kernel_id)
        durable = await asyncio.to_thread(_listing, self.store(), kernel_id)
        staged = await asyncio.to_thread(_listing, self.host_memory.store(), kernel_id)
        known = {info.id for info in durable}
        infos = [(info, DURABLE) for info in durable] + [(i, STAGED) for i in staged if i.id not in known]
        return [{**info.to_json(), "durability": durability}
                for info, durability in sorted(infos, key=lambda pair: pair[0].id)]

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
        CheckpointUntouchable
            Its folder in the store is a symbolic link.
        gpuckpt_store.CheckpointNotFound
            There is no such checkpoint.
        """
        needed = self._needed_by(checkpoint_id)
        if needed is not None:
            raise CheckpointInUse(needed[1])
        await asyncio.to_thread(_delete, self.store(), checkpoint_id)
        await self._after_delete({checkpoint_id})

    async def prune(self, kernel_id: str) -> None:
        """Delete the kernel's oldest checkpoints beyond ``keep_checkpoints``."""
        keep = self.registry.settings.keep_checkpoints
        if not keep:
            return
        store = self.store()
        mine = [i.id for i in await asyncio.to_thread(list_checkpoints, store) if i.kernel_id == kernel_id]
        gone: set[str] = set()
        for checkpoint_id in [c for c in mine[:-keep] if self._needed_by(c) is None]:
            try:
                await asyncio.to_thread(_delete, store, checkpoint_id)
            except CheckpointUntouchable:
                continue  # kept: what a link points at is not the store's to remove
            gone.add(checkpoint_id)
        await self._after_delete(gone)

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


def _listing(store: CheckpointStore, kernel_id: str) -> list[CheckpointInfo]:
    """The checkpoints in ``store`` taken of the kernel, oldest first, those whose manifest cannot
    be trusted (a bad signature, another owner's) included where the manifest names the kernel:
    with their ``problem``, so the user sees why they cannot be restored rather than nothing."""
    return [info for info in list_checkpoints(store)
            if info.kernel_id == kernel_id or (info.problem and _named_kernel(store, info.id) == kernel_id)]


def _named_kernel(store: CheckpointStore, checkpoint_id: str) -> str | None:
    """The kernel an untrusted manifest names, read only to list it under that kernel (nothing
    else of it is used); None if it names none or cannot be read."""
    try:
        manifest = json.loads(store.manifest_path(checkpoint_id).read_bytes())
    except (OSError, ValueError, CheckpointError):
        return None
    named = manifest.get("kernel_id") if isinstance(manifest, dict) else None
    return named if isinstance(named, str) else None


def _delete(store: CheckpointStore, checkpoint_id: str) -> None:
    """Delete a checkpoint whose folder the store made. A folder that is a symbolic link is
    refused: it is neither followed nor removed, and what it points at is left as it is."""
    folder = store.manifest_path(checkpoint_id).parent
    if folder.is_symlink():
        raise CheckpointUntouchable(f"checkpoint {checkpoint_id} is a symbolic link in the store ({folder}), which "
                                    "the server neither follows nor removes; remove the link yourself if it is "
                                    "not wanted")
    store.delete(checkpoint_id)
