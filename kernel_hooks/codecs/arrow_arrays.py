"""pyarrow data (arrays, chunked arrays, record batches, tables, pandas' Arrow-backed
columns such as pandas 3's ``str``): buffers out of band, layout left to pyarrow.

pyarrow pickles an array as its layout (type, length, offset, null count, children,
dictionary) around ``pyarrow.Buffer`` objects, for every type, nested, dictionary and
extension types included, and rebuilds it from those buffers without copying (as
``Array.from_buffers`` does). Only the
buffers need care: protocol 5 hands them to the pickler as foreign ``PickleBuffer``
objects, which :class:`~.arrays.OutOfBand` keeps in the pickle. Here each buffer of
:data:`~.arrays.INLINE_BYTES` or more (validity bitmaps, offsets, string data) goes out
of band as raw bytes instead: hashed, deduplicated and written like a numpy array's data,
and back as a ``pyarrow.Buffer`` over the memory it was read into. A sliced array keeps
its offset and its parent's whole buffers, as a numpy view keeps its base, so slices of
one array share their buffers again after restore. Buffers in GPU memory are left to
pyarrow, which refuses them. The buffers are restored as numpy's (see :data:`KIND`), so
they go out of band only where numpy is installed (pyarrow then imports it); without it
pyarrow's own pickling keeps them in the pickle.

pandas' Arrow-backed arrays pickle through ``__getstate__``, which copies every column
into one chunk first (``combine_chunks``), and those copies are what would be written: for
the two ``str`` columns of workload (d) in benchmarks/bench_peers.py (2.9M rows), 0.05 s
and over 100 MB of copies held through the save. They are reduced here with their chunked
array as it is, so the save writes the columns' own buffers, chunks kept.
"""

from __future__ import annotations

import copyreg
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .arrays import INLINE_BYTES, OutOfBand, Reduction, host_slot

if TYPE_CHECKING:
    import numpy as np

KIND = "numpy"
"""The manifest kind of Arrow buffers: restored as numpy's, into a ``uint8`` array that
:func:`_rebuild_buffer` wraps without copying."""


def _rebuild_buffer(memory: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(memory)


def _pandas_arrays() -> list[type]:
    """pandas' Arrow-backed array classes (``ArrowStringArray`` and the like), if the
    kernel imported pandas; a subclass defined later is met in a later save."""
    if "pandas" not in sys.modules:
        return []
    from pandas.arrays import ArrowExtensionArray

    found, stack = [], [ArrowExtensionArray]
    while stack:
        kind = stack.pop()
        found.append(kind)
        stack.extend(kind.__subclasses__())
    return found


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    """Reducers of pyarrow's buffers (every array type's data passes through them) and of
    pandas' Arrow-backed arrays, for :meth:`OutOfBand.reducers`."""
    def reduce_buffer(buffer: pa.Buffer) -> Reduction:
        if buffer.size < INLINE_BYTES or not buffer.is_cpu:
            return NotImplemented
        key = ("arrow", buffer.address, buffer.size)
        slot = host_slot(out, key, buffer, KIND, memoryview(buffer).cast("B"))
        return _rebuild_buffer, (slot,)

    def reduce_pandas_array(array: Any) -> Reduction:
        state = dict(array.__dict__)
        if not isinstance(state.get("_pa_array"), pa.ChunkedArray):
            return NotImplemented  # a layout this pandas version does not have: its own pickling
        state.pop("_cache", None)  # cached results, recomputed (as pandas' __getstate__ does)
        # __setstate__, pandas' own, takes the chunked array as it is
        return copyreg.__newobj__, (type(array),), state  # type: ignore[attr-defined]

    table: dict[type, Callable[[Any], Reduction]] = dict.fromkeys(_pandas_arrays(), reduce_pandas_array)
    if "numpy" in sys.modules:
        table.update({pa.Buffer: reduce_buffer, pa.ResizableBuffer: reduce_buffer})
    return table
