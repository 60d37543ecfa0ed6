"""numpy arrays: data out of band, views rebuilt over their base's buffer.

An array is saved as the buffer of the array that owns its memory plus its dtype, shape,
strides and offset, so every view (slices, transposes, non-contiguous steps, pandas blocks
and their columns) shares one buffer again after restore. Memory maps are saved as data
and come back as ordinary arrays. Object arrays stay in the pickle; those holding only
``str`` (pandas' string columns) are packed into a few large UTF-8 runs first, see
:func:`_pack_strings`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from .arrays import INLINE_BYTES, OutOfBand, Reduction, host_slot


def _owner(arr: np.ndarray) -> np.ndarray:
    """The last ndarray in ``arr``'s base chain: the one whose memory the others view."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _address(arr: np.ndarray) -> int:
    return int(arr.__array_interface__["data"][0])


def _rebuild_ndarray(buffer: np.ndarray, dtype: np.dtype, shape: tuple[int, ...],
                     strides: tuple[int, ...], offset: int, writeable: bool) -> np.ndarray:
    arr = np.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)
    if not writeable:
        arr.flags.writeable = False
    return arr


STRINGS_PER_RUN = 1 << 16
"""Strings joined into one run; a run is one bytes object in the pickle."""
MIN_PACKED = 4096
"""Object arrays with fewer elements are pickled element by element."""
_SEP = "\x00"
Order = Literal["C", "F"]


def _pack_strings(arr: np.ndarray) -> tuple[Order, list[bytes]] | None:
    """``arr``'s elements as runs of NUL-joined UTF-8, or None unless every element is a
    ``str`` without NUL.

    Pickled one by one, each string costs a memo entry (16 bytes or more, for the whole
    save) and a few opcodes: packed, a column of 2 million short strings was written 9
    times faster (0.12 s instead of 1.04 s) and read 1.5 times faster (0.25 s, 0.38 s);
    see benchmarks/bench_peers.py, workload d, for the effect on a whole DataFrame.
    """
    order: Order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    flat = arr.ravel(order=order)
    runs = []
    for start in range(0, flat.size, STRINGS_PER_RUN):
        items = flat[start:start + STRINGS_PER_RUN].tolist()
        if set(map(type, items)) != {str}:
            return None
        joined = _SEP.join(items)
        if joined.count(_SEP) != len(items) - 1:
            return None
        runs.append(joined.encode("utf-8", "surrogatepass"))
    return order, runs


def _unpack_strings(shape: tuple[int, ...], order: Order, runs: list[bytes], writeable: bool) -> np.ndarray:
    flat = np.empty(math.prod(shape), dtype=object)
    pos = 0
    for run in runs:
        items = run.decode("utf-8", "surrogatepass").split(_SEP)
        flat[pos:pos + len(items)] = items
        pos += len(items)
    arr = flat.reshape(shape, order=order)
    if not writeable:
        arr.flags.writeable = False
    return arr


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    def reduce_ndarray(arr: np.ndarray) -> Reduction:
        if arr.dtype.hasobject:
            if arr.dtype == np.dtype(object) and arr.size >= MIN_PACKED and type(arr) is np.ndarray:
                packed = _pack_strings(arr)
                if packed is not None:
                    return _unpack_strings, (arr.shape, packed[0], packed[1], bool(arr.flags.writeable))
            return NotImplemented
        owner = _owner(arr)
        contiguous = owner.flags.c_contiguous or owner.flags.f_contiguous
        if arr.nbytes < INLINE_BYTES and (owner.nbytes < INLINE_BYTES or not contiguous):
            return NotImplemented
        if not contiguous:
            # A view of foreign memory with gaps: only its own elements can be saved.
            owner = np.ascontiguousarray(arr)
            source = arr
        else:
            source = owner
        view = owner.ravel(order="K").view(np.uint8).data
        slot = host_slot(out, ("numpy", id(source)), (source, owner), "numpy", view)
        offset = _address(arr) - _address(owner) if source is owner else 0
        strides = arr.strides if source is owner else owner.strides
        return _rebuild_ndarray, (slot, arr.dtype, arr.shape, strides, offset,
                                  bool(arr.flags.writeable))

    return {np.ndarray: reduce_ndarray, np.memmap: reduce_ndarray}


def from_host(memory: Any) -> np.ndarray:
    """A restored buffer (read into ``memory``) as the uint8 array views are rebuilt on."""
    return np.frombuffer(memory, np.uint8)
