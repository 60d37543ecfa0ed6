"""What the benchmarks share: real kernels, the page cache, the raw disk and the report header.

``bench_checkpoint.py`` (ours against the disk) and ``bench_peers.py`` (ours against the
tools users would pick instead) import this module; each keeps only its own measurements.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

GB = 10**9
IO_BLOCK = 8 << 20
RESULT_MARK = "BENCH-RESULT "
HOOKS = "%load_ext kernel_hooks\n"


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


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


@dataclass
class CacheLog:
    """How the page cache was dropped before each timed read, and what stayed in it.

    With ``everything`` False only the files read are dropped (``drop_caches`` also drops
    the libraries every new kernel loads, which then come from the disk again: slower).
    """

    methods: set[str] = field(default_factory=set)
    worst_resident: float = 0.0
    """The largest fraction of a read's files found in the page cache as it began."""
    everything: bool = True

    def drop(self, paths: list[Path]) -> None:
        """Flush and drop ``paths`` from the page cache, then record what is left of them."""
        os.sync()
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        if not self.everything:
            self.methods.add("sync + posix_fadvise(DONTNEED) per file")
        else:
            self._drop_all()
        total = sum(p.stat().st_size for p in paths)
        if total:
            self.worst_resident = max(self.worst_resident, sum(map(_resident, paths)) / total)

    def _drop_all(self) -> None:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            self.methods.add("sync + posix_fadvise(DONTNEED) per file + drop_caches=3")
        except OSError as e:
            self.methods.add(f"sync + posix_fadvise(DONTNEED) per file (drop_caches: {e.strerror})")

    def summary(self) -> str:
        return (f"Page cache before timed reads: {'; '.join(sorted(self.methods))}; at most "
                f"{self.worst_resident:.1%} of a read's files was still cached when it began"
                + (" (those reads may have been served from memory)." if self.worst_resident > 0.01 else ".")
                + "\nA cache below this machine (hypervisor, storage server) cannot be dropped from here.")


# -- raw disk speed ------------------------------------------------------------------------

def raw_write(path: Path, nbytes: int, write_behind: bool) -> float:
    """Seconds to write ``nbytes`` to a new ``path`` in ``IO_BLOCK`` writes and fsync it.

    With ``write_behind`` each write is followed by ``posix_fadvise(DONTNEED)``, which
    starts writeback at once and keeps the page cache small.
    """
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


def raw_read(path: Path, cache: CacheLog, fresh: bool = False) -> float:
    """Seconds to read ``path`` in ``IO_BLOCK`` reads, once dropped from the page cache: into
    one buffer used again, or with ``fresh`` into new memory the size of the file, as a restore
    reads (each page faulted in by its first write; the mapping is made inside the clock)."""
    block = memoryview(bytearray(IO_BLOCK))
    cache.drop([path])
    with open(path, "rb", buffering=0) as f:
        started = time.perf_counter()
        if fresh:
            size = os.fstat(f.fileno()).st_size
            memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            view = memoryview(memory)
            done = 0
            while done < size and (n := f.readinto(view[done:done + IO_BLOCK])):
                done += n
            seconds = time.perf_counter() - started
            view.release()
            memory.close()
            return seconds
        while f.readinto(block):
            pass
        return time.perf_counter() - started


def warm_memory(nbytes: int, keep_free: int = 3 << 30) -> int:
    """Touch up to ``nbytes`` of fresh memory once, then free it; return the bytes touched.

    In a VM whose host backs guest memory lazily, the first touch of a guest page costs
    several microseconds (0.2-0.8 GB/s measured here) and later ones almost nothing, so
    without this whichever system first needs new memory pays for everyone. ``keep_free``
    is left alone for the other processes on the machine.
    """
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    available = int(meminfo["MemAvailable"].split()[0]) * 1024
    total = max(0, min(nbytes, available - keep_free)) // (1 << 30)
    populate = getattr(mmap, "MAP_POPULATE", 0x8000)
    maps = [mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
            for _ in range(total)]
    for m in maps:
        m.close()
    return total << 30


# -- kernels -------------------------------------------------------------------------------

