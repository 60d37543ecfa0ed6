"""What putting bytes into memory costs, by kind of memory, beside hashing them: the bounds of a
staged suspend and of a restore (issue: the real bound is fresh memory, not hashing).

    python benchmarks/bench_fresh_memory.py [--mb 256] [--runs 5] [--restore-gb 1.5]

Each row is the median of ``--runs`` runs over ``--mb`` MB, in GB/s of 10^9 bytes; the last rows
fill ``--restore-gb`` of fresh memory in a fresh process per run (huge pages then wait for
compaction, which a small range does not show), and say which mode ``fastest_mode`` picks here.
"""

from __future__ import annotations

import argparse
import os
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

from kernel_hooks.blobs.fresh_memory import MODES, fastest_mode, fresh  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--restore-gb", type=float, default=1.5)
    args = parser.parse_args()
    table = rows(args.mb << 20, args.runs) + fresh_process_rows(int(args.restore_gb * 2**30), args.runs)
    width = max(len(title) for title, _, _ in table)
    print(f"{'operation'.ljust(width)}  GB/s (median)  runs")
    for title, median, rates in table:
        print(f"{title.ljust(width)}  {median:13.2f}  {', '.join(f'{r:.2f}' for r in rates)}")
    print(f"\nfastest_mode() here: {fastest_mode()}  (chosen from touch and populate; "
          "JUPYTER_GPUCKPT_FRESH_MEMORY overrides)")


if __name__ == "__main__":
    main()
