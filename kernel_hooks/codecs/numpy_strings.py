"""Object arrays of strings (pandas' string and object columns), packed into UTF-8 runs.

Pickled one by one, each string costs a memo entry (kept for the whole save) and a few
opcodes. Packed, an array's strings are joined with NUL into runs of
:data:`STRINGS_PER_RUN`, and each run is written out of band like an array's data: hashed,
deduplicated (a change rewrites only the runs it touches) and read back in parallel; the
restore splits each run back into ``str`` objects.

Elements that are not exact ``str`` (``None``, NaN, ``pd.NA``, a ``str`` subclass) or that
hold a NUL are set aside: pickled as themselves, with their positions, so a column with
missing values is still packed. A run that repeats strings stores each once, with codes
(see :data:`REPEATED`). An array of mostly other objects is pickled as usual.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from .arrays import INLINE_BYTES, OutOfBand, Reduction, host_slot

STRINGS_PER_RUN = 1 << 16
"""Strings joined into one run."""
MIN_PACKED = 4096
"""Object arrays with fewer elements are pickled element by element."""
MAX_OTHERS = 0.5
"""Arrays whose first run has a larger fraction of elements that are not packable strings
are not packed."""
SAMPLE = 1024
"""Strings of a run sampled to tell whether it repeats values."""
REPEATED = 0.9
"""A run whose sample has fewer distinct strings than this fraction stores each string once,
plus two bytes per element to put them back: a column read by ``pd.read_csv`` shares one
``str`` object per value, and comes back sharing them instead of one object per row."""
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


class _Run:
    """One run of an array's strings, packed only when the pickler reaches it: each run's
    bytes are written and freed before the next is made, so a column's packed strings are
    never all in memory at once."""

    def __init__(self, flat: np.ndarray, start: int) -> None:
        self.flat = flat
        self.start = start


def pack(arr: np.ndarray) -> Reduction:
    """``arr`` reduced to its runs, or NotImplemented where most elements of its first run
    are not strings."""
    order: Order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    flat = arr.ravel(order=order)
    if len(_odd(flat[:STRINGS_PER_RUN].tolist())) > MAX_OTHERS * min(flat.size, STRINGS_PER_RUN):
        return NotImplemented
    runs = [_Run(flat, start) for start in range(0, flat.size, STRINGS_PER_RUN)]
    return _unpack, (arr.shape, order, runs, bool(arr.flags.writeable))


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    """The reducer of :class:`_Run`: packs a run's strings into ``out`` as it is pickled."""
    def reduce_run(run: _Run) -> Reduction:
        items = run.flat[run.start:run.start + STRINGS_PER_RUN].tolist()
        positions: list[int] = []
        others: list[Any] = []

        def set_aside(odd: list[int]) -> None:
            for i in odd:
                positions.append(i)
                others.append(items[i])
                items[i] = ""

        set_aside(_odd(items))
        codes: Any
        values, codes = _distinct(items) if _repeats(items) else (items, None)
        joined = _SEP.join(values)
        if joined.count(_SEP) != len(values) - 1:  # some hold NUL: set them aside, keep every string
            set_aside([i for i, item in enumerate(items) if _SEP in item])
            values, codes = items, None
            joined = _SEP.join(items)
        data: Any = joined.encode("utf-8", "surrogatepass")
        if len(data) >= INLINE_BYTES:
            data = host_slot(out, (KIND, id(run.flat), run.start), run.flat, KIND, memoryview(data), made=True)
        if codes is not None and len(codes) >= INLINE_BYTES:
            codes = host_slot(out, ("codes", id(run.flat), run.start), run.flat, "numpy", memoryview(codes),
                              made=True)
        return _strings, (data, positions, others, codes)

    return {_Run: reduce_run}


def _repeats(items: list[str]) -> bool:
    """Whether a run repeats strings enough to store each once: judged on a sample of
    :data:`SAMPLE`, so a run of distinct strings costs next to nothing to ask."""
    sample = items[::max(1, len(items) // SAMPLE)]
    return len(set(sample)) < REPEATED * len(sample)


def _distinct(items: list[str]) -> tuple[list[str], bytes]:
    """Each string once, in order of first use, and the codes (``uint16``: a run holds at
    most 65,536 strings) that put them back in place."""
    values = list(dict.fromkeys(items))
    index = {value: i for i, value in enumerate(values)}
    return values, np.fromiter(map(index.__getitem__, items), dtype=np.uint16, count=len(items)).tobytes()


def decode(run: Any) -> np.ndarray:
    """A run (read back out of band, or bytes kept in the pickle) as an object array of its
    strings."""
    items = str(run, "utf-8", "surrogatepass").split(_SEP)
    # from an iterator: from the list itself took twice as long (numpy inspects every
    # element of a sequence it is given)
    return np.fromiter(items, dtype=object, count=len(items))


def _strings(data: Any, positions: list[int], others: list[Any], codes: Any = None) -> np.ndarray:
    """A run's strings: ``data`` decoded already (out of band, :func:`decode`) or bytes
    (kept in the pickle), spread by ``codes`` where each string was stored once, with the
    elements set aside put back."""
    items = data if isinstance(data, np.ndarray) else decode(data)
    if codes is not None:
        items = items[np.frombuffer(codes, dtype=np.uint16)]
    for position, value in zip(positions, others, strict=True):
        items[position] = value
    return items


def _unpack(shape: tuple[int, ...], order: Order, runs: list[np.ndarray], writeable: bool) -> np.ndarray:
    flat = np.concatenate(runs)
    if flat.size != math.prod(shape):
        raise ValueError(f"packed strings hold {flat.size} elements, not {math.prod(shape)}")
    arr = flat.reshape(shape, order=order)
    if not writeable:
        arr.flags.writeable = False
    return arr
