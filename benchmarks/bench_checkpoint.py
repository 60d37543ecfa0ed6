"""Benchmark: checkpoint save and restore speed, measured against the disk's raw speed.

Run it from anywhere with jupyter-gpuckpt installed (``pip install -e ".[test]"``)::

    python benchmarks/bench_checkpoint.py                # 2 GB, 3 runs, under ./.bench/
    python benchmarks/bench_checkpoint.py --quick        # 0.1 GB smoke test, under a minute
    python benchmarks/bench_checkpoint.py --dir /scratch --size-gb 4 --runs 5 --json out.json

Everything is written to one file system, the one holding ``--dir`` (a fresh folder is
made inside it and removed at the end unless ``--keep``). Saves and restores run in real
ipykernel processes started through jupyter_client, as the notebook server starts them,
and are timed inside the kernel around ``save_checkpoint`` / ``restore_checkpoint``, so
kernel start-up and message round trips are not counted. Each figure is the median of
``--runs`` runs; each run measures every row once, in the order below, so a drift in the
disk's speed touches all rows alike; its files are deleted as soon as it is done (unless
``--keep``). GB are 10^9 bytes.

raw write         ``--size-gb`` written to a new file in 8 MiB ``os.write`` calls from
                  one preallocated buffer, then ``fsync``: sequential write speed.
raw write-behind  the same, but each write is followed by ``posix_fadvise(DONTNEED)`` on
                  the file, which starts writeback at once and drops what is written
                  back, so the page cache stays small. Where taking fresh pages for the
                  page cache is slow (a VM whose memory the host backs lazily), this
                  shows what the disk itself can do.
raw read          that file read back in 8 MiB ``readinto`` calls after the page cache
                  was dropped: sequential read speed.
raw read, fresh   the same, but into new memory the size of the file, each page faulted in by
  memory          its first write, as a restore reads: the yardstick of C restore.
A save            workload A, ``--size-gb`` of random float64 numpy arrays in 20
                  variables, saved into an empty store (a new one each run, so nothing
                  is deduplicated).
A restore         that checkpoint restored into a fresh kernel (numpy already imported),
                  with the page cache dropped first so the blobs come from the disk.
B save            workload B, a stack of ``nn.Linear`` layers with Adam after one step
                  (about 50M parameters per GB of ``--size-gb``: weights, gradients and
                  both Adam moments, 16 bytes a parameter), saved into an empty store.
B restore         as A restore, into a fresh kernel with torch imported.
C save            workload C, ``--size-gb`` of Arrow-backed string columns in a pandas
                  DataFrame (``string[pyarrow]`` and ``pd.ArrowDtype(pa.string())``, chunks of
                  1M strings of 8 to 71 letters, as Arrow readers make them), saved into an
                  empty store.
C restore         as A restore, into a fresh kernel with pandas imported, against raw read
                  into fresh memory.
A incremental     after A's full save, 1% of its bytes are overwritten (a contiguous
                  slice in each of 4 arrays) and the kernel is saved again into the
                  same store.

Columns: ``GB`` is the checkpoint's size (pickle and buffers), ``GB written`` what the
save wrote (an incremental save only writes the 8 MiB chunks that changed), ``GB/s`` is
``GB`` over the median time, and ``% of raw`` compares that with the faster raw write
(saves) or with raw read (A and B restores; C's with raw read into fresh memory). The cache
line says how the page cache was dropped and how much of the files was still in it when
reading began (measured with ``mincore``); a cache below this machine (a hypervisor's or a
storage server's) cannot be seen or dropped from here. The load average at the start is
printed because other work on the machine slows every row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402  (the benchmarks' shared helpers, next to this file)
    GB,
    CacheLog,
    Kernel,
    Kernels,
    align,
    files_under,
    machine,
    machine_lines,
    progress,
    raw_read,
    raw_write,
)

ARRAYS = 20
CHANGED_ARRAYS = 4
CHANGED_FRACTION = 0.01
LAYER_WIDTH = 2048
PARAMS_PER_GB = 50_000_000
STRING_CHUNK_ROWS = 1 << 20
STRING_BYTES_PER_ROW = 4 + 39.5
"""An Arrow string's offset and its 8 to 71 letters, on average."""
QUICK_GB = 0.1

BUILD_A = """\
import numpy as np
for _i in range({arrays}):
    globals()[f"a{{_i:02d}}"] = np.random.default_rng(_i).random({length})
del _i
"""

