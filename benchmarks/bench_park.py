"""CUDA park and unpark of a process holding ``--gib`` GiB (default 40) of CUDA tensors, timed
against the PCIe limit measured in the same run.

Run on a GPU machine (driver 570+, torch with CUDA, cuda-bindings): ``python
benchmarks/bench_park.py [--gib 40] [--runs 3]``. A child Python first measures pinned
device-to-host and host-to-device copy speeds with torch, then holds the tensors. Each run
parks it through ``jupyter_gpuckpt.placement.parking`` (the helper the server runs) and times until
NVML shows the memory freed, then unparks it and times until it answers a CUDA call; the
tensors are checked after each run. The size is cut to the GPU's free memory and the host's
available memory (the driver holds the parked bytes there); the report says which.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import align, progress

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from jupyter_gpuckpt.errors import ParkFailed, ParkUnsupported  # noqa: E402
from jupyter_gpuckpt.placement import parking  # noqa: E402  (this checkout, installed or not)

GIB = 1 << 30
FREE_WAIT = 60.0
"""Seconds a park may take to show in NVML before the run is called failed."""
CHILD = """
import json, sys, time, torch
def rate(dst, src):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(4):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return 4 * src.numel() / (time.perf_counter() - started)
host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
rates = {"h2d": rate(dev, host), "d2h": rate(host, dev)}
del host, dev
torch.cuda.empty_cache()
chunks = [torch.arange(1 << 20, dtype=torch.float32, device="cuda").repeat(1 << 8).add_(i) for i in range(COUNT)]
def sums():
    return [float(c.sum(dtype=torch.float64)) for c in chunks]
torch.cuda.synchronize()
print(json.dumps({**rates, "sums": sums(), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                  "cuda": torch.version.cuda}), flush=True)
for line in sys.stdin:
    print(json.dumps({"ping": chunks[-1][-1].item()} if line.strip() == "ping" else {"sums": sums()}), flush=True)
"""


def _nvml_used() -> int:
    import pynvml

    return sum(int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
               for i in range(pynvml.nvmlDeviceGetCount()))


def _gpu_free() -> int:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)


def _host_available() -> int:
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(meminfo["MemAvailable"].split()[0]) * 1024


class Child:
    """The process parked: a Python holding ``count`` GiB of CUDA tensors, one per GiB."""

    def __init__(self, count: int) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", CHILD.replace("COUNT", str(count))],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self.read()

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the child holding the tensors ended (status {self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, what: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(what + "\n")
        self.process.stdin.flush()
        return self.read()


def run(gib: float, runs: int) -> str:
    import pynvml

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    reason = asyncio.run(parking.park_support(env=env))
    if reason is not None:
        raise SystemExit(f"park does not work here: {reason}")
    probe = asyncio.run(parking.probe(env=env))
    bounds = {"asked": gib, "GPU memory": 0.85 * _gpu_free() / GIB, "host memory": 0.8 * _host_available() / GIB}
    limited_by = min(bounds, key=lambda k: bounds[k])
    count = int(bounds[limited_by])
    if count < 1:
        raise SystemExit(f"not even 1 GiB fits ({limited_by})")
    progress(f"{count} GiB of CUDA tensors (asked {gib:g}; limited by {limited_by}), {runs} runs")
    idle = _nvml_used()
    child = Child(count)
    times: dict[str, list[float]] = {"GPU free after park": [], "park call": [], "unpark to answering": [],
                                     "unpark call": []}
    try:
        nbytes = count * GIB
        for index in range(runs):
            started = time.perf_counter()
            parked = asyncio.run(parking.park(child.process.pid, env=env))
            while _nvml_used() > idle + 256 * (1 << 20):
                if time.perf_counter() - started > FREE_WAIT:
                    raise SystemExit(f"NVML still shows {_nvml_used() / GIB:.1f} GiB in use {FREE_WAIT:.0f} s "
                                     f"after the park (idle: {idle / GIB:.1f} GiB)")
                time.sleep(0.005)
            times["GPU free after park"].append(time.perf_counter() - started)
            times["park call"].append(parked["seconds"])
            started = time.perf_counter()
            unparked = asyncio.run(parking.unpark(child.process.pid, env=env))
            child.ask("ping")
            times["unpark to answering"].append(time.perf_counter() - started)
            times["unpark call"].append(unparked["seconds"])
            if child.ask("sums")["sums"] != child.ready["sums"]:
                raise SystemExit("the unparked tensors differ from the parked ones")
            progress(f"run {index + 1}/{runs}: GPU free after {times['GPU free after park'][-1]:.2f} s, "
                     f"answering {times['unpark to answering'][-1]:.2f} s after unpark")
    finally:
        # parked before the kill: killing a live process the driver restored hard-hangs some hosts
        # (NVIDIA/cuda-checkpoint#53); a parked one ends safely
        try:
            if asyncio.run(parking.state(child.process.pid, env=env)) == "running":
                asyncio.run(parking.park(child.process.pid, env=env))
        except (ParkFailed, ParkUnsupported) as e:  # killed as it is: the run's own error, if any, is what counts
            progress(f"could not park the child before ending it: {e}")
        finally:
            child.process.kill()
            child.process.wait()
    ready = child.ready
    limits = {"GPU free after park": nbytes / ready["d2h"], "park call": nbytes / ready["d2h"],
              "unpark to answering": nbytes / ready["h2d"], "unpark call": nbytes / ready["h2d"]}
    lines: list[tuple[str, ...]] = [("", "median s", "GiB/s", "PCIe limit s", "% of limit", "runs")]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append((name, f"{median:.2f}", f"{nbytes / GIB / median:.1f}", f"{limits[name]:.2f}",
                      f"{100 * limits[name] / median:.0f}%", str(len(values))))
    return "\n".join([
        f"CUDA park: {count} GiB of CUDA tensors on {ready['gpu']} (asked {gib:g} GiB; limited by {limited_by}); "
        f"driver {probe['driver']} (CUDA {probe['cuda']}), cuda-bindings {probe['bindings']}, torch {ready['torch']} "
        f"(CUDA {ready['cuda']}), GPU remapping {'available' if probe['remap'] else 'not available'}",
        f"PCIe pinned copies (torch, this run): device->host {ready['d2h'] / GIB:.1f} GiB/s, "
        f"host->device {ready['h2d'] / GIB:.1f} GiB/s",
        "park includes starting the helper Python and loading cuda-bindings; limit = bytes over the pinned copy "
        "speed in that direction",
        align(lines),
        f"(NVML's pynvml {getattr(pynvml, '__version__', '?')}; GPU memory in use while idle: {idle / GIB:.1f} GiB)",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=40.0, help="GiB of CUDA tensors to park (default: 40)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # no library, no driver: say so before anything starts
        print(f"bench_park needs an NVIDIA GPU: NVML cannot start here ({e})", file=sys.stderr)
        return 2
    try:
        if not pynvml.nvmlDeviceGetCount():
            print("bench_park needs an NVIDIA GPU: NVML sees none here", file=sys.stderr)
            return 2
        print(run(args.gib, args.runs))
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
