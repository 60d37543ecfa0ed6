"""The host's GPUs (from NVML) and which kernel holds which.

Which GPUs exist is read once, when the pool is made; what they are doing (memory in use,
utilization, processes) is read fresh by :meth:`GPUPool.readings`, once per policy pass and
once per request, never once per kernel, and never on the event loop: NVML can take seconds,
or hang, with a driver in trouble, and every request would wait. A reading that fails or does
not answer within ``GPUPool.read_timeout`` is answered with the last good figures, marked as
such (:class:`Readings`), and the policy suspends no kernel on them.

A machine without NVML, or without GPUs, simply has an empty inventory and everything else
works. Tests (and machines with no GPU) can describe GPUs in a JSON file named by
``$JUPYTER_GPUCKPT_TEST_GPUS``: ``[{"uuid": "GPU-a", "name": "Test", "memory_total": ...}]``,
read again at every reading, so a test can change what they are doing.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from traitlets import Float
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


@dataclass(frozen=True)
class Readings:
    """The pool's GPUs as one reading found them."""

    gpus: list[GPU]
    read_at: float
    """When the freshest of these figures were read (``time.time()``)."""
    error: Exception | None = None
    """Why some figures are not fresh: the reading failed or did not answer (all of them are
    then the last good reading's), or it no longer reports some GPUs (theirs are)."""
    stale: frozenset[str] = frozenset()
    """UUIDs of the GPUs whose figures are not fresh."""

    @property
    def problem(self) -> str | None:
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"


def _in_thread(read: Callable[[], list[GPU]]) -> asyncio.Future[list[GPU]]:
    """``read()`` in a daemon thread of its own: a hung NVML holds that thread only, not the
    event loop, nor the default executor's threads (the store's listings run there), nor the
    server's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[GPU]] = loop.create_future()

    def settle(result: list[GPU], error: Exception | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def work() -> None:
        result: list[GPU] = []
        error: Exception | None = None
        try:
            result = read()
        except Exception as e:  # handed to whoever awaits the reading
            error = e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop closed meanwhile (the server stopped): nobody waits
            pass

    threading.Thread(target=work, name="gpuckpt GPU reading", daemon=True).start()
    return future


class GPUPool(SingletonConfigurable):
    """Hands GPUs to kernels by UUID; one per server process, shared by all provisioners."""

    read_timeout = Float(5.0, config=True, help="Seconds a GPU reading (NVML) may take; a request or policy "
                                                "pass that waited this long is answered from the last good "
                                                "reading (GET /api/gpuckpt/gpus says its age and the problem), "
                                                "and the policy suspends no kernel on those GPUs meanwhile.")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gpus = read_inventory()
        self.last = Readings(list(self.gpus), time.time())
        """The last reading that answered (the start-up inventory at first): what a reading
        that fails or hangs answers instead, and what an operation's result shows."""
        self.holders: dict[str, str] = {}  # uuid -> kernel id
        self.waiting: dict[str, int] = {}  # kernel id -> GPUs it waits for
        self.on_wait: list[Callable[[], None]] = []
        """Called when a kernel starts waiting (the policy loop wakes for on-demand reclaim)."""
        self._freed = asyncio.Condition()
        self._reading: asyncio.Future[list[GPU]] | None = None
        self._reading_since = 0.0

    async def readings(self) -> Readings:
        """The pool's GPUs with what they are doing now (one NVML read for all of them, in a
        thread; callers that ask while it runs share it).

        A reading that fails, or has not answered within :attr:`read_timeout` of its start,
        answers the last good figures with the error; a reading that hangs is not started again
        until it ends, so later callers are answered at once. A GPU that vanished since start
        is listed with its last figures, marked stale; one that appeared is not used until the
        server restarts.
        """
        loop = asyncio.get_running_loop()
        if self._reading is None or self._reading.done():
            self._reading = _in_thread(read_inventory)
            self._reading_since = loop.time()
        try:
            # not wait_for: Python 3.11's returns the result of a reading that ends as its caller is
            # cancelled, and the cancellation is lost (the server's stop then waits forever for the
            # policy loop)
            async with asyncio.timeout_at(self._reading_since + self.read_timeout):
                found = await asyncio.shield(self._reading)
        except TimeoutError:
            return self._stale(TimeoutError(f"NVML did not answer within {self.read_timeout:g} s"))
        except Exception as e:
            return self._stale(e)
        fresh = {g.uuid: g for g in found}
        last = {g.uuid: g for g in self.last.gpus}
        missing = frozenset(g.uuid for g in self.gpus if g.uuid not in fresh)
        error = LookupError(f"the reading no longer reports {', '.join(sorted(missing))}") if missing else None
        self.last = Readings([fresh.get(g.uuid) or last.get(g.uuid, g) for g in self.gpus], time.time(), error,
                             missing)
        return self.last

    def _stale(self, error: Exception) -> Readings:
        return Readings(self.last.gpus, self.last.read_at, error, frozenset(g.uuid for g in self.gpus))

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
