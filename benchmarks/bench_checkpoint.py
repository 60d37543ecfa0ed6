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
A save            workload A, ``--size-gb`` of random float64 numpy arrays in 20
                  variables, saved into an empty store (a new one each run, so nothing
                  is deduplicated).
A restore         that checkpoint restored into a fresh kernel (numpy already imported),
                  with the page cache dropped first so the blobs come from the disk.
B save            workload B, a stack of ``nn.Linear`` layers with Adam after one step
                  (about 50M parameters per GB of ``--size-gb``: weights, gradients and
                  both Adam moments, 16 bytes a parameter), saved into an empty store.
B restore         as A restore, into a fresh kernel with torch imported.
A incremental     after A's full save, 1% of its bytes are overwritten (a contiguous
                  slice in each of 4 arrays) and the kernel is saved again into the
                  same store.

Columns: ``GB`` is the checkpoint's size (pickle and buffers), ``GB written`` what the
save wrote (an incremental save only writes the 8 MiB chunks that changed), ``GB/s`` is
``GB`` over the median time, and ``% of raw`` compares that with the faster raw write
(saves) or with raw read (restores). The cache line says how the page cache was dropped
and how much of the files was still in it when reading began (measured with
``mincore``); a cache below this machine (a hypervisor's or a storage server's) cannot
be seen or dropped from here. The load average at the start is printed because other
work on the machine slows every row.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

GB = 10**9
IO_BLOCK = 8 << 20
ARRAYS = 20
CHANGED_ARRAYS = 4
CHANGED_FRACTION = 0.01
LAYER_WIDTH = 2048
PARAMS_PER_GB = 50_000_000
QUICK_GB = 0.1
RESULT_MARK = "BENCH-RESULT "

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

VERSIONS = """\
import platform
result = {"python": platform.python_version(), "executable": sys.executable,
          **{m: sys.modules[m].__version__ for m in ("numpy", "torch") if m in sys.modules}}
"""


# -- page cache ----------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_MAP_FAILED = ctypes.c_void_p(-1).value


def _resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache now (``mincore`` on a mapping, which reads nothing)."""
    size = path.stat().st_size
    if not size:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            pages = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
            if _libc.mincore(addr, size, pages) != 0:
                raise OSError(ctypes.get_errno(), f"mincore on {path} failed")
            return min(size, sum(b & 1 for b in bytes(pages)) * mmap.PAGESIZE)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


@dataclass
class CacheLog:
    """How the page cache was dropped before each timed read, and what stayed in it."""

    methods: set[str] = field(default_factory=set)
    worst_resident: float = 0.0
    """The largest fraction of a read's files found in the page cache as it began."""

    def drop(self, paths: list[Path]) -> None:
        """Flush and drop ``paths`` from the page cache, then record what is left of them."""
        os.sync()
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            self.methods.add("sync + posix_fadvise(DONTNEED) per file + drop_caches=3")
        except OSError as e:
            self.methods.add(f"sync + posix_fadvise(DONTNEED) per file (drop_caches: {e.strerror})")
        total = sum(p.stat().st_size for p in paths)
        if total:
            self.worst_resident = max(self.worst_resident, sum(map(_resident, paths)) / total)


# -- raw disk speed ------------------------------------------------------------------------

def raw_write(path: Path, nbytes: int, write_behind: bool) -> float:
    """Seconds to write ``nbytes`` to a new ``path`` in ``IO_BLOCK`` writes and fsync it."""
    path.unlink(missing_ok=True)
    block = memoryview(bytearray(os.urandom(IO_BLOCK)))  # random: no file system can compress it
    os.sync()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        started = time.perf_counter()
        left = nbytes
        while left:
            left -= os.write(fd, block[:min(left, IO_BLOCK)])
            if write_behind:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.fsync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)


def raw_read(path: Path, cache: CacheLog) -> float:
    """Seconds to read ``path`` in ``IO_BLOCK`` reads, once dropped from the page cache."""
    block = memoryview(bytearray(IO_BLOCK))
    cache.drop([path])
    with open(path, "rb", buffering=0) as f:
        started = time.perf_counter()
        while f.readinto(block):
            pass
        return time.perf_counter() - started


