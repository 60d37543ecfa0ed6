"""cupy arrays: device memory out of band, staged through pinned host buffers.

Contiguous arrays are saved from their own memory; other views are first made
contiguous on the device. Each array comes back on the GPU of the same index. A GPU is
synchronized before anything is copied off it: a copy waits for the current stream only,
not for a non-blocking stream's kernels that may still be writing the array.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import cupy
import cupyx
import numpy as np

from gpuckpt_store import BufferRecord

from ..blobs import DEVICE_CHUNK_BYTES
from ..blobs.buffers import BufferSource, Staging, StagingSlot
from .arrays import INLINE_BYTES, OutOfBand, Reduction, staged_slot

STAGING_SLOTS = 8
_runtime = cupy.cuda.runtime


def pinned_staging(chunk: int = DEVICE_CHUNK_BYTES) -> Staging:
    slots = []
    for _ in range(STAGING_SLOTS):
        host = cupyx.empty_pinned((chunk,), dtype=np.uint8)
        slots.append(StagingSlot(memoryview(host), host))
    return Staging(slots)


def _rebuild_cupy(flat: cupy.ndarray, dtype: Any, shape: tuple[int, ...],
                  strides: tuple[int, ...]) -> cupy.ndarray:
    with cupy.cuda.Device(flat.device.id):
        return cupy.ndarray(shape, dtype, memptr=flat.data, strides=strides)


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    synchronized: set[int] = set()

    def synchronize(index: int) -> None:
        """Wait, once per pass, for the work queued on GPU ``index`` on every stream."""
        if index not in synchronized:
            cupy.cuda.Device(index).synchronize()
            synchronized.add(index)

    def reduce_cupy(arr: cupy.ndarray) -> Reduction:
        index = arr.device.id
        synchronize(index)  # small arrays too: cupy pickles them by copying them to the host
        if arr.nbytes < INLINE_BYTES or arr.dtype.hasobject:
            return NotImplemented
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            with cupy.cuda.Device(index):
                arr = cupy.ascontiguousarray(arr)
                cupy.cuda.get_current_stream().synchronize()
        device = f"cuda:{index}"
        pointer = arr.data.ptr
        key = ("cupy", device, pointer, arr.nbytes)
        out.note_device(key, device, arr.nbytes)

        def copy_out(offset: int, length: int, slot: StagingSlot) -> None:
            with cupy.cuda.Device(index):
                _runtime.memcpy(slot.native.ctypes.data, pointer + offset, length,
                                _runtime.memcpyDeviceToHost)

        slot = staged_slot(out, key, arr, "cupy", device, arr.nbytes, copy_out, pinned_staging)
        return _rebuild_cupy, (slot, arr.dtype, arr.shape, arr.strides)

    return {cupy.ndarray: reduce_cupy}


def load_device(record: BufferRecord, device: str, source: BufferSource, what: str,
                staging: Staging) -> tuple[cupy.ndarray, list[Future[None]]]:
    """An array on ``device`` and the reads that fill it."""
    index = int(device.split(":")[1])
    with cupy.cuda.Device(index):
        flat = cupy.empty(record.nbytes, dtype=cupy.uint8)

    def copy_in(offset: int, length: int, slot: StagingSlot) -> None:
        with cupy.cuda.Device(index):
            _runtime.memcpy(flat.data.ptr + offset, slot.native.ctypes.data, length,
                            _runtime.memcpyHostToDevice)

    return flat, source.load_device(record, copy_in, staging, what)


def visible_gpus() -> int:
    """GPUs cupy can see here; 0 where there is no usable driver (a CPU machine)."""
    try:
        return int(_runtime.getDeviceCount())
    except _runtime.CUDARuntimeError:
        return 0


def free_bytes(index: int) -> int:
    """Bytes a restore can allocate on GPU ``index``: the driver's free memory plus what cupy's
    memory pool holds there unused, which cupy hands out before asking the driver."""
    with cupy.cuda.Device(index):
        return int(_runtime.memGetInfo()[0]) + int(cupy.get_default_memory_pool().free_bytes())


def describe_gpu(index: int) -> dict[str, Any]:
    """GPU ``index``'s model, compute capability and memory, for the checkpoint's record."""
    props = _runtime.getDeviceProperties(index)
    name = props["name"]
    version = _runtime.runtimeGetVersion()
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "capability": f"{props['major']}.{props['minor']}", "total_memory": int(props["totalGlobalMem"]),
            "cuda": f"{version // 1000}.{version % 1000 // 10}"}
