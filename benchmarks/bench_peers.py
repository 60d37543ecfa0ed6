"""Benchmark: our checkpoints against the tools users would pick instead, on one machine.

Run it from the repository with the ``test`` and ``bench`` extras installed
(``pip install -e ".[test,bench]"``)::

    python benchmarks/bench_peers.py --quick        # tiny sizes, about 4 minutes
    python benchmarks/bench_peers.py                # a quarter of the issue's sizes, ~25 min on 2 cores
    python benchmarks/bench_peers.py --full         # the issue's sizes (2 GB of arrays, ...)
    python benchmarks/bench_peers.py --only a,e --runs 5 --json peers.json
    python benchmarks/bench_peers.py --gpu          # the GPU variant (needs torch.cuda)

On a machine where torch sees a GPU, (b)'s model and optimizer live on CUDA
(``--b-device`` to choose).

Workloads (``peer_workloads.py``), each built by cells in a real kernel: (a) numpy arrays
in 20 variables, (b) a torch model with its Adam state, (c) small Python objects, (d)
a pandas DataFrame with mixed columns, (e) a notebook whose cells take about a minute
(synthetic data, a model, training, evaluation). ``--scale`` multiplies the sizes and the
notebook's minute (but runs it for 30 s at least); the default, 0.25, keeps the default run
near 25 minutes on 2 cores, more than half of which Kishu takes.

Systems (``peer_systems.py``), all on the same file system, every save made durable
(``fsync``) before its clock stops: ours (``save_checkpoint`` / ``restore_checkpoint``;
"ours incremental" is a second save into the same store after ``change`` overwrote 1%
of the bytes), ``dill.dump_module`` / ``load_module`` of the kernel's module,
``torch.save`` / ``torch.load`` of a dict of the variables, ``pickle`` protocol 5 with
out-of-band buffers written to their own files, and Kishu (its ``commit`` after the cells
that build the data, timed by hooks around its ``post_run_cell`` hook; ``checkout`` in a
fresh kernel). Kishu runs in its own virtual environment, ``.bench/kishu-venv``, made on
first use (``pip install kishu``): its dependencies include the ``typing`` and
``dataclasses`` backports, which must not go into the project's environment. The raw disk
(``harness.raw_write`` / ``raw_read``) is measured in every run of every workload.

Each save runs in the kernel that built the workload; each restore in a fresh kernel,
after the page cache was dropped, and is checked against the saved kernel's fingerprint of
the variables. Times are taken in the kernel around the call; torch.save and pickle
restores of (c) and (e) also count the cell that defines the notebook's classes, which
they cannot load without. Restoring kernels have the workload's libraries and the system's
own module imported before the clock starts, except for (e), whose restore is compared
with re-running the notebook in a fresh kernel, imports included (and "imports only"
times importing its libraries, the floor of any restore). Figures are medians of
``--runs`` runs; the order of the systems rotates from run to run. Peak extra memory is
the saving kernel's resident-set high-water mark above its resident set at the start
(see ``peer_systems.measured``), against the variables' size in memory
(``peer_workloads.state_bytes``).

Small states, the common case (most cells hold megabytes): every invocation also measures
(a) and (c) at 1% of the issue's sizes (20 MB of arrays; 1,000 objects and 1,000 dicts),
ours and pickle 5 only, ``--small-runs`` runs in the same way, and prints them in a table of
their own: there a checkpoint's fixed cost (syncs, signing, threads, the environment record)
outweighs moving the bytes, and the target is to save and restore within 20 ms of pickle 5.

``--quick`` is a smoke test of every path at tiny sizes: one run, a 5 s notebook, Kishu
(whose kernels take 5 s to attach) on (c) only, and the page cache dropped per file only.
At its 1% sizes it judges only the targets that hold at any size (the small states', bytes
on disk, correctness, the per-cell overhead) and lists the others as not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_report  # noqa: E402
from harness import GB, CacheLog, Kernel, Kernels, files_under, machine, progress, raw_read, raw_write, warm_memory  # noqa: E402
from peer_report import SMALL_KEYS, SMALL_SCALE, Figures  # noqa: E402
from peer_workloads import CALIBRATE, NOTEBOOK_SECONDS, Workload, build  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
KISHU_REQUIREMENT = "kishu==0.3.4"
DEFAULT_SCALE = 0.25
"""Keeps the default run near 25 minutes on 2 cores; Kishu takes half of that."""
KISHU_KERNEL = "bench-kishu"
SYSTEMS = ("ours", "dill", "Kishu", "torch.save", "pickle5")
TOOL_IMPORTS = {"ours": (), "dill": ("dill",), "torch.save": ("torch",), "pickle5": ("pickle",),
                "Kishu": ()}
SYSTEMS_SMALL = ("ours", "pickle5")
"""The systems the small states compare: pickle 5 is the floor of a save of the same objects."""
BY_REFERENCE = ("torch.save", "pickle5")
"""Systems that pickle the notebook's classes by reference, so a restoring kernel must
define them first."""

SAVE = "import peer_systems\nresult = peer_systems.save(params['system'], shell, params['folder'], params['names'])\n"
RESTORE = ("import peer_systems\n"
           "result = peer_systems.restore(params['system'], shell, params['folder'], params.get('id'))\n")
FINGERPRINT = "import peer_workloads\nresult = {'fp': peer_workloads.fingerprint(params['key'], shell.user_ns)}\n"
STATE_BYTES = ("import peer_workloads\n"
               "result = {'bytes': peer_workloads.state_bytes(shell.user_ns, tuple(params['names']))}\n")
CHANGE = ("import peer_workloads\n"
          "result = {'changed': peer_workloads.change(params['key'], shell.user_ns, params['seed'],\n"
          "                                           params['total'])}\n")
KISHU_ATTACH = "import peer_systems\npeer_systems.kishu_attach(shell, params['notebook'])\nresult = {}\n"
KISHU_COLLECT = ("import peer_systems\n"
                 "result = {'commits': peer_systems.kishu_commits(),\n"
                 "          'head': peer_systems.kishu_head(params['notebook'])}\n")
KISHU_CHECKOUT = "import peer_systems\nresult = peer_systems.kishu_checkout(shell, params['id'])\n"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in files_under(folder)) if folder.exists() else 0


def new_notebook(path: Path) -> Path:
    """An empty notebook file, for Kishu to attach to."""
    path.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def fingerprint(kernel: Kernel, key: str) -> Any:
    return json.loads(json.dumps(kernel.call(FINGERPRINT, key=key)["fp"]))


# -- Kishu's environment -------------------------------------------------------------------

def kishu_python(venv: Path) -> tuple[Path | None, str]:
    """Kishu's venv interpreter (made on first use) and its version, or None and why not."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import kishu; print(kishu.__version__)"]
    if python.exists():
        done = subprocess.run(probe, capture_output=True, text=True)
        if done.returncode == 0:
            return python, done.stdout.strip()
    progress(f"installing {KISHU_REQUIREMENT} into {venv} (its own venv, using this Python's packages)")
    steps = ([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", KISHU_REQUIREMENT])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"`{' '.join(step[-3:])}` failed: {(done.stderr or done.stdout).strip()[-300:]}"
    done = subprocess.run(probe, capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"kishu does not import in {venv}: {done.stderr.strip()[-300:]}"
    return python, done.stdout.strip()


def install_kishu_kernel(kernels: Kernels, python: Path) -> None:
    spec = kernels.root / "kernelspecs" / KISHU_KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "bench: Kishu", "language": "python"}))
    kernels.kernel_dirs.append(spec.parent)