# -- kernels -------------------------------------------------------------------------------

class Kernel:
    """One ipykernel process and a client on its channels."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(cwd))
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=120)
        except BaseException:
            self.close()
            raise

    def run(self, code: str) -> str:
        """Run a cell; return its stdout, raise on an error."""
        out: list[str] = []
        errors: list[str] = []

        def on_output(msg: dict[str, Any]) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                (out if content["name"] == "stdout" else errors).append(content["text"])
            elif msg["msg_type"] == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")

        reply = self.client.execute_interactive(code, timeout=3600, output_hook=on_output)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed in the kernel: {''.join(errors)}\n{code}")
        return "".join(out)

    def call(self, body: str, **params: Any) -> dict[str, Any]:
        """Run bench code ``body`` (it sets ``result``) without touching the namespace."""
        code = ("import json, sys, time\n" + body
                + f"print({RESULT_MARK!r} + json.dumps(result))\n")
        stdout = self.run(f"exec({code!r}, {{'shell': get_ipython(), 'params': {params!r}}})")
        line = next(ln for ln in reversed(stdout.splitlines()) if ln.startswith(RESULT_MARK))
        result: dict[str, Any] = json.loads(line[len(RESULT_MARK):])
        return result

    def close(self) -> None:
        try:
            self.client.stop_channels()
        finally:
            self.manager.shutdown_kernel(now=True)


class Kernels:
    """Starts kernels sharing one Jupyter data dir (so one signing key) in the bench folder."""

    def __init__(self, root: Path) -> None:
        self.cwd = root / "work"
        self.cwd.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_GPUCKPT_")}
        self.env["JUPYTER_DATA_DIR"] = str(root / "jupyter-data")

    @contextmanager
    def start(self, *imports: str) -> Iterator[Kernel]:
        """A kernel with the hooks loaded and ``imports`` done, shut down on exit."""
        kernel = Kernel(self.env, self.cwd)
        try:
            kernel.run("%load_ext kernel_hooks\n" + "".join(f"import {m}\n" for m in imports))
            yield kernel
        finally:
            kernel.close()


# -- measurements --------------------------------------------------------------------------

@dataclass
class Row:
    """One line of the results table: all runs of one measurement."""

    name: str
    seconds: list[float] = field(default_factory=list)
    nbytes: int = 0
    written: int | None = None
    baseline: str | None = None  # "write" or "read": the fastest raw row of it is 100%

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
        cache.drop([p for p in store.rglob("*") if p.is_file()])
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
            ("raw write", None), ("raw write-behind", None), ("raw read", None),
            ("A save", "write"), ("A restore", "read"), ("B save", "write"),
            ("B restore", "read"), ("A incremental", "write"))}

    def run(self, runs: int) -> None:
        """Each run measures everything once, so a drift of the disk's speed hits all rows."""
        length = self.nbytes // 8 // ARRAYS
        layers = max(1, round(self.nbytes / GB * PARAMS_PER_GB / (LAYER_WIDTH * (LAYER_WIDTH + 1))))
        self.versions["B parameters"] = layers * LAYER_WIDTH * (LAYER_WIDTH + 1)
        with self.kernels.start() as a, self.kernels.start() as b:
            a.run(BUILD_A.format(arrays=ARRAYS, length=length))
            b.run(BUILD_B.format(width=LAYER_WIDTH, layers=layers))
            self.versions.update(a.call(VERSIONS))
            self.versions.update(b.call(VERSIONS))
            fingerprint_b = b.call(FINGERPRINT_B)["fingerprint"]
            progress("workloads built")
            for run in range(runs):
                self.raw(run)
                self.workload_a(a, run, length)
                self.workload_b(b, run, fingerprint_b)
                progress(f"run {run + 1}/{runs} done")

    def raw(self, run: int) -> None:
        path = self.root / f"raw-{run}.bin"
        for name, write_behind in (("raw write", False), ("raw write-behind", True)):
            self.rows[name].seconds.append(raw_write(path, self.nbytes, write_behind))
            self.rows[name].nbytes = self.nbytes
        self.rows["raw read"].seconds.append(raw_read(path, self.cache))
        self.rows["raw read"].nbytes = self.nbytes
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

    def remove(self, store: Path) -> None:
        """Free a store's space at once: the bench needs room for one run only."""
        if not self.keep:
            shutil.rmtree(store)


