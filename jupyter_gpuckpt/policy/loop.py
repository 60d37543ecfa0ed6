"""The policy loop: a pass every ``policy_interval`` (and one at once when a kernel starts
waiting for GPUs), each deciding every kernel and acting on it, then suspending the parked
kernels past the host memory limit. Nothing but the server's stop ends it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..kernels.lifecycle import State
from ..kernels.registry import KernelRegistry
from ..operations.actions import KernelOperations
from ..placement.gpus import GPUPool
from ..staging.host_memory import HostMemory
from . import decisions as policy
from .reclaim import Reclaimer


class PolicyLoop:
    """Runs :class:`~.reclaim.Reclaimer` passes.

    Parameters
    ----------
    reclaimer
        Decides and acts on every kernel; its ``faults`` count what fails.
    registry
        The kernels, to find the parked ones.
    operations
        To suspend a parked kernel (``convert``).
    host_memory
        Whose limit parked kernels' state counts against.
    interval
        Seconds between passes (``GPUCheckpointApp.policy_interval``).
    on_busy
        Called after a pass in which a kernel runs a cell: the server's own activity.
    """

    def __init__(self, reclaimer: Reclaimer, registry: KernelRegistry, operations: KernelOperations,
                 host_memory: HostMemory, interval: float, on_busy: Callable[[], None]) -> None:
        self.reclaimer = reclaimer
        self.registry = registry
        self.operations = operations
        self.host_memory = host_memory
        self.interval = interval
        self.on_busy = on_busy

    async def run(self) -> None:
        """Pass after pass. Each source of a pass fails alone already
        (:meth:`.Reclaimer.run_pass`); a pass that fails all the same is logged and counted,
        and the next one comes at its time."""
        woken = asyncio.Event()
        GPUPool.instance().on_wait.append(woken.set)
        faults = self.reclaimer.faults
        while True:
            try:
                async with asyncio.timeout(self.interval):  # not wait_for: see GPUPool.readings
                    await woken.wait()
            except TimeoutError:
                pass
            woken.clear()
            try:
                await self.run_pass()
            except Exception as e:  # a bug, say: the policy goes on with the next pass
                faults.failed("pass", "", e)
            else:
                faults.worked("pass")

    async def run_pass(self) -> list[policy.Decision]:
        """One pass: every kernel decided (with one GPU reading) and acted on; parked kernels
        past the host memory limit suspended."""
        decisions = await self.reclaimer.run_pass()
        await self._settle_staging_memory()
        await self._convert_parked_over_limit()
        kernels = self.registry.kernel_manager
        if any(getattr(kernels.get_kernel(k), "execution_state", None) == "busy" for k in kernels.list_kernel_ids()):
            self.on_busy()
        return decisions

    async def _settle_staging_memory(self) -> None:
        """Spare files go with the kernels they were kept for, and give way to parked kernels'
        GPU state, which shares the host memory limit with them."""
        parked = sum((r.last_checkpoint.bytes_total or 0) if r.last_checkpoint else 0
                     for r in self.registry.records if r.state == State.PARKED)
        kernels = [record.kernel_id for record in self.registry.records]
        try:
            await asyncio.to_thread(self.host_memory.settle, kernels, parked)
        except Exception as e:  # the staging folder cannot be used: the next pass tries again
            self.reclaimer.faults.failed("staging", "", e)
        else:
            self.reclaimer.faults.worked("staging")

    async def _convert_parked_over_limit(self) -> None:
        """Parked kernels' GPU state lies in host memory, beside the staged copies: past
        ``host_memory_limit`` (when set: "0" turns staging off, not parking), the longest
        parked are suspended (their processes ended) until the rest fit."""
        limit = self.host_memory.limit
        parked = sorted((r for r in self.registry.records if r.state == State.PARKED),
                        key=lambda r: r.parked_at or 0)
        if not limit or not parked:
            return
        faults = self.reclaimer.faults
        try:
            held = await asyncio.to_thread(self.host_memory.used)
        except Exception as e:  # the staging folder cannot be read: the parked kernels stay this pass
            faults.failed("parked", "", e, f"reading what {self.host_memory.root} holds")
            return
        faults.worked("parked")
        held += sum((r.last_checkpoint.bytes_total or 0) if r.last_checkpoint else 0 for r in parked)
        for record in parked:
            if held <= limit:
                break
            try:
                await self.operations.convert(record.kernel_id, reason="policy")
                held -= (record.last_checkpoint.bytes_total or 0) if record.last_checkpoint else 0
            except Exception as e:  # this kernel's alone: the next is tried
                faults.failed("parked", record.kernel_id, e)
            else:
                faults.worked("parked", record.kernel_id)
