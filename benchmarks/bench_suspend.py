"""Suspend and resume through a real jupyter_server: when the GPU is free, when the state is
durable, and how long a resume takes, staged (host memory, written behind) against direct.

Run: ``python benchmarks/bench_suspend.py [--gb 1.0] [--runs 3] [--device cuda]
[--host-memory-limit 60%]``. A server with the extension is started in its own process (the
tests' helper) for each mode: ``staged`` (the suspend stages the state in host memory, the
process ends, the store is written afterwards) and ``direct`` (``host_memory_limit = 0``: the
process ends once the state is in the store). Each run gives the kernel ``--gb`` of new arrays
(numpy, or torch CUDA tensors with ``--device cuda``; new each run, so every checkpoint is
written whole), suspends it (``?wait=1``: answered once the process has ended, its GPUs free),
waits until the checkpoint is durable, then resumes it and checks the variables. The limits
are measured in the same run: writing the same bytes to the store's disk (fsync'd) and to host
memory (``/dev/shm``). Figures are medians, with the range over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness import raw_write  # noqa: E402
from live_server import KERNEL_NAME, Server, running_server  # noqa: E402  (the tests' server helper)

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json  # noqa: E402
from jupyter_gpuckpt.staging.host_memory import default_root  # noqa: E402

BUILD = {
    "cpu": ("import numpy as np\n"
            "arrays = [np.random.default_rng({run} * 8 + i).random({n}) for i in range(8)]\n"
            "check = float(sum(a.sum() for a in arrays))"),
    "cuda": ("import torch\ntorch.manual_seed({run})\n"
             "arrays = [torch.rand({n}, dtype=torch.float64, device='cuda') for i in range(8)]\n"
             "check = float(sum(a.sum().item() for a in arrays))"),
}


def _durable(server: Server, kernel_id: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while server.api("GET", f"api/gpuckpt/kernels/{kernel_id}")["last_checkpoint"]["durability"] != "durable":
        if time.monotonic() > deadline:
            raise SystemExit("the write-behind did not finish")
        time.sleep(0.02)


def _measure(base: Path, args: Any, limit: str) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"free": [], "durable": [], "resume": []}
    sources = set()
    mode = "staged" if limit != "0" else "direct"
    with running_server(base, f"--GPUCheckpointApp.host_memory_limit={limit}",
                        "--GPUCheckpointApp.release_mode=suspend") as server:
        kernel_id = server.start_kernel()
        n = int(args.gb * 1e9 / 8 / 8)
        for run in range(args.runs):
            server.run(kernel_id, BUILD[args.device].format(run=run, n=n))
            expected = server.run(kernel_id, "print(check)").strip()
            started = time.perf_counter()
            model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
            figures["free"].append(time.perf_counter() - started)
            assert model["last_checkpoint"]["durability"] == ("staged" if mode == "staged" else "durable"), model
            _durable(server, kernel_id)
            figures["durable"].append(time.perf_counter() - started)
            started = time.perf_counter()
            model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
            figures["resume"].append(time.perf_counter() - started)
            sources.add(model["report"]["source"])
            assert server.run(kernel_id, "print(check)").strip() == expected
    print(f"  {mode}: resumed from {', '.join(sorted(sources))}")
    return figures


def _cell(times: list[float]) -> str:
    return f"{statistics.median(times):6.2f} ({min(times):.2f}-{max(times):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="GB of arrays the kernel holds")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", choices=tuple(BUILD), default="cpu")
    parser.add_argument("--host-memory-limit", default="50%", help="GPUCheckpointApp.host_memory_limit when staged")
    args = parser.parse_args()
    nbytes = int(args.gb * 1e9)
    results: dict[str, dict[str, list[float]]] = {}
    limits: dict[str, list[float]] = {"disk": [], "memory": []}
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        base = Path(tmp)
        for mode, limit in (("staged", args.host_memory_limit), ("direct", "0")):
            home = base / mode
            spec = home / "data" / "kernels" / KERNEL_NAME
            spec.mkdir(parents=True)
            gpus = 1 if args.device == "cuda" else 0
            (spec / "kernel.json").write_text(json.dumps(kernelspec_json("bench", gpus=gpus)))
            results[mode] = _measure(home, args, limit)
        shm = default_root().parent / f"gpuckpt-bench-{os.getpid()}"
        for _ in range(args.runs):
            limits["disk"].append(raw_write(base / "raw", nbytes, write_behind=True))
            limits["memory"].append(raw_write(shm, nbytes, write_behind=False))
            (base / "raw").unlink()
            shm.unlink()
    size = nbytes / 1e9
    info: dict[str, Any] = {"GB": round(size, 2), "runs": args.runs}
    print(f"\nkernel holding {size:.2f} GB of new {args.device} arrays per run, {args.runs} runs; "
          "seconds, median (range)")
    print(f"{'':<34}{'staged':>22}{'direct':>22}")
    for key, label in (("free", "GPU free (suspend answered)"), ("durable", "checkpoint durable"),
                       ("resume", "resume, variables back")):
        print(f"{label:<34}{_cell(results['staged'][key]):>22}{_cell(results['direct'][key]):>22}")
    for name, label in (("memory", "limit: write to /dev/shm"), ("disk", "limit: write to disk, fsync")):
        print(f"{label:<34}{_cell(limits[name]):>22}")
    ratio = statistics.median(results["direct"]["free"]) / statistics.median(results["staged"]["free"])
    print(f"GPU free {ratio:.1f}x sooner staged; the staged suspend's host-memory copy runs at "
          f"{size / statistics.median(results['staged']['free']):.2f} GB/s (limit "
          f"{size / statistics.median(limits['memory']):.2f}), the durable write follows at "
          f"{size / statistics.median(results['staged']['durable']):.2f} GB/s from the request "
          f"(disk limit {size / statistics.median(limits['disk']):.2f})")
    print(json.dumps({**info, "results": results, "limits": limits}))


if __name__ == "__main__":
    main()
