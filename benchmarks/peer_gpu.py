"""The GPU variant of ``bench_peers.py`` (``--gpu``): suspend and resume a kernel holding
CUDA tensors, against the PCIe and disk limits measured in the same run.

A kernel holds up to ``--gpu-gb`` (default 40) GB of float32 CUDA tensors in 40 variables.
Each run suspends it (``save_checkpoint``, then the kernel process is shut down) and times
until NVML shows the GPU's memory free again, then resumes it (a fresh kernel restores the
checkpoint) and times until that kernel answers a cell; the tensors are checked. The
limits are the bytes over the pinned device-to-host and host-to-device copy speeds and
over the raw disk's write and read speeds, all measured in this run.

The size is cut to what fits the GPU's free memory, the disk's free space and the time
budget (``--gpu-budget``, for a lent GPU machine's short lease); the report says which.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import GB, CacheLog, Kernels, align, files_under, machine, machine_lines, progress, raw_read, raw_write

TENSORS = 40
RAW_BYTES = 4 * GB
PER_RUN_SECONDS = 10.0
"""A run's fixed cost beside moving the bytes: kernel shutdown and start, torch's CUDA
start, the tensor check."""
EFFICIENCY = 0.7
"""The fraction of the slower limit that the sizing assumes a save or restore reaches."""
BUILD = """\
import torch
torch.manual_seed(0)
for _i in range({count}):
    globals()[f"g{{_i:02d}}"] = torch.randn({numel}, device="cuda:0")
del _i
"""
CHECK = """\
import torch
result = {"fp": [round(float(shell.user_ns[f"g{i:02d}"][::4099].double().sum()), 3) for i in range(params["count"])]}
"""
PCIE = """\
import torch
host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
rates = {}
for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(4):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    rates[name] = 4 * (1 << 30) / (time.perf_counter() - started)
result = {**rates, "gpu": torch.cuda.get_device_name(0), "free": torch.cuda.mem_get_info(0)[0],
          "torch": torch.__version__, "cuda": torch.version.cuda}