# -- report --------------------------------------------------------------------------------

def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def machine(folder: Path, versions: dict[str, Any], load_at_start: float) -> dict[str, Any]:
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    df = subprocess.run(["df", "-T", str(folder)], capture_output=True, text=True, check=True)
    device, fstype, blocks, _used, available, _pct, mount = df.stdout.splitlines()[-1].split(None, 6)
    return {
        "cpus": len(os.sched_getaffinity(0)), "cpu": cpu,
        "memory_gib": round(int(meminfo["MemTotal"].split()[0]) / (1 << 20), 1),
        "filesystem": {"device": device, "type": fstype, "mount": mount,
                       "size_gib": round(int(blocks) / (1 << 20), 1),
                       "free_gib": round(int(available) / (1 << 20), 1)},
        "platform": platform.platform(),
        "load_at_start": load_at_start,
        "jupyter-gpuckpt": metadata.version("jupyter-gpuckpt"),
        "blake3": metadata.version("blake3"),
        **versions,
    }


def table(rows: list[Row]) -> str:
    best = {kind: max(row.rate for row in rows if row.name.startswith(f"raw {kind}"))
            for kind in ("write", "read")}
    lines = [("", "median s", "GB", "GB written", "GB/s", "% of raw", "runs")]
    for row in rows:
        written = "-" if row.written is None else f"{row.written / GB:.3f}"
        share = "-" if row.baseline is None else f"{100 * row.rate / best[row.baseline]:.0f}% {row.baseline}"
        lines.append((row.name, f"{row.median:.2f}", f"{row.nbytes / GB:.3f}", written,
                      f"{row.rate:.2f}", share, str(len(row.seconds))))
    widths = [max(map(len, column)) for column in zip(*lines, strict=True)]
    return "\n".join(
        "  ".join([line[0].ljust(widths[0])]
                  + [cell.rjust(w) for cell, w in zip(line[1:], widths[1:], strict=True)])
        for line in lines
    )


def report(bench: Bench, info: dict[str, Any]) -> str:
    fs, rows, cache = info["filesystem"], bench.rows, bench.cache
    written = rows["A incremental"].written or 0
    lines = [
        f"Machine: {info['cpus']} CPUs ({info['cpu']}), {info['memory_gib']} GiB memory, {info['platform']}",
        f"File system: {fs['type']} on {fs['device']} mounted at {fs['mount']} "
        f"({fs['size_gib']} GiB, {fs['free_gib']} GiB free)",
        f"Python {info['python']} ({info['executable']}), numpy {info['numpy']}, torch {info['torch']}, "
        f"blake3 {info['blake3']}, jupyter-gpuckpt {info['jupyter-gpuckpt']}",
        f"Workload A: {ARRAYS} float64 arrays; workload B: {info['B parameters'] / 1e6:.0f}M parameters "
        "with Adam state",
        f"Load average (1 min) at the start: {info['load_at_start']:.2f}"
        + (" -- other work was running, so the figures may be low" if info["load_at_start"] > 0.5 else ""),
        "",
        table(list(rows.values())),
        "",
        f"A incremental: {CHANGED_FRACTION:.0%} of A's bytes changed; the save wrote "
        f"{written / 1e6:.1f} MB = {100 * written / rows['A save'].nbytes:.2f}% of the full checkpoint.",
        f"Page cache before timed reads: {'; '.join(sorted(cache.methods))}; at most "
        f"{cache.worst_resident:.1%} of a read's files was still cached when it began"
        + (" (those reads may have been served from memory)." if cache.worst_resident > 0.01 else "."),
        "A cache below this machine (hypervisor, storage server) cannot be dropped from here.",
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
    per_run = 1 + 1 + 2 * CHANGED_FRACTION + 16 * PARAMS_PER_GB / GB  # raw file, A, B
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
