"""Fresh memory for what a restore reads, asked for the fastest way on this machine.

Putting bytes into pages the process has not touched yet costs more than reading or hashing
them: each 4 KiB page faults on its first write. Asked for in bulk (``MAP_POPULATE``: the
kernel faults the whole range in at ``mmap``) the same pages come about twice as fast; advised
into transparent huge pages (``MADV_HUGEPAGE``, what numpy does for large arrays) they come
faster still once huge pages are free, and far slower while the kernel compacts memory for
them. Which wins depends on the machine and on its memory's state, so plain and bulk faulting
are measured, once per process, on a small range (:func:`fastest_mode`). Huge pages are left out
of that choice: whether free ones exist decides, and a small probe cannot tell. Measured on the
2-core VM, 1.6 GB filled in a fresh process, 5 runs each: huge pages 0.46 GB/s while the kernel
compacts memory for them (the first run, and 0.44 to 1.06 GB/s in all 3 runs of an earlier
measurement),
6.4 GB/s once an earlier process has left free ones; bulk-faulted 2.0 to 3.1 GB/s, plain 1.3 to
2.5 GB/s.
``benchmarks/bench_fresh_memory.py`` measures all three at a restore's size, and
``JUPYTER_GPUCKPT_FRESH_MEMORY`` picks one where it shows another faster.
"""

from __future__ import annotations

import mmap
import os
import time
from functools import cache

MODE_ENV = "JUPYTER_GPUCKPT_FRESH_MEMORY"
"""``touch``, ``populate`` or ``hugepage``: the mode to use instead of the measured fastest."""
MODES = ("touch", "populate", "hugepage")
"""``touch``: plain anonymous pages, faulted one by one on first write; ``populate``: faulted in
bulk at ``mmap`` (``MAP_POPULATE``); ``hugepage``: advised into transparent huge pages."""
PROBE_BYTES = 16 << 20
"""What each measured mode is filled with, twice."""
MEASURED = ("touch", "populate")
"""The modes :func:`fastest_mode` chooses from (huge pages: see the module's docstring)."""


def fresh(nbytes: int, mode: str) -> mmap.mmap:
    """``nbytes`` of page-aligned, zeroed, private anonymous memory, in ``mode`` (:data:`MODES`)."""
    if mode not in MODES:
        raise ValueError(f"fresh memory mode {mode!r} is none of {', '.join(MODES)}")
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if mode == "populate" and hasattr(mmap, "MAP_POPULATE"):
        flags |= mmap.MAP_POPULATE
    memory = mmap.mmap(-1, nbytes, flags=flags)
    if mode == "hugepage" and hasattr(mmap, "MADV_HUGEPAGE"):
        memory.madvise(mmap.MADV_HUGEPAGE)
    return memory


def _seconds(mode: str, source: memoryview) -> float:
    started = time.perf_counter()
    for _ in range(2):
        memory = fresh(len(source), mode)
        memoryview(memory)[:] = source
        memory.close()
    return time.perf_counter() - started


@cache
def fastest_mode() -> str:
    """Of :data:`MEASURED`, the mode in which fresh pages fill fastest here, measured once per
    process on :data:`PROBE_BYTES` copied in twice per mode; or the one
    ``JUPYTER_GPUCKPT_FRESH_MEMORY`` names."""
    chosen = os.environ.get(MODE_ENV)
    if chosen:
        if chosen not in MODES:
            raise ValueError(f"{MODE_ENV}={chosen!r} is none of {', '.join(MODES)}")
        return chosen
    source = memoryview(bytes(PROBE_BYTES)).cast("B")
    return min(MEASURED, key=lambda mode: _seconds(mode, source))