# -- the measurements ----------------------------------------------------------------------

class PeerBench:
    """All measurements of one invocation, in one folder of the file system under test."""

    def __init__(self, root: Path, scale: float, runs: int, systems: list[str], kishu_env: dict[str, str],
                 keep: bool, notebook_seconds: float = NOTEBOOK_SECONDS) -> None:
        self.root, self.scale, self.runs, self.systems, self.keep = root, scale, runs, systems, keep
        self.notebook_seconds = notebook_seconds
        self.kernels = Kernels(root, pythonpath=[BENCH_DIR])
        self.kishu_env = kishu_env
        self.cache = CacheLog()
        self.kishu_overhead = True
        self.kishu_workloads = "abcde"
        self.raw_bytes = max(64 << 20, int(2 * GB * scale))
        self.measure_disk = True
        """Whether each run also times the raw disk (the small states are not judged by it)."""
        self.results: dict[str, dict[str, Figures]] = {}
        self.notes: dict[str, dict[str, Any]] = {}

    def figures(self, key: str, system: str) -> Figures:
        return self.results.setdefault(key, {}).setdefault(system, Figures())

    def folder(self, key: str, system: str, run: int) -> Path:
        return self.root / "stores" / f"{key}-{system.replace('.', '_')}-{run}"

    def remove(self, path: Path) -> None:
        if not self.keep:
            shutil.rmtree(path, ignore_errors=True)

    # -- one workload --

    def workload(self, w: Workload) -> Workload:
        progress(f"({w.key}) building {w.title}")
        self.notes[w.key] = {"title": w.title}
        with self.kernels.start() as builder:
            started = time.perf_counter()
            builder.run(w.setup)
            if w.key == "e":
                for cell in w.cells[:2]:
                    builder.run(cell)
                seconds = self.notebook_seconds - (time.perf_counter() - started)
                steps = builder.call(CALIBRATE, probe=min(3.0, seconds / 10), seconds=seconds)["steps"]
                w = build(self.scale, steps)["e"]
                self.notes["e"]["title"] = w.title
                for cell in w.cells[2:]:
                    builder.run(cell)
            else:
                for cell in w.cells:
                    builder.run(cell)
            self.notes[w.key]["build_seconds"] = time.perf_counter() - started
            self.notes[w.key]["fingerprint"] = initial = fingerprint(builder, w.key)
            self.notes[w.key]["state bytes"] = builder.call(STATE_BYTES, names=list(w.names))["bytes"]
            for run in range(self.runs):
                if self.measure_disk:
                    self.raw(w.key, run)
                order = self.systems[run % len(self.systems):] + self.systems[:run % len(self.systems)]
                for system in order:
                    if system != "Kishu" or w.key in self.kishu_workloads:
                        self.measure(w, system, builder, run)
                if w.key == "e":
                    self.rerun(w, initial)
                progress(f"({w.key}) run {run + 1}/{self.runs} done")
        return w

    def measure(self, w: Workload, system: str, builder: Kernel, run: int) -> None:
        figures = self.figures(w.key, system)
        if figures.error:
            return
        started = time.perf_counter()
        try:
            if system == "ours":
                self.ours(w, builder, run)
            elif system == "Kishu":
                self.kishu(w, run)
            else:
                self.peer(w, system, builder, run)
        except Exception as e:  # a peer that cannot save or restore this workload
            figures.error = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            progress(f"({w.key}) {system} failed: {figures.error}")
        else:
            progress(f"({w.key}) {system}: save {figures.save[-1]:.2f} s"
                     + (f", restore {figures.restore[-1]:.2f} s" if figures.restore else ""))
        self.notes[w.key].setdefault("bench seconds", {}).setdefault(system, []).append(
            round(time.perf_counter() - started, 1))

    def raw(self, key: str, run: int) -> None:
        path = self.root / f"raw-{key}-{run}.bin"
        for name, behind in (("raw write", False), ("raw write-behind", True)):
            figures = self.figures(key, name)
            figures.save.append(raw_write(path, self.raw_bytes, behind))
            figures.disk.append(self.raw_bytes)
        self.figures(key, "raw read").restore.append(raw_read(path, self.cache))
        self.figures(key, "raw read").disk.append(self.raw_bytes)
        path.unlink()

    def drop_cache(self, w: Workload, folder: Path) -> None:
        """Drop the page cache; for the notebook, load its libraries' files again, as they
        are for the re-run it is compared with (dropping them would bill this restore for
        reading torch's gigabyte of shared libraries from disk)."""
        self.cache.drop(files_under(folder))
        if not w.imports and self.cache.everything:
            subprocess.run([sys.executable, "-c", "import numpy, pandas, torch, dill, cloudpickle, blake3"],
                           check=True)

    def restored(self, w: Workload, system: str, folder: Path, *, checkpoint_id: str | None = None) -> Any:
        """Restore ``folder`` into a fresh kernel; return the restore's figures and fingerprint."""
        # The notebook's restore is compared with re-running it, imports included: there,
        # importing the system's own loader (torch for torch.save) is part of the restore.
        timed = "".join(f"import {m}\n" for m in TOOL_IMPORTS[system]) if not w.imports else ""
        imports = () if timed else TOOL_IMPORTS[system] + w.imports
        with self.kernels.start(*imports, hooks=system == "ours") as kernel:
            extra = 0.0
            if timed or (system in BY_REFERENCE and w.definitions):
                started = time.perf_counter()
                kernel.run(timed + (w.definitions if system in BY_REFERENCE else ""))
                extra = time.perf_counter() - started
            self.drop_cache(w, folder)
            result = kernel.call(RESTORE, system=system, folder=str(folder), id=checkpoint_id)
            result["seconds"] += extra
            return result, fingerprint(kernel, w.key)

    def saved(self, w: Workload, system: str, builder: Kernel, folder: Path) -> tuple[dict[str, Any], Any]:
        expected = fingerprint(builder, w.key)
        os.sync()  # earlier dirty pages are not this save's to flush
        return builder.call(SAVE, system=system, folder=str(folder), names=list(w.names)), expected

    def record(self, w: Workload, system: str, save: dict[str, Any], disk: int, restore: dict[str, Any] | None,
               expected: Any, got: Any) -> None:
        figures = self.figures(w.key, system)
        if got != expected:
            differ = [part for part in expected if got.get(part) != expected[part]]
            raise RuntimeError(f"restored state differs from the saved one in: {', '.join(differ)}")
        figures.save.append(save["seconds"])
        figures.peak.append(save["peak_extra"])
        figures.disk.append(disk)
        if restore is not None:
            figures.restore.append(restore["seconds"])

    def ours(self, w: Workload, builder: Kernel, run: int) -> None:
        store = self.folder(w.key, "ours", run)
        save, expected = self.saved(w, "ours", builder, store)
        restore, got = self.restored(w, "ours", store, checkpoint_id=save["id"])
        self.record(w, "ours", save, folder_bytes(store), restore, expected, got)
        if save["skipped"]:
            self.notes[w.key]["ours skipped"] = save["skipped"]
        changed = builder.call(CHANGE, key=w.key, seed=run, total=self.notes[w.key]["state bytes"])["changed"]
        self.notes[w.key]["changed bytes"] = changed
        again, expected = self.saved(w, "ours", builder, store)
        self.record(w, "ours incremental", again, again["bytes_written"], None, expected, expected)
        self.remove(store)

    def peer(self, w: Workload, system: str, builder: Kernel, run: int) -> None:
        folder = self.folder(w.key, system, run)
        save, expected = self.saved(w, system, builder, folder)
        restore, got = self.restored(w, system, folder)
        self.record(w, system, save, folder_bytes(folder), restore, expected, got)
        self.remove(folder)

    def kishu(self, w: Workload, run: int) -> None:
        """Build the workload in a Kishu kernel (Kishu commits after each cell), then check out."""
        folder = self.folder(w.key, "Kishu", run)
        folder.mkdir(parents=True)
        notebook = new_notebook(folder / "notebook.ipynb")
        with self.kernels.start(hooks=False, kernel_name=KISHU_KERNEL, env=self.kishu_env) as kernel:
            kernel.call(KISHU_ATTACH, notebook=str(notebook))
            before = folder_bytes(folder)
            os.sync()
            kernel.run(w.setup)
            for cell in w.cells:
                kernel.run(cell)
            commits = kernel.call(KISHU_COLLECT, notebook=str(notebook))
        # The cells are deterministic: the state is the builder's before any change (reading
        # it here would make Kishu trace and hash every variable once more).
        expected = self.notes[w.key]["fingerprint"]
        save = {"seconds": sum(c["seconds"] for c in commits["commits"]),
                "peak_extra": max(c["peak_extra"] for c in commits["commits"])}
        disk = folder_bytes(folder) - before
        with self.kernels.start(*w.imports, hooks=False, kernel_name=KISHU_KERNEL, env=self.kishu_env) as kernel:
            kernel.call(KISHU_ATTACH, notebook=str(notebook))
            self.drop_cache(w, folder)
            restore = kernel.call(KISHU_CHECKOUT, id=commits["head"])
            got = fingerprint(kernel, w.key)
        self.record(w, "Kishu", save, disk, restore, expected, got)
        self.notes[w.key]["Kishu commits"] = len(commits["commits"])
        self.remove(folder)

    def rerun(self, w: Workload, expected: Any) -> None:
        """Run the notebook again in a fresh kernel: what a restore saves the user from.

        Also times importing its libraries alone in a fresh kernel: no restore can be
        faster than that.
        """
        with self.kernels.start() as kernel:
            self.drop_cache(w, self.root / "stores")
            started = time.perf_counter()
            kernel.run(w.setup)
            self.figures(w.key, "imports only").restore.append(time.perf_counter() - started)
        with self.kernels.start() as kernel:
            started = time.perf_counter()
            kernel.run(w.setup)
            for cell in w.cells:
                kernel.run(cell)
            seconds = time.perf_counter() - started
            same = fingerprint(kernel, w.key) == expected
        figures = self.figures(w.key, "re-run")
        figures.restore.append(seconds)
        self.notes["e"]["re-run gives the same state"] = same and self.notes["e"].get(
            "re-run gives the same state", True)

    # -- per-cell overhead --

    def cell_overhead(self, cells: int) -> dict[str, Any]:
        """Execute round trips of a trivial cell, with and without the hooks loaded.

        Two kernels of each kind, taking turns, ``cells`` cells per kind: two identical
        kernels differ by a few tenths of a millisecond here, so one of each would not do.
        """
        progress(f"per-cell overhead: {cells} trivial cells with and {cells} without the hooks")
        times: dict[str, list[float]] = {"without hooks": [], "with hooks": []}
        kernels = [("without hooks", self.kernels.open(hooks=False)), ("with hooks", self.kernels.open(hooks=True)),
                   ("without hooks", self.kernels.open(hooks=False)), ("with hooks", self.kernels.open(hooks=True))]
        try:
            for _, kernel in kernels:
                for _ in range(20):
                    kernel.run("pass")
            for i in range(cells // 2):
                for name, kernel in (kernels if i % 2 else kernels[::-1]):
                    started = time.perf_counter()
                    kernel.run("pass")
                    times[name].append(time.perf_counter() - started)
        finally:
            for _, kernel in kernels:
                kernel.close()
        if "Kishu" in self.systems and self.kishu_overhead:
            notebook = new_notebook(self.root / "overhead.ipynb")
            with self.kernels.start(hooks=False, kernel_name=KISHU_KERNEL, env=self.kishu_env) as kishu:
                kishu.call(KISHU_ATTACH, notebook=str(notebook))
                times["with Kishu (for reference)"] = []
                for _ in range(max(20, cells // 4)):
                    started = time.perf_counter()
                    kishu.run("pass")
                    times["with Kishu (for reference)"].append(time.perf_counter() - started)
        return times


# -- command line --------------------------------------------------------------------------

def torch_device() -> str:
    """``cuda`` where the kernels' torch sees a GPU, else ``cpu`` (asked in a child process:
    this one does not import torch)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return "cuda" if probe.stdout.strip() == "True" else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                      help=f"fraction of the issue's sizes (default: {DEFAULT_SCALE})")
    size.add_argument("--full", action="store_true", help="the issue's sizes (--scale 1)")
    size.add_argument("--quick", action="store_true",
                      help="smoke test: --scale 0.01, 1 run, a 5 s notebook, Kishu on (c) only, "
                           "page cache dropped per file only")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default: 3)")
    parser.add_argument("--only", default="a,b,c,d,e", help="workloads to run (default: a,b,c,d,e)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"default: {','.join(SYSTEMS)}")
    parser.add_argument("--cells", type=int, default=200, help="trivial cells for the per-cell overhead")
    parser.add_argument("--small-runs", type=int, default=None,
                        help=f"runs of the small states, ours and pickle 5 at scale {SMALL_SCALE:g}; 0 to skip "
                             "(default: 3 with --quick, else 5)")
    parser.add_argument("--dir", type=Path, default=Path(".bench"), help="folder on the file system to test")
    parser.add_argument("--kishu-venv", type=Path, default=BENCH_DIR.parent / ".bench" / "kishu-venv",
                        help="Kishu's virtual environment, made on first use")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the bench folder and its stores")
    parser.add_argument("--b-device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="torch device of (b)'s model; auto: cuda where torch sees a GPU (default: auto)")
    parser.add_argument("--gpu", action="store_true", help="run the GPU variant instead (needs torch.cuda)")
    parser.add_argument("--gpu-gb", type=float, default=40.0, help="GB of CUDA tensors for --gpu (default: 40)")
    parser.add_argument("--gpu-budget", type=float, default=240.0,
                        help="seconds --gpu may take; the size is cut to fit (default: 240)")
    args = parser.parse_args()
    if args.gpu:
        import peer_gpu

        sys.exit(peer_gpu.main(args))
    scale = 1.0 if args.full else 0.01 if args.quick else args.scale
    runs = 1 if args.quick else args.runs
    cells = 30 if args.quick else args.cells
    if args.small_runs is None:
        args.small_runs = 3 if args.quick else 5
    keys = [k for k in args.only.split(",") if k]
    systems = [s for s in SYSTEMS if s in args.systems.split(",")]
    if runs < 1 or args.small_runs < 0 or not set(keys) <= set("abcde"):
        parser.error("--runs must be at least 1, --small-runs at least 0; --only takes letters a to e")

    args.dir.mkdir(parents=True, exist_ok=True)
    needed = 8 * 2 * GB * scale + GB
    if shutil.disk_usage(args.dir).free < needed:
        sys.exit(f"{args.dir} needs about {needed / GB:.1f} GB free for this run")
    versions: dict[str, Any] = {}
    kishu_env: dict[str, str] = {}
    root = Path(tempfile.mkdtemp(prefix="peers-", dir=args.dir)).resolve()
    notebook = 5.0 if args.quick else max(30.0, NOTEBOOK_SECONDS * scale)
    bench = PeerBench(root, scale, runs, systems, kishu_env, args.keep, notebook)
    if args.quick:  # a smoke test: the cheaper page cache drop, and Kishu (slow to start) on (c) only
        bench.cache.everything = bench.kishu_overhead = False
        bench.kishu_workloads = "c"
    if "Kishu" in systems:
        python, version = kishu_python(args.kishu_venv.resolve())
        if python is None:
            systems.remove("Kishu")
            versions["kishu"] = f"not measured: {version}"
        else:
            install_kishu_kernel(bench.kernels, python)
            versions["kishu"] = version
            kishu_env.update(ENV_KISHU_TEST_MODE="1", KISHU_PATH_ROOT=str(root / "kishu-home"))
    versions.setdefault("kishu", "not run")
    load_at_start = os.getloadavg()[0]
    progress(f"scale {scale:g}, {runs} run(s), workloads {','.join(keys)}, systems {','.join(systems)}, in {root}")
    started = time.perf_counter()
    if not args.quick:
        warmed = warm_memory(int(8 * 2 * GB * scale) + (2 << 30))
        progress(f"touched {warmed / 2**30:.0f} GiB of memory once ({time.perf_counter() - started:.0f} s)")
    small = None
    if args.small_runs:
        (root / "small").mkdir()
        small = PeerBench(root / "small", SMALL_SCALE, args.small_runs, [s for s in SYSTEMS_SMALL if s in systems],
                          kishu_env, args.keep, notebook)
        small.measure_disk = False
    try:
        overhead = bench.cell_overhead(cells) if cells else {}
        if small is not None:
            progress(f"small states: ({'), ('.join(SMALL_KEYS)}) at scale {SMALL_SCALE:g}, {small.runs} runs")
            smalls = build(SMALL_SCALE)
            for key in SMALL_KEYS:
                small.workload(smalls[key])
        workloads = build(scale, device=args.b_device if args.b_device != "auto" else torch_device())
        done = [bench.workload(workloads[key]) for key in keys]
        with bench.kernels.start("numpy", "pandas", "torch", "dill", hooks=False) as kernel:
            versions.update(kernel.call(peer_report.VERSIONS))
        info = machine(root, versions, load_at_start)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    text, data = peer_report.report(bench, done, overhead, info, scale, elapsed, small)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
