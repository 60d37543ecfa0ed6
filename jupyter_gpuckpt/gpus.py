"""The host's GPUs (from NVML) and which kernel holds which.

Which GPUs exist is read once, when the pool is made; what they are doing (memory in use,
utilization, processes) is read fresh by :meth:`GPUPool.readings`, once per policy pass and
once per request, never once per kernel.

A machine without NVML, or without GPUs, simply has an empty inventory and everything else
works. Tests (and machines with no GPU) can describe GPUs in a JSON file named by
``$JUPYTER_GPUCKPT_TEST_GPUS``: ``[{"uuid": "GPU-a", "name": "Test", "memory_total": ...}]``,
read again at every reading, so a test can change what they are doing.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from traitlets.config import SingletonConfigurable

TEST_GPUS = "JUPYTER_GPUCKPT_TEST_GPUS"


@dataclass
class GPU:
    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int = 0
    utilization: int = 0
    processes: list[dict[str, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _nvml_gpus(pynvml: Any) -> list[GPU]:
    """Every GPU of an initialized NVML."""
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            utilization = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except pynvml.NVMLError:
            utilization = 0
        try:
            procs = [{"pid": int(p.pid), "memory_used": int(p.usedGpuMemory or 0)}
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        except pynvml.NVMLError:
            procs = []
        name = pynvml.nvmlDeviceGetName(handle)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        gpus.append(GPU(i, uuid if isinstance(uuid, str) else uuid.decode(),
                        name if isinstance(name, str) else name.decode(),
                        int(memory.total), int(memory.used), utilization, procs))
    return gpus


def read_nvml() -> list[GPU]:
    """Every GPU NVML reports now; [] where NVML or its driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no device: no GPUs
        return []
    try:
        return _nvml_gpus(pynvml)
    finally:
        pynvml.nvmlShutdown()


def read_inventory() -> list[GPU]:
    """The test inventory if ``$JUPYTER_GPUCKPT_TEST_GPUS`` names one, else NVML's, now."""
    path = os.environ.get(TEST_GPUS)
    if not path:
        return read_nvml()
    with open(path) as f:
        entries = json.load(f)
    return [GPU(index=i, **entry) for i, entry in enumerate(entries)]


class GPUPool(SingletonConfigurable):
    """Hands GPUs to kernels by UUID; one per server process, shared by all provisioners."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gpus = read_inventory()
        self.holders: dict[str, str] = {}  # uuid -> kernel id
        self.waiting: dict[str, int] = {}  # kernel id -> GPUs it waits for
        self.on_wait: list[Callable[[], None]] = []
        """Called when a kernel starts waiting (the policy loop wakes for on-demand reclaim)."""
        self._freed = asyncio.Condition()

    def readings(self) -> list[GPU]:
        """The pool's GPUs with what they are doing now (one NVML read for all of them).

        A GPU that vanished since start is listed with its start-up figures; one that
        appeared is not used until the server restarts.
        """
        now = {g.uuid: g for g in read_inventory()}
        return [now.get(g.uuid, g) for g in self.gpus]

    def free(self) -> list[GPU]:
        return [g for g in self.gpus if g.uuid not in self.holders]

    def held_by(self, kernel_id: str, readings: list[GPU] | None = None) -> list[GPU]:
        """The GPUs ``kernel_id`` holds, from ``readings`` if given (else start-up figures)."""
        return [g for g in (self.gpus if readings is None else readings) if self.holders.get(g.uuid) == kernel_id]

    async def acquire(self, kernel_id: str, count: int, on_wait: Callable[[int, int], None] | None = None,
                      uuids: Sequence[str] = ()) -> list[GPU]:
        """Take ``count`` GPUs for ``kernel_id`` (those of ``uuids`` if given: a parked
        kernel goes back to its own), waiting while too few are free."""
        if count > len(self.gpus):
            raise ValueError(f"the kernel asks for {count} GPU(s); this server has {len(self.gpus)}")

        def usable() -> list[GPU]:
            return [g for g in self.free() if not uuids or g.uuid in uuids]

        async with self._freed:
            if len(usable()) < count:
                self.waiting[kernel_id] = count
                if on_wait is not None:
                    on_wait(count, len(usable()))
                for wake in self.on_wait:
                    wake()
            try:
                await self._freed.wait_for(lambda: len(usable()) >= count)
            finally:
                self.waiting.pop(kernel_id, None)
            taken = usable()[:count]
            for gpu in taken:
                self.holders[gpu.uuid] = kernel_id
            return taken

    async def release(self, kernel_id: str) -> None:
        async with self._freed:
            for uuid in [u for u, k in self.holders.items() if k == kernel_id]:
                del self.holders[uuid]
            self._freed.notify_all()