BUILD_B = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*(torch.nn.Linear({width}, {width}) for _ in range({layers})))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
model(torch.randn(8, {width})).square().mean().backward()
optimizer.step()
"""

BUILD_C = """\
import numpy as np, pandas as pd, pyarrow as pa

def _strings(rows, seed):
    rng = np.random.default_rng(seed)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(rng.integers(8, 72, rows), out=offsets[1:])
    data = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))

def _column(seed):
    return pa.chunked_array([_strings(min({chunk}, {rows} - start), seed + start)
                             for start in range(0, {rows}, {chunk})])

strings = pd.DataFrame({{"name": pd.Series(pd.arrays.ArrowStringArray(_column(0)), dtype="string[pyarrow]"),
                        "note": pd.Series(pd.arrays.ArrowExtensionArray(_column(1 << 40)))}})
del _strings, _column
"""

# Bench code runs through exec() with its own globals, so it leaves no names in the
# kernel's namespace (which the checkpoint would otherwise include).
SAVE = """\
from kernel_hooks import CheckpointStore, save_checkpoint
started = time.perf_counter()
saved = save_checkpoint(shell, CheckpointStore(params["store"]))
result = {"seconds": time.perf_counter() - started, "id": saved.id,
          "bytes_total": saved.bytes_total, "bytes_written": saved.bytes_written}
"""

RESTORE = """\
from kernel_hooks import CheckpointStore, restore_checkpoint
started = time.perf_counter()
report = restore_checkpoint(shell, params["id"], CheckpointStore(params["store"]))
result = {"seconds": time.perf_counter() - started, "bytes_total": report.nbytes}
"""

CHANGE_A = """\
import numpy as np
rng = np.random.default_rng(params["seed"])
for name, start, stop in params["slices"]:
    shell.user_ns[name][start:stop] = rng.random(stop - start)
result = {}
"""

FINGERPRINT_A = """\
result = {"fingerprint": [float(shell.user_ns[f"a{i:02d}"][::4099].sum())
                          for i in range(params["arrays"])]}
"""

FINGERPRINT_B = """\
model, optimizer = shell.user_ns["model"], shell.user_ns["optimizer"]
weights = list(model.parameters())
result = {"fingerprint": [float(p.detach().flatten()[::4099].double().sum()) for p in weights]
          + [float(s["exp_avg_sq"].flatten()[::4099].double().sum()) for s in optimizer.state.values()]
          + [all(p.grad is not None for p in weights),
             all(a is b for a, b in zip(optimizer.param_groups[0]["params"], weights))]}
"""

FINGERPRINT_C = """\
import pyarrow as pa, pyarrow.compute as pc
frame = shell.user_ns["strings"]
columns = [frame[name].array.__arrow_array__() for name in frame]
result = {"fingerprint": [str(frame[name].dtype) for name in frame]
          + [pc.sum(pc.binary_length(c)).as_py() for c in columns]
          + [c.take(pa.array(range(0, len(c), 99_991))).to_pylist() for c in columns]}
"""

VERSIONS = """\
import platform
result = {"python": platform.python_version(), "executable": sys.executable,
          **{m: sys.modules[m].__version__ for m in ("numpy", "torch") if m in sys.modules}}
