"""Object arrays of strings (pandas' string and object columns), packed into UTF-8 runs.

Pickled one by one, each string costs a memo entry (kept for the whole save) and a few
opcodes. Packed, an array's strings are joined with NUL into runs of
:data:`STRINGS_PER_RUN`, and each run is written out of band like an array's data: hashed,
deduplicated (a change rewrites only the runs it touches) and read back in parallel; the
restore splits each run back into ``str`` objects.

Elements that are not exact ``str`` (``None``, NaN, ``pd.NA``, a ``str`` subclass) or that
hold a NUL are set aside: pickled as themselves, with their positions, so a column with
missing values is still packed. An array of mostly other objects is pickled as usual.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .arrays import INLINE_BYTES, OutOfBand, Reduction, host_slot

STRINGS_PER_RUN = 1 << 16
"""Strings joined into one run."""
MIN_PACKED = 4096
"""Object arrays with fewer elements are pickled element by element."""
MAX_OTHERS = 0.5
"""Arrays with a larger fraction of elements that are not packable strings are not packed."""
KIND = "strings"
_SEP = "\x00"
Order = Literal["C", "F"]


def _indexes(values: list[Any], value: Any) -> list[int]:
    """Every position of ``value`` in ``values``, found at C speed by ``list.index``."""
    found: list[int] = []
    start = 0
    while True:
        try:
            start = values.index(value, start) + 1
        except ValueError:
            return found
        found.append(start - 1)


def _odd(items: list[Any]) -> list[int]:
    """Positions of the elements of ``items`` that are not exact ``str``."""
    types = list(map(type, items))
    if types.count(str) == len(types):
        return []
    return [i for kind in set(types) - {str} for i in _indexes(types, kind)]


def pack(arr: np.ndarray, out: OutOfBand) -> Reduction:
    """``arr`` reduced to its runs, or NotImplemented where most elements are not strings."""
    order: Order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    flat = arr.ravel(order=order)
    limit = MAX_OTHERS * flat.size
    runs: list[Any] = []
    positions: list[int] = []
    others: list[Any] = []

    def set_aside(items: list[Any], odd: list[int], start: int) -> None:
        for i in odd:
            positions.append(start + i)
            others.append(items[i])
            items[i] = ""

    for start in range(0, flat.size, STRINGS_PER_RUN):
        items = flat[start:start + STRINGS_PER_RUN].tolist()
        odd = _odd(items)
        if len(others) + len(odd) > limit:
            return NotImplemented
        set_aside(items, odd, start)
        joined = _SEP.join(items)
        if joined.count(_SEP) != len(items) - 1:
            set_aside(items, [i for i, item in enumerate(items) if _SEP in item], start)
            joined = _SEP.join(items)
        run: Any = joined.encode("utf-8", "surrogatepass")
        if len(run) >= INLINE_BYTES:
            run = host_slot(out, (KIND, id(arr), start), (arr, run), KIND, memoryview(run))
        runs.append(run)
    return _unpack, (arr.shape, order, runs, np.array(positions, dtype=np.int64), others,
                     bool(arr.flags.writeable))


def from_host(memory: Any) -> Any:
    """A run read into ``memory``: :func:`_unpack` splits it."""
    return memory


def _unpack(shape: tuple[int, ...], order: Order, runs: list[Any], positions: np.ndarray,
            others: list[Any], writeable: bool) -> np.ndarray:
    flat = np.empty(math.prod(shape), dtype=object)
    start = 0
    for run in runs:
        items = str(run, "utf-8", "surrogatepass").split(_SEP)
        # from an array: assigning the list itself took twice as long (numpy inspects
        # every element of a sequence it is given)
        flat[start:start + len(items)] = np.fromiter(items, dtype=object, count=len(items))
        start += len(items)
    if start != flat.size:
        raise ValueError(f"packed strings hold {start} elements, not {flat.size}")
    for position, value in zip(positions.tolist(), others, strict=True):
        flat[position] = value
    arr = flat.reshape(shape, order=order)
    if not writeable:
        arr.flags.writeable = False
    return arr
