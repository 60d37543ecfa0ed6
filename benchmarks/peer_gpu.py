"""The GPU variant of ``bench_peers.py`` (``--gpu``): suspend and resume a kernel holding
CUDA tensors, against the PCIe and disk limits measured in the same run.

UNTESTED: written on a machine without a GPU; it runs only where ``torch.cuda`` is
available. A kernel holds ``--gpu-gb`` (default 40) GB of float32 CUDA tensors in 40
variables. Each run suspends it (``save_checkpoint``, then the kernel process is shut
down) and times until NVML shows the GPU's memory free again, then resumes it (a fresh
kernel restores the checkpoint) and times until that kernel answers a cell; the tensors
are checked. The limits are the bytes over the pinned device-to-host and host-to-device
copy speeds and over the raw disk's write and read speeds, all measured in this run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import GB, CacheLog, Kernels, align, files_under, progress, raw_read, raw_write

TENSORS = 40
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
result = {**rates, "gpu": torch.cuda.get_device_name(0), "free": torch.cuda.mem_get_info(0)[0]}
"""
SAVE = ("from kernel_hooks import CheckpointStore, save_checkpoint\nstarted = time.perf_counter()\n"
        "saved = save_checkpoint(shell, CheckpointStore(params['store']))\n"
        "result = {'seconds': time.perf_counter() - started, 'id': saved.id, 'bytes': saved.bytes_total}\n")
RESTORE = ("from kernel_hooks import CheckpointStore, restore_checkpoint\nstarted = time.perf_counter()\n"
           "restore_checkpoint(shell, params['id'], CheckpointStore(params['store']))\n"
           "result = {'seconds': time.perf_counter() - started}\n")


def _gpu_used() -> int:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def run(root: Path, gb: float, runs: int) -> tuple[str, dict[str, Any]]:
    import pynvml

    pynvml.nvmlInit()
    kernels, cache = Kernels(root), CacheLog()
    times: dict[str, list[float]] = {k: [] for k in ("save", "until GPU free", "until answers", "restore in kernel",
                                                     "raw write", "raw read")}
    with kernels.start() as probe:
        pcie = probe.call(PCIE)
    gb = min(gb, 0.85 * pcie["free"] / GB)
    numel = int(gb * GB / 4 / TENSORS)
    idle = _gpu_used()
    store = root / "store"
    kernel = kernels.open()
    try:
        kernel.run(BUILD.format(count=TENSORS, numel=numel))
        expected = kernel.call(CHECK, count=TENSORS)["fp"]
        for run_index in range(runs):
            raw_path = root / "raw.bin"
            times["raw write"].append(raw_write(raw_path, int(4 * GB), write_behind=True))
            times["raw read"].append(raw_read(raw_path, cache))
            raw_path.unlink()
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
            if kernel.call(CHECK, count=TENSORS)["fp"] != expected:
                raise RuntimeError("the resumed kernel's tensors differ from the suspended ones")
            shutil.rmtree(store)
            progress(f"gpu run {run_index + 1}/{runs} done")
    finally:
        kernel.close()
    nbytes = saved["bytes"]
    median = {k: statistics.median(v) for k, v in times.items()}
    disk_write, disk_read = 4 * GB / median["raw write"], 4 * GB / median["raw read"]
    limits = {"save": max(nbytes / pcie["d2h"], nbytes / disk_write),
              "until GPU free": max(nbytes / pcie["d2h"], nbytes / disk_write),
              "restore in kernel": max(nbytes / pcie["h2d"], nbytes / disk_read),
              "until answers": max(nbytes / pcie["h2d"], nbytes / disk_read)}
    lines: list[tuple[str, ...]] = [("", "median s", "limit s", "% of limit", "runs")]
    for name in ("save", "until GPU free", "restore in kernel", "until answers"):
        lines.append((name, f"{median[name]:.2f}", f"{limits[name]:.2f}",
                      f"{100 * limits[name] / median[name]:.0f}%", str(len(times[name]))))
    text = "\n".join([
        f"GPU variant (UNTESTED before this run): {nbytes / GB:.1f} GB of CUDA tensors on {pcie['gpu']}",
        f"PCIe pinned copies: host->device {pcie['h2d'] / GB:.1f} GB/s, device->host {pcie['d2h'] / GB:.1f} GB/s; "
        f"raw disk: write {disk_write / GB:.2f} GB/s, read {disk_read / GB:.2f} GB/s",
        "limit = the checkpoint's bytes over the slower of the PCIe copy and the disk, in that direction",
        align(lines), cache.summary()])
    return text, {"gpu": pcie["gpu"], "bytes": nbytes, "pcie": pcie, "times": times, "limits": limits}


def main(args: argparse.Namespace) -> int:
    """Called by ``bench_peers.py --gpu``; returns the exit status."""
    import torch

    if not torch.cuda.is_available():
        print("--gpu needs a CUDA GPU that torch can use; none here.")
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="gpu-", dir=args.dir)).resolve()
    try:
        text, data = run(root, args.gpu_gb, args.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0