"""


# -- measurements --------------------------------------------------------------------------

@dataclass
class Row:
    """One line of the results table: all runs of one measurement."""

    name: str
    seconds: list[float] = field(default_factory=list)
    nbytes: int = 0
    written: int | None = None
    baseline: str | None = None  # "write", "read" or "fresh read": the fastest raw row of it is 100%

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def rate(self) -> float:
        return self.nbytes / self.median / GB


def timed_restore(kernels: Kernels, store: Path, checkpoint_id: str, imports: tuple[str, ...],
                  fingerprint: str, expected: list[Any], cache: CacheLog, row: Row,
                  **params: Any) -> None:
    """Restore into a fresh kernel from a cold page cache, check it, add the time to ``row``."""
    with kernels.start(*imports) as kernel:
        cache.drop(files_under(store))
        restored = kernel.call(RESTORE, store=str(store), id=checkpoint_id)
        if kernel.call(fingerprint, **params)["fingerprint"] != expected:
            raise RuntimeError(f"{row.name}: the restored variables differ from the saved ones")
    row.seconds.append(restored["seconds"])
    row.nbytes = restored["bytes_total"]


def timed_save(kernel: Kernel, store: Path, row: Row) -> str:
    """Save ``kernel`` into ``store``, add the time to ``row``; return the checkpoint id."""
    os.sync()  # earlier dirty pages are not this save's to flush
    saved = kernel.call(SAVE, store=str(store))
    row.seconds.append(saved["seconds"])
    row.nbytes, row.written = saved["bytes_total"], saved["bytes_written"]
    checkpoint_id: str = saved["id"]
    return checkpoint_id


def changed_slices(length: int) -> list[tuple[str, int, int]]:
    """Contiguous slices of ``CHANGED_ARRAYS`` arrays, together ``CHANGED_FRACTION`` of A."""
    count = round(ARRAYS * length * CHANGED_FRACTION / CHANGED_ARRAYS)
    start = (length - count) // 2
    return [(f"a{i:02d}", start, start + count)
            for i in range(0, ARRAYS, ARRAYS // CHANGED_ARRAYS)]


class Bench:
    """The measurements of one invocation, in one folder of the file system under test."""

    def __init__(self, root: Path, nbytes: int, keep: bool) -> None:
        self.root = root
        self.nbytes = nbytes
        self.keep = keep
        self.kernels = Kernels(root)
        self.cache = CacheLog()
        self.versions: dict[str, Any] = {}
        self.rows = {name: Row(name, baseline=baseline) for name, baseline in (
            ("raw write", None), ("raw write-behind", None), ("raw read", None), ("raw read, fresh memory", None),
            ("A save", "write"), ("A restore", "read"), ("B save", "write"),
            ("B restore", "read"), ("A incremental", "write"), ("C save", "write"), ("C restore", "fresh read"))}

    def run(self, runs: int) -> None:
        """Each run measures everything once, so a drift of the disk's speed hits all rows."""
        length = self.nbytes // 8 // ARRAYS
        layers = max(1, round(self.nbytes / GB * PARAMS_PER_GB / (LAYER_WIDTH * (LAYER_WIDTH + 1))))
        self.versions["B parameters"] = layers * LAYER_WIDTH * (LAYER_WIDTH + 1)
        rows = int(self.nbytes / 2 / STRING_BYTES_PER_ROW)
        with self.kernels.start() as a, self.kernels.start() as b, self.kernels.start() as c:
            a.run(BUILD_A.format(arrays=ARRAYS, length=length))
            b.run(BUILD_B.format(width=LAYER_WIDTH, layers=layers))
            c.run(BUILD_C.format(rows=rows, chunk=STRING_CHUNK_ROWS))
            self.versions.update(a.call(VERSIONS))
            self.versions.update(b.call(VERSIONS))
            fingerprint_b = b.call(FINGERPRINT_B)["fingerprint"]
            fingerprint_c = c.call(FINGERPRINT_C)["fingerprint"]
            progress("workloads built")
            for run in range(runs):
                self.raw(run)
                self.workload_a(a, run, length)
                self.workload_b(b, run, fingerprint_b)
                self.workload_c(c, run, fingerprint_c)
                progress(f"run {run + 1}/{runs} done")

    def raw(self, run: int) -> None:
        path = self.root / f"raw-{run}.bin"
        for name, write_behind in (("raw write", False), ("raw write-behind", True)):
            self.rows[name].seconds.append(raw_write(path, self.nbytes, write_behind))
            self.rows[name].nbytes = self.nbytes
        for name, fresh in (("raw read", False), ("raw read, fresh memory", True)):
            self.rows[name].seconds.append(raw_read(path, self.cache, fresh))
            self.rows[name].nbytes = self.nbytes
        if not self.keep:
            path.unlink()

    def workload_a(self, kernel: Kernel, run: int, length: int) -> None:
        store = self.root / "stores" / f"A-{run}"
        checkpoint_id = timed_save(kernel, store, self.rows["A save"])
        expected = kernel.call(FINGERPRINT_A, arrays=ARRAYS)["fingerprint"]
        timed_restore(self.kernels, store, checkpoint_id, ("numpy",), FINGERPRINT_A, expected,
                      self.cache, self.rows["A restore"], arrays=ARRAYS)
        kernel.call(CHANGE_A, seed=run, slices=changed_slices(length))
        timed_save(kernel, store, self.rows["A incremental"])
        self.remove(store)

    def workload_b(self, kernel: Kernel, run: int, expected: list[Any]) -> None:
        store = self.root / "stores" / f"B-{run}"
        checkpoint_id = timed_save(kernel, store, self.rows["B save"])
        timed_restore(self.kernels, store, checkpoint_id, ("torch",), FINGERPRINT_B, expected,
                      self.cache, self.rows["B restore"])
        self.remove(store)

    def workload_c(self, kernel: Kernel, run: int, expected: list[Any]) -> None:
        store = self.root / "stores" / f"C-{run}"
        checkpoint_id = timed_save(kernel, store, self.rows["C save"])
        timed_restore(self.kernels, store, checkpoint_id, ("pandas",), FINGERPRINT_C, expected,
                      self.cache, self.rows["C restore"])
        self.remove(store)

    def remove(self, store: Path) -> None:
        """Free a store's space at once: the bench needs room for one run only."""
        if not self.keep:
            shutil.rmtree(store)


