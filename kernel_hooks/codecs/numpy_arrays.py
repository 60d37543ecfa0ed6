"""numpy arrays: data out of band, views rebuilt over their base's buffer.

An array is saved as the buffer of the array that owns its memory plus its dtype, shape,
strides and offset, so every view (slices, transposes, non-contiguous steps, pandas blocks
and their columns) shares one buffer again after restore. Memory maps are saved as data
and come back as ordinary arrays. Object arrays stay in the pickle, except those holding
mostly strings (pandas' string columns): see :mod:`.numpy_strings`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import numpy_strings
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


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    def reduce_ndarray(arr: np.ndarray) -> Reduction:
        if arr.dtype.hasobject:
            if arr.dtype == np.dtype(object) and arr.size >= numpy_strings.MIN_PACKED and type(arr) is np.ndarray:
                return numpy_strings.pack(arr)
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

    return {np.ndarray: reduce_ndarray, np.memmap: reduce_ndarray, **numpy_strings.reducers(out)}


def from_host(memory: Any) -> np.ndarray:
    """A restored buffer (read into ``memory``) as the uint8 array views are rebuilt on."""
    return np.frombuffer(memory, np.uint8)
