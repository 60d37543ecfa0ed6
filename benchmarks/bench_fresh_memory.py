"""What putting bytes into memory costs, by kind of memory, beside hashing them: the bounds of a
staged suspend and of a restore (issue: the real bound is fresh memory, not hashing).

    python benchmarks/bench_fresh_memory.py [--mb 256] [--runs 5] [--restore-gb 1.5]

Each row is the median of ``--runs`` runs over ``--mb`` MB, in GB/s of 10^9 bytes. The rows
after them fill ``--restore-gb`` of fresh memory in a fresh process per run (huge pages then
wait for compaction, which a small range does not show), from one thread; the last ones restore
a checkpoint of that size into fresh kernels, one per mode and run, the modes in turns, from a
cold page cache (per file), as ``JUPYTER_GPUCKPT_FRESH_MEMORY`` would make every restore: there
the reader threads fault plain pages in, which filling from one thread does not show.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import blake3  # noqa: E402
import numpy as np  # noqa: E402
from harness import CacheLog, Kernels, files_under  # noqa: E402

from kernel_hooks.blobs.fresh_memory import MODE_ENV, MODES, RESTORE_MODE, fresh  # noqa: E402

CHUNK = 64 << 20


def _rate(nbytes: int, work: Callable[[], None], runs: int) -> tuple[float, list[float]]:
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        rates.append(nbytes / (time.perf_counter() - started) / 1e9)
    return statistics.median(rates), rates


def _fill(view: memoryview, source: memoryview) -> None:
    for offset in range(0, len(view), len(source)):
        piece = view[offset:offset + len(source)]
        piece[:] = source[:len(piece)]


HASH, TOUCHED_COPY, FIRST_SHM_WRITE = ("BLAKE3, one thread", "copy into memory already touched",
                                       "first write of a new /dev/shm file")


def rows(nbytes: int, runs: int, only: frozenset[str] | None = None) -> list[tuple[str, float, list[float]]]:
    """(operation, median GB/s, GB/s of each run), for the operations titled in ``only`` (all
    by default)."""
    source = memoryview(np.random.default_rng(0).integers(0, 255, min(nbytes, CHUNK), dtype=np.uint8)).cast("B")
    touched = bytearray(nbytes)
    _fill(memoryview(touched), source)
    shm = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    out: list[tuple[str, float, list[float]]] = []

    def hashed() -> None:
        blake3.blake3(touched, max_threads=1).digest()

    def touched_copy() -> None:
        _fill(memoryview(touched), source)

    rewrite_path = shm / "rewrite"
    rewrite_path.write_bytes(touched)

    def rewrite() -> None:
        with rewrite_path.open("r+b", buffering=0) as f:
            for offset in range(0, nbytes, len(source)):
                f.write(source[:min(len(source), nbytes - offset)])

    counter = iter(range(10**6))

    def first_write() -> None:
        path = shm / f"new-{next(counter)}"
        with path.open("wb", buffering=0) as f:
            for offset in range(0, nbytes, len(source)):
                f.write(source[:min(len(source), nbytes - offset)])
        path.unlink()

    def mode(name: str) -> Callable[[], None]:
        def work() -> None:
            memory = fresh(nbytes, name)
            _fill(memoryview(memory), source)
            memory.close()
        return work

    def numpy_empty() -> None:
        array = np.empty(nbytes, dtype=np.uint8)  # numpy advises large arrays into huge pages
        _fill(memoryview(array).cast("B"), source)

    cases = [(HASH, hashed), (TOUCHED_COPY, touched_copy),
             ("rewrite of a /dev/shm file already written", rewrite), (FIRST_SHM_WRITE, first_write)]
    cases += [(f"fresh memory, {name}", mode(name)) for name in MODES]
    cases.append(("np.empty then fill", numpy_empty))
    for title, work in cases:
        if only is not None and title not in only:
            continue
        median, rates = _rate(nbytes, work, runs)
        out.append((title, median, rates))
    rewrite_path.unlink()
    shm.rmdir()
    return out


FRESH_PROCESS = """
import sys, time
from kernel_hooks.blobs.fresh_memory import fresh
n, name = int(sys.argv[1]), sys.argv[2]
source = memoryview(bytes(64 << 20))
started = time.perf_counter()
memory = fresh(n, name)
view = memoryview(memory)
for offset in range(0, n, len(source)):
    piece = view[offset:offset + len(source)]
    piece[:] = source[:len(piece)]
print(n / (time.perf_counter() - started) / 1e9)
"""


def fresh_process_rows(nbytes: int, runs: int) -> list[tuple[str, float, list[float]]]:
    root = str(Path(__file__).resolve().parents[1])
    out = []
    for name in MODES:
        rates = [float(subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(nbytes), name], check=True,
                                      capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root})
                       .stdout) for _ in range(runs)]
        out.append((f"{nbytes / 1e9:.1f} GB in a fresh process, {name}", statistics.median(rates), rates))
    return out


RESTORE = """\
from kernel_hooks import CheckpointStore, restore_checkpoint
started = time.perf_counter()
report = restore_checkpoint(shell, params["id"], CheckpointStore(params["store"]))
result = {"seconds": time.perf_counter() - started, "bytes": report.nbytes}
"""


def restore_rows(nbytes: int, runs: int) -> list[tuple[str, float, list[float]]]:
    """A checkpoint of ``nbytes`` of numpy arrays restored into fresh kernels in each mode."""
    root = Path(tempfile.mkdtemp(prefix="bench-fresh-memory-"))
    kernels, cache = Kernels(root), CacheLog(everything=False)
    rates: dict[str, list[float]] = {name: [] for name in MODES}
    try:
        with kernels.start() as saver:
            saver.run(f"import numpy as np\narrays = [np.random.default_rng(i).random({nbytes // 8 // 8}) "
                      "for i in range(8)]")
            saved = saver.call("from kernel_hooks import CheckpointStore, save_checkpoint\n"
                               "result = {'id': save_checkpoint(shell, CheckpointStore(params['store'])).id}",
                               store=str(root / "store"))
        for run in range(runs):
            for name in MODES[run % len(MODES):] + MODES[:run % len(MODES)]:
                with kernels.start("numpy", env={MODE_ENV: name}) as kernel:
                    cache.drop(files_under(root / "store"))
                    done = kernel.call(RESTORE, store=str(root / "store"), id=saved["id"])
                rates[name].append(done["bytes"] / done["seconds"] / 1e9)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [(f"{nbytes / 1e9:.1f} GB restored into fresh kernels, {name}", statistics.median(rates[name]),
             rates[name]) for name in MODES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--restore-gb", type=float, default=1.5)
    args = parser.parse_args()
    restore_bytes = int(args.restore_gb * 2**30)
    table = rows(args.mb << 20, args.runs) + fresh_process_rows(restore_bytes, args.runs) + restore_rows(
        restore_bytes, args.runs)
    width = max(len(title) for title, _, _ in table)
    print(f"{'operation'.ljust(width)}  GB/s (median)  runs")
    for title, median, rates in table:
        print(f"{title.ljust(width)}  {median:13.2f}  {', '.join(f'{r:.2f}' for r in rates)}")
    print(f"\nRestores use {RESTORE_MODE!r}; {MODE_ENV} names another.")


if __name__ == "__main__":
    main()
