"""Suspend and resume through a real jupyter_server: when the GPU is free, when the state is
durable, and how long a resume takes, staged (host memory, written behind) against direct.

Run: ``python benchmarks/bench_suspend.py [--gb 1.5] [--runs 4] [--device cuda]
[--host-memory-limit 60%]``. A server with the extension is started in its own process (the
tests' helper) for each mode, its staging folder on ``/dev/shm``:

* ``staged``: the suspend stages the state in host memory, the process ends, the store is
  written afterwards. Run 0 writes new memory (cold); later runs write over the files of the
  kernel's previous copy, recycled once it was durable (warm);
* ``reserve``: the same with ``staging_reserve`` (twice the state) allocated at server start,
  so run 0 writes into memory that exists too;
* ``direct``: ``host_memory_limit = 0``, the process ends once the state is in the store.

Each run gives the kernel ``--gb`` of new arrays (numpy, or torch CUDA tensors with ``--device
cuda``; new each run, so every checkpoint is written whole), suspends it (``?wait=1``: answered
once the process has ended, its GPUs free), waits until the checkpoint is durable, then resumes
it and checks the variables. The yardsticks are measured in the same run: one copy of the bytes
into memory already touched plus one BLAKE3 pass (a warm staged suspend's target is 2x that), the
first write of a new ``/dev/shm`` file of that size (cold: 1.25x), a kernel's start (to its first
cell's answer) plus one BLAKE3 pass (a resume from host memory: 1.5x), and writing the bytes to
the store's disk (fsync'd).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_fresh_memory import FIRST_SHM_WRITE, HASH, TOUCHED_COPY, rows  # noqa: E402
from harness import raw_write  # noqa: E402
from live_server import KERNEL_NAME, Server, running_server  # noqa: E402  (the tests' server helper)

from gpuckpt_store import spare  # noqa: E402
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json  # noqa: E402
from jupyter_gpuckpt.staging.host_memory import default_root  # noqa: E402

BUILD = {
    "cpu": ("import numpy as np\n"
            "arrays = [np.random.default_rng({run} * 8 + i).random({n}) for i in range(8)]"),
    "cuda": ("import torch\ntorch.manual_seed({run})\n"
             "arrays = [torch.rand({n}, dtype=torch.float64, device='cuda') for i in range(8)]"),
}
CHECKSUM = {
    "cpu": "print(float(sum(a.sum() for a in arrays)))",
    "cuda": "print(float(sum(a.sum().item() for a in arrays)), {str(a.device) for a in arrays})",
}
"""Computed from the arrays each time: after a resume, from the restored ones."""
MODES = ("staged", "reserve", "direct")


def _durable(server: Server, kernel_id: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while server.api("GET", f"api/gpuckpt/kernels/{kernel_id}")["last_checkpoint"]["durability"] != "durable":
        if time.monotonic() > deadline:
            raise SystemExit("the write-behind did not finish")
        time.sleep(0.02)


def _wait_for_reserve(staging: Path, nbytes: int, timeout: float = 300) -> None:
    folder = staging / getpass.getuser() / spare.SPARE
    deadline = time.monotonic() + timeout
    while spare.held(folder) + spare.FILL_BYTES // 2 < nbytes:
        if time.monotonic() > deadline:
            raise SystemExit(f"the staging reserve in {folder} was not made")
        time.sleep(0.1)


def _measure(base: Path, args: Any, mode: str, staging: Path) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"free": [], "durable": [], "resume": [], "kernel start": []}
    sources = set()
    nbytes = int(args.gb * 1e9)
    options = [f"--GPUCheckpointApp.host_memory_limit={'0' if mode == 'direct' else args.host_memory_limit}",
               f"--GPUCheckpointApp.staging_root={staging}", "--GPUCheckpointApp.release_mode=suspend"]
    if mode == "reserve":
        options.append(f"--GPUCheckpointApp.staging_reserve={2 * nbytes}")
    with running_server(base, *options) as server:
        if mode == "reserve":
            _wait_for_reserve(staging, 2 * nbytes)
        for _ in range(2):  # a kernel's start, to its first cell's answer: what any resume pays
            started = time.perf_counter()
            kernel_id = server.start_kernel()
            server.run(kernel_id, "pass")
            figures["kernel start"].append(time.perf_counter() - started)
            server.api("DELETE", f"api/kernels/{kernel_id}")
        kernel_id = server.start_kernel()
        n = nbytes // 8 // 8
        for run in range(args.runs):
            server.run(kernel_id, BUILD[args.device].format(run=run, n=n))
            expected = server.run(kernel_id, CHECKSUM[args.device]).strip()
            started = time.perf_counter()
            model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
            figures["free"].append(time.perf_counter() - started)
            wanted = "durable" if mode == "direct" else "staged"
            assert model["last_checkpoint"]["durability"] == wanted, model
            _durable(server, kernel_id)
            figures["durable"].append(time.perf_counter() - started)
            started = time.perf_counter()
            model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
            figures["resume"].append(time.perf_counter() - started)
            sources.add(model["report"]["source"])
            restored = server.run(kernel_id, CHECKSUM[args.device]).strip()
            assert restored == expected, f"the restored arrays differ: {restored} after the resume, {expected} before"
    print(f"  {mode}: resumed from {', '.join(sorted(sources))}; GPU free per run (s): "
          + ", ".join(f"{t:.2f}" for t in figures["free"]), flush=True)
    return figures


def _cell(times: list[float]) -> str:
    return f"{statistics.median(times):6.2f} ({min(times):.2f}-{max(times):.2f})" if times else "-"


def _yardsticks(base: Path, nbytes: int, runs: int) -> dict[str, list[float]]:
    """Seconds of each yardstick over ``runs`` runs, measured now."""
    rates = {title: each for title, _, each in rows(nbytes, runs, frozenset({HASH, TOUCHED_COPY, FIRST_SHM_WRITE}))}
    seconds = {title: [nbytes / 1e9 / rate for rate in each] for title, each in rates.items()}
    disk = []
    for _ in range(runs):
        disk.append(raw_write(base / "raw", nbytes, write_behind=True))
        (base / "raw").unlink()
    return {"copy + hash": [c + h for c, h in zip(seconds[TOUCHED_COPY], seconds[HASH], strict=True)],
            "hash": seconds[HASH], "first shm write": seconds[FIRST_SHM_WRITE], "disk": disk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.5, help="GB of arrays the kernel holds")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--device", choices=tuple(BUILD), default="cpu")
    parser.add_argument("--host-memory-limit", default="50%", help="GPUCheckpointApp.host_memory_limit when staged")
    args = parser.parse_args()
    nbytes = int(args.gb * 1e9)
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        base = Path(tmp)
        for mode in MODES:
            home = base / mode
            spec = home / "data" / "kernels" / KERNEL_NAME
            spec.mkdir(parents=True)
            gpus = 1 if args.device == "cuda" else 0
            (spec / "kernel.json").write_text(json.dumps(kernelspec_json("bench", gpus=gpus)))
            staging = default_root().parent / f"gpuckpt-bench-{mode}-{os.getpid()}"
            try:
                results[mode] = _measure(home, args, mode, staging)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        limits = _yardsticks(base, nbytes, args.runs)
    size = nbytes / 1e9
    print(f"\nkernel holding {size:.2f} GB of new {args.device} arrays per run, {args.runs} runs; "
          "seconds, median (range); run 0 of 'staged' writes new memory (cold), later runs and "
          "'reserve' write over memory that exists (warm)")
    print(f"{'':<34}" + "".join(f"{mode:>22}" for mode in MODES))
    split = {mode: {"cold": r["free"][:1], "warm": r["free"][1:] if mode == "staged" else r["free"]}
             for mode, r in results.items()}
    print(f"{'GPU free, run 0 (cold)':<34}" + "".join(f"{_cell(split[m]['cold']):>22}" for m in MODES))
    print(f"{'GPU free, warm':<34}" + "".join(f"{_cell(split[m]['warm']):>22}" for m in MODES[:2]))
    for key, label in (("durable", "checkpoint durable"), ("resume", "resume, variables back"),
                       ("kernel start", "kernel start")):
        print(f"{label:<34}" + "".join(f"{_cell(results[m][key]):>22}" for m in MODES))
    for name, label in (("copy + hash", "yardstick: touched copy + BLAKE3"),
                        ("first shm write", "yardstick: new /dev/shm file"), ("hash", "yardstick: BLAKE3"),
                        ("disk", "yardstick: write to disk, fsync")):
        print(f"{label:<34}{_cell(limits[name]):>22}")
    med = statistics.median
    warm = split["staged"]["warm"] + split["reserve"]["warm"]
    start = med(results["staged"]["kernel start"] + results["reserve"]["kernel start"])
    resume = results["staged"]["resume"] + results["reserve"]["resume"]
    print(f"targets: warm GPU free {med(warm):.2f} s = {med(warm) / med(limits['copy + hash']):.2f}x touched copy "
          f"+ BLAKE3 (target 2x); cold {med(split['staged']['cold']):.2f} s = "
          f"{med(split['staged']['cold']) / med(limits['first shm write']):.2f}x a new /dev/shm file (target "
          f"1.25x); resume from host memory {med(resume):.2f} s = "
          f"{med(resume) / (start + med(limits['hash'])):.2f}x kernel start + BLAKE3 (target 1.5x)")
    print(json.dumps({"GB": round(size, 2), "runs": args.runs, "results": results, "limits": limits}))


if __name__ == "__main__":
    main()