# -- report --------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    rate = {row.name: row.rate for row in rows}
    best = {"write": max(rate["raw write"], rate["raw write-behind"]), "read": rate["raw read"],
            "fresh read": rate["raw read, fresh memory"]}
    lines = [("", "median s", "GB", "GB written", "GB/s", "% of raw", "runs")]
    for row in rows:
        written = "-" if row.written is None else f"{row.written / GB:.3f}"
        share = "-" if row.baseline is None else f"{100 * row.rate / best[row.baseline]:.0f}% {row.baseline}"
        lines.append((row.name, f"{row.median:.2f}", f"{row.nbytes / GB:.3f}", written,
                      f"{row.rate:.2f}", share, str(len(row.seconds))))
    return align(lines)


def _ratios(row: Row, yardstick: Row) -> str:
    """Each run's speed of ``row`` over ``yardstick``'s in the same run: their range and median."""
    ratios = [(row.nbytes / mine) / (yardstick.nbytes / theirs)
              for mine, theirs in zip(row.seconds, yardstick.seconds, strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)"


def report(bench: Bench, info: dict[str, Any]) -> str:
    rows, cache = bench.rows, bench.cache
    written = rows["A incremental"].written or 0
    machine_line, fs_line, load_line = machine_lines(info)
    lines = [
        machine_line,
        fs_line,
        f"Python {info['python']} ({info['executable']}), numpy {info['numpy']}, torch {info['torch']}, "
        f"blake3 {info['blake3']}, jupyter-gpuckpt {info['jupyter-gpuckpt']}",
        f"Workload A: {ARRAYS} float64 arrays; workload B: {info['B parameters'] / 1e6:.0f}M parameters "
        "with Adam state; workload C: 2 Arrow string columns",
        load_line,
        "",
        table(list(rows.values())),
        "",
        f"A incremental: {CHANGED_FRACTION:.0%} of A's bytes changed; the save wrote "
        f"{written / 1e6:.1f} MB = {100 * written / rows['A save'].nbytes:.2f}% of the full checkpoint.",
        "C restore against raw read into fresh memory, run by run: "
        f"{_ratios(rows['C restore'], rows['raw read, fresh memory'])} (Arrow string columns).",
        cache.summary(),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(".bench"),
                        help="folder on the file system to test (default: ./.bench)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default: 3)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--size-gb", type=float, default=2.0, help="data per workload (default: 2.0)")
    size.add_argument("--quick", action="store_true", help=f"smoke test with {QUICK_GB} GB")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the bench folder and its stores")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    nbytes = int((QUICK_GB if args.quick else args.size_gb) * GB)

    args.dir.mkdir(parents=True, exist_ok=True)
    per_run = 1 + 1 + 2 * CHANGED_FRACTION + 16 * PARAMS_PER_GB / GB + 1  # raw file, A, B, C
    needed = nbytes * per_run * (args.runs if args.keep else 1) * 1.1
    if shutil.disk_usage(args.dir).free < needed:
        sys.exit(f"{args.dir} needs about {needed / GB:.1f} GB free for this run")
    root = Path(tempfile.mkdtemp(prefix="run-", dir=args.dir)).resolve()
    progress(f"benchmarking {nbytes / GB:g} GB x {args.runs} runs in {root}")
    bench = Bench(root, nbytes, args.keep)
    load_at_start = os.getloadavg()[0]
    try:
        bench.run(args.runs)
        info = machine(root, bench.versions, load_at_start)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(report(bench, info))
    if args.json:
        args.json.write_text(json.dumps({
            "machine": info, "size_bytes": nbytes,
            "cache": {"methods": sorted(bench.cache.methods), "worst_resident": bench.cache.worst_resident},
            "results": [{**asdict(row), "median": row.median, "gb_per_s": row.rate}
                        for row in bench.rows.values()],
        }, indent=1))


if __name__ == "__main__":
    main()