"""
SAVE = ("from kernel_hooks import CheckpointStore, save_checkpoint\nstarted = time.perf_counter()\n"
        "saved = save_checkpoint(shell, CheckpointStore(params['store']))\n"
        "result = {'seconds': time.perf_counter() - started, 'id': saved.id, 'bytes': saved.bytes_total}\n")
RESTORE = ("from kernel_hooks import CheckpointStore, restore_checkpoint\nstarted = time.perf_counter()\n"
           "import torch\ntorch.cuda.init()\ncuda_started = time.perf_counter()\n"
           "restore_checkpoint(shell, params['id'], CheckpointStore(params['store']))\n"
           "result = {'seconds': time.perf_counter() - started, 'cuda': cuda_started - started}\n")


def _gpu_used() -> int:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def size_gb(asked: float, gpu_free: int, disk_free: int, seconds_left: float, runs: int,
            rates: dict[str, float]) -> tuple[float, str]:
    """The GB of tensors to hold, and what limited it."""
    per_gb = GB * (1 / min(rates["d2h"], rates["write"]) + 1 / min(rates["h2d"], rates["read"])) / EFFICIENCY
    fixed = PER_RUN_SECONDS + RAW_BYTES * (1 / rates["write"] + 1 / rates["read"])
    bounds = {
        "asked": asked,
        "GPU memory": 0.85 * gpu_free / GB,
        "disk space": 0.9 * (disk_free - RAW_BYTES) / GB,
        "time budget": (seconds_left / runs - fixed) / per_gb,
    }
    limit = min(bounds, key=lambda k: bounds[k])
    return bounds[limit], limit


def run(root: Path, gb: float, runs: int, budget: float) -> tuple[str, dict[str, Any]]:
    import pynvml

    started_all, load_at_start = time.perf_counter(), os.getloadavg()[0]
    pynvml.nvmlInit()
    kernels, cache = Kernels(root), CacheLog()
    times: dict[str, list[float]] = {k: [] for k in ("save", "until GPU free", "until answers", "restore in kernel",
                                                     "torch import + CUDA start", "raw write", "raw read")}
    raw_path = root / "raw.bin"

    def measure_disk() -> None:
        times["raw write"].append(raw_write(raw_path, RAW_BYTES, write_behind=True))
        times["raw read"].append(raw_read(raw_path, cache))
        raw_path.unlink()

    with kernels.start() as probe:
        pcie = probe.call(PCIE)
    measure_disk()
    rates = {"h2d": pcie["h2d"], "d2h": pcie["d2h"],
             "write": RAW_BYTES / times["raw write"][0], "read": RAW_BYTES / times["raw read"][0]}
    asked = gb
    gb, limited_by = size_gb(gb, pcie["free"], shutil.disk_usage(root).free,
                             budget - (time.perf_counter() - started_all), runs, rates)
    if gb < 1:
        raise SystemExit(f"only {gb:.2f} GB fits ({limited_by}); give a larger --gpu-budget")
    progress(f"{gb:.1f} GB of CUDA tensors (asked {asked:g}; limited by {limited_by}), {runs} runs")
    numel = int(gb * GB / 4 / TENSORS)
    idle = _gpu_used()
    store = root / "store"
    kernel = kernels.open()
    try:
        kernel.run(BUILD.format(count=TENSORS, numel=numel))
        expected = kernel.call(CHECK, count=TENSORS)["fp"]
        for run_index in range(runs):
            if run_index:
                measure_disk()
            started = time.perf_counter()
            saved = kernel.call(SAVE, store=str(store))
            kernel.close()
            while _gpu_used() > idle + (512 << 20):
                time.sleep(0.01)
            times["until GPU free"].append(time.perf_counter() - started)
            times["save"].append(saved["seconds"])
            cache.drop(files_under(store))
            started = time.perf_counter()
            kernel = kernels.open()
            restored = kernel.call(RESTORE, store=str(store), id=saved["id"])
            kernel.run("pass")
            times["until answers"].append(time.perf_counter() - started)
            times["restore in kernel"].append(restored["seconds"])
            times["torch import + CUDA start"].append(restored["cuda"])
            if kernel.call(CHECK, count=TENSORS)["fp"] != expected:
                raise RuntimeError("the resumed kernel's tensors differ from the suspended ones")
            shutil.rmtree(store)
            progress(f"gpu run {run_index + 1}/{runs}: save {times['save'][-1]:.1f} s, "
                     f"restore {times['restore in kernel'][-1]:.1f} s")
    finally:
        kernel.close()
    nbytes = saved["bytes"]
    median = {k: statistics.median(v) for k, v in times.items()}
    disk_write, disk_read = RAW_BYTES / median["raw write"], RAW_BYTES / median["raw read"]
    limits = {"save": max(nbytes / pcie["d2h"], nbytes / disk_write),
              "until GPU free": max(nbytes / pcie["d2h"], nbytes / disk_write),
              "restore in kernel": max(nbytes / pcie["h2d"], nbytes / disk_read),
              "until answers": max(nbytes / pcie["h2d"], nbytes / disk_read)}
    lines: list[tuple[str, ...]] = [("", "median s", "GB/s", "limit s", "% of limit", "runs")]
    for name in ("save", "until GPU free", "restore in kernel", "until answers"):
        lines.append((name, f"{median[name]:.2f}", f"{nbytes / GB / median[name]:.2f}", f"{limits[name]:.2f}",
                      f"{100 * limits[name] / median[name]:.0f}%", str(len(times[name]))))
    info = machine(root, {"torch": pcie["torch"], "cuda": pcie["cuda"],
                          "driver": pynvml.nvmlSystemGetDriverVersion()}, load_at_start)
    text = "\n".join([
        f"GPU variant: {nbytes / GB:.1f} GB of CUDA tensors in {TENSORS} variables on {pcie['gpu']} "
        f"(asked {asked:g} GB; limited by {limited_by}); torch {pcie['torch']}, CUDA {pcie['cuda']}, "
        f"driver {info['driver']}",
        *machine_lines(info),
        f"PCIe pinned copies: host->device {pcie['h2d'] / GB:.1f} GB/s, device->host {pcie['d2h'] / GB:.1f} GB/s; "
        f"raw disk with fsync: write {disk_write / GB:.2f} GB/s, read {disk_read / GB:.2f} GB/s",
        "limit = the checkpoint's bytes over the slower of the PCIe copy and the disk, in that direction",
        align(lines),
        f"Restore includes importing torch and starting CUDA: {median['torch import + CUDA start']:.2f} s "
        "(median), a fixed cost whatever the size.",
        cache.summary()])
    return text, {"gpu": pcie["gpu"], "bytes": nbytes, "asked_gb": asked, "limited_by": limited_by,
                  "pcie": pcie, "times": times, "limits": limits, "machine": info}


def main(args: argparse.Namespace) -> int:
    """Called by ``bench_peers.py --gpu``; returns the exit status."""
    import torch

    if not torch.cuda.is_available():
        print("--gpu needs a CUDA GPU that torch can use; none here.")
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="gpu-", dir=args.dir)).resolve()
    try:
        text, data = run(root, args.gpu_gb, args.runs, args.gpu_budget)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0
