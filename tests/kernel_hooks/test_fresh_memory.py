"""Fresh memory for restores: each mode gives zeroed, page-aligned, writable memory; bulk
faulting really faults the pages in at once; restores take plain pages, measuring nothing,
unless the override names another mode."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys

import psutil
import pytest

from kernel_hooks.blobs.fresh_memory import MODE_ENV, MODES, RESTORE_MODE, fresh

SIZE = 64 << 20


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_gives_zeroed_page_aligned_memory(mode: str) -> None:
    memory = fresh(SIZE, mode)
    try:
        view = memoryview(memory)
        address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
        assert len(view) == SIZE and address % mmap.PAGESIZE == 0
        assert view[:4096] == bytes(4096) and view[-4096:] == bytes(4096)
        view[SIZE // 2:SIZE // 2 + 3] = b"abc"
        assert bytes(view[SIZE // 2:SIZE // 2 + 3]) == b"abc"
        del view
    finally:
        memory.close()


def test_populate_faults_the_pages_in_at_once_and_touch_does_not() -> None:
    process = psutil.Process()
    grown = {}
    for mode in ("touch", "populate"):
        before = process.memory_info().rss
        memory = fresh(SIZE, mode)
        grown[mode] = process.memory_info().rss - before
        memory.close()
    assert grown["populate"] >= 0.9 * SIZE, grown
    assert grown["touch"] < 0.1 * SIZE, grown


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="fresh memory mode 'huge' is none of touch, populate, hugepage"):
        fresh(4096, "huge")


def test_restores_take_plain_pages_measuring_nothing_unless_a_mode_is_named() -> None:
    """A restore's reader threads fault its pages in where the bytes land, in parallel: measured
    faster than bulk faulting, which the choice used to probe for once per process (38 to
    44 ms, and 32 MB of memory touched, before the first read)."""
    code = ("import resource\nbefore = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "from kernel_hooks.blobs.fresh_memory import restore_mode\nmode = restore_mode()\n"
            "print(mode, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)")
    env = {k: v for k, v in os.environ.items() if k != MODE_ENV}
    mode, grown_kib = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     check=True).stdout.split()
    assert mode == RESTORE_MODE == "touch"
    assert int(grown_kib) < 4096, "choosing the mode touched memory"
    named = subprocess.run([sys.executable, "-c", code], env={**env, MODE_ENV: "hugepage"},
                           capture_output=True, text=True, check=True)
    assert named.stdout.split()[0] == "hugepage"
    wrong = subprocess.run([sys.executable, "-c", code], env={**env, MODE_ENV: "big"},
                           capture_output=True, text=True)
    assert wrong.returncode != 0 and f"{MODE_ENV}='big' is none of" in wrong.stderr