class Kernel:
    """One ipykernel process and a client on its channels.

    ``kernel_name`` is looked up in ``kernel_dirs`` when given (a benchmark's own
    kernelspecs, such as one running another virtual environment's Python). The connection
    file is named ``kernel-<id>.json`` as a notebook server names it, in ``connection_dir``.
    """

    def __init__(self, env: dict[str, str], cwd: Path, *, kernel_name: str = "python3",
                 kernel_dirs: Sequence[Path] = (), connection_dir: Path | None = None) -> None:
        kwargs: dict[str, Any] = {"kernel_name": kernel_name}
        if kernel_dirs:
            kwargs["kernel_spec_manager"] = KernelSpecManager(kernel_dirs=[str(d) for d in kernel_dirs])
        if connection_dir is not None:
            kwargs["connection_file"] = str(connection_dir / f"kernel-{uuid.uuid4()}.json")
        self.manager = KernelManager(**kwargs)
        self.closed = False
        # ERROR: ipykernel 7 warns at every start that it listens on TCP (the benchmark's own ports)
        self.manager.start_kernel(env=env, cwd=str(cwd), extra_arguments=["--log-level=ERROR"])
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=120)
        except BaseException:
            self.close()
            raise

    def run(self, code: str, timeout: float = 3600) -> str:
        """Run a cell; return its stdout, raise on an error."""
        out: list[str] = []
        errors: list[str] = []

        def on_output(msg: dict[str, Any]) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                (out if content["name"] == "stdout" else errors).append(content["text"])
            elif msg["msg_type"] == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=on_output)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed in the kernel: {''.join(errors)}\n{code[:2000]}")
        return "".join(out)

    def call(self, body: str, **params: Any) -> dict[str, Any]:
        """Run bench code ``body`` (it sets ``result``) without touching the namespace."""
        code = ("import json, sys, time\n" + body.rstrip("\n")
                + f"\nprint({RESULT_MARK!r} + json.dumps(result))\n")
        stdout = self.run(f"exec({code!r}, {{'shell': get_ipython(), 'params': {params!r}}})")
        line = next(ln for ln in reversed(stdout.splitlines()) if ln.startswith(RESULT_MARK))
        result: dict[str, Any] = json.loads(line[len(RESULT_MARK):])
        return result

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.client.stop_channels()
        finally:
            self.manager.shutdown_kernel(now=True)


class Kernels:
    """Starts kernels sharing one Jupyter data dir (so one signing key) in the bench folder.

    ``pythonpath`` is put on the kernels' ``PYTHONPATH`` (bench code they import), and
    ``kernel_dirs`` holds extra kernelspecs a benchmark installs for itself.
    """

    def __init__(self, root: Path, pythonpath: Sequence[Path] = ()) -> None:
        self.root = root
        self.cwd = root / "work"
        self.cwd.mkdir(exist_ok=True)
        self.connections = root / "connections"
        self.connections.mkdir(exist_ok=True)
        self.kernel_dirs: list[Path] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_GPUCKPT_")}
        self.env["JUPYTER_DATA_DIR"] = str(root / "jupyter-data")
        if pythonpath:
            self.env["PYTHONPATH"] = os.pathsep.join(
                [str(p) for p in pythonpath] + [p for p in [os.environ.get("PYTHONPATH", "")] if p])

    def open(self, *imports: str, hooks: bool = True, kernel_name: str = "python3",
             env: dict[str, str] | None = None) -> Kernel:
        """A kernel with the hooks loaded (unless not ``hooks``) and ``imports`` done; the
        caller closes it."""
        kernel = Kernel({**self.env, **(env or {})}, self.cwd, kernel_name=kernel_name,
                        kernel_dirs=self.kernel_dirs, connection_dir=self.connections)
        try:
            setup = (HOOKS if hooks else "") + "".join(f"import {m}\n" for m in imports)
            if setup:
                kernel.run(setup)
        except BaseException:
            kernel.close()
            raise
        return kernel

    @contextmanager
    def start(self, *imports: str, hooks: bool = True, kernel_name: str = "python3",
              env: dict[str, str] | None = None) -> Iterator[Kernel]:
        """:meth:`open`, closed when the block ends."""
        kernel = self.open(*imports, hooks=hooks, kernel_name=kernel_name, env=env)
        try:
            yield kernel
        finally:
            kernel.close()


# -- report --------------------------------------------------------------------------------

def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def machine(folder: Path, versions: dict[str, Any], load_at_start: float) -> dict[str, Any]:
    """The machine, the file system holding ``folder``, and the versions that matter."""
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


def machine_lines(info: dict[str, Any]) -> list[str]:
    fs = info["filesystem"]
    return [
        f"Machine: {info['cpus']} CPUs ({info['cpu']}), {info['memory_gib']} GiB memory, {info['platform']}",
        f"File system: {fs['type']} on {fs['device']} mounted at {fs['mount']} "
        f"({fs['size_gib']} GiB, {fs['free_gib']} GiB free)",
        f"Load average (1 min) at the start: {info['load_at_start']:.2f}"
        + (" -- other work was running, so the figures may be low" if info["load_at_start"] > 0.5 else ""),
    ]


def align(lines: Sequence[Sequence[str]]) -> str:
    """A text table: the first column left-aligned, the others right-aligned."""
    widths = [max(map(len, column)) for column in zip(*lines, strict=True)]
    return "\n".join(
        "  ".join([line[0].ljust(widths[0])]
                  + [cell.rjust(w) for cell, w in zip(line[1:], widths[1:], strict=True)])
        for line in lines
    )
