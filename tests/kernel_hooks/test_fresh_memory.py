"""Fresh memory for restores: each mode gives zeroed, page-aligned, writable memory; bulk
faulting really faults the pages in at once; the measured choice and its override."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys

import psutil
import pytest

from kernel_hooks.blobs import fresh_memory
from kernel_hooks.blobs.fresh_memory import MEASURED, MODE_ENV, MODES, fastest_mode, fresh

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


def test_the_fastest_mode_is_measured_once_or_named() -> None:
    fastest_mode.cache_clear()
    try:
        assert fastest_mode() in MEASURED
        assert fastest_mode.cache_info().hits == 0 and fastest_mode() in MEASURED
        assert fastest_mode.cache_info().hits == 1
    finally:
        fastest_mode.cache_clear()
    code = "from kernel_hooks.blobs.fresh_memory import fastest_mode; print(fastest_mode())"
    named = subprocess.run([sys.executable, "-c", code], env={**os.environ, MODE_ENV: "hugepage"},
                           capture_output=True, text=True, check=True)
    assert named.stdout.strip() == "hugepage"
    wrong = subprocess.run([sys.executable, "-c", code], env={**os.environ, MODE_ENV: "big"},
                           capture_output=True, text=True)
    assert wrong.returncode != 0 and f"{MODE_ENV}='big' is none of" in wrong.stderr
    assert fresh_memory.PROBE_BYTES <= 64 << 20  # the measurement stays small beside a restore
