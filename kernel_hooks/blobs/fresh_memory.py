"""Fresh memory for what a restore reads, and how its pages are faulted in.

Putting bytes into pages the process has not touched yet costs more than reading or hashing
them: each 4 KiB page faults on its first write. Three ways to get such pages (:data:`MODES`):
plain, faulted one by one where the bytes land; in bulk at ``mmap`` (``MAP_POPULATE``); or
advised into transparent huge pages (``MADV_HUGEPAGE``, what numpy does for large arrays).

A restore takes plain pages (:func:`restore_mode`). Its reader threads (8) then fault them in
as they read, in parallel and while the disk works; ``MAP_POPULATE`` faults a buffer's pages on
the one thread that asks for it, before its reads start. Filled by one thread, bulk faulting
wins or ties (2-core VM, 0.5 GB in a fresh process: 1.8 to 2.3 GB/s, plain 1.1 to 2.3); in a
restore it loses: the same VM, fresh kernels from a cold page cache, runs interleaved, medians,
plain against bulk: 1.23 against 1.65 s for 1.5 GB, 0.37 against 0.44 s for 480 MB, 0.14
against 0.16 s for 160 MB, within noise at 20 MB. Measuring the two once per process, as restores did before,
took 38 to 44 ms, more than restoring 20 MB, and picked bulk faulting. Huge pages are faster
still once free ones exist, and far slower while the kernel compacts memory for them (0.44 to
7 GB/s); whether free ones exist decides, which nothing cheap can tell beforehand.
``benchmarks/bench_fresh_memory.py`` measures each mode, filled and restored, and
``JUPYTER_GPUCKPT_FRESH_MEMORY`` picks another where it shows one faster.
"""

from __future__ import annotations

import mmap
import os

MODE_ENV = "JUPYTER_GPUCKPT_FRESH_MEMORY"
"""``touch``, ``populate`` or ``hugepage``: the mode restores use instead of :data:`RESTORE_MODE`."""
MODES = ("touch", "populate", "hugepage")
"""``touch``: plain anonymous pages, faulted one by one on first write; ``populate``: faulted in
bulk at ``mmap`` (``MAP_POPULATE``); ``hugepage``: advised into transparent huge pages."""
RESTORE_MODE = "touch"
"""The mode of a restore's memory unless :data:`MODE_ENV` names another (see the module's docstring)."""


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


def restore_mode() -> str:
    """The mode a restore's memory is asked for in: the one ``JUPYTER_GPUCKPT_FRESH_MEMORY``
    names, else :data:`RESTORE_MODE`. Nothing is measured: see the module's docstring."""
    chosen = os.environ.get(MODE_ENV)
    if not chosen:
        return RESTORE_MODE
    if chosen not in MODES:
        raise ValueError(f"{MODE_ENV}={chosen!r} is none of {', '.join(MODES)}")
    return chosen
