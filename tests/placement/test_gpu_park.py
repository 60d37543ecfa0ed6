"""CUDA park on a real GPU (``pytest -m gpu`` on a lent GPU machine, driver 570+, cuda-bindings
in this environment): a real process holding 1 GiB of known CUDA values is parked (NVML shows
the memory freed), then unparked (the memory is back and the values check out).

No Jupyter server: the process stands for a kernel, and ``jupyter_gpuckpt.placement.parking`` runs the
same helper the server runs. Where park cannot work here the tests fail with the reason.

Each test process is ended parked: killing a live process that the driver restored hard-hangs
some hosts (NVIDIA/cuda-checkpoint#53, driver 595), and checkpointing it first avoids that.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from paths import ROOT

from jupyter_gpuckpt.errors import ParkFailed, ParkUnsupported
from jupyter_gpuckpt.placement import parking

torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timeout(60),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GIB = 1 << 30
HOLDER = """
import json, sys, torch
x = torch.arange(1 << 20, dtype=torch.float32, device="cuda").repeat(GIB // 4 // (1 << 20))  # 1 GiB, exact
def checksum():
    return float(x.sum(dtype=torch.float64))
print(json.dumps({"uuid": str(torch.cuda.get_device_properties(0).uuid), "sum": checksum()}), flush=True)
for line in sys.stdin:  # one line asks for the checksum again, after touching the memory
    x.add_(1).sub_(1)
    print(json.dumps({"sum": checksum()}), flush=True)
""".replace("GIB", str(GIB))
EXPECTED = float(sum(range(1 << 20)) * (GIB // 4 // (1 << 20)))


@pytest.fixture(autouse=True)
def checkout_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper runs ``-m kernel_hooks.cuda_park`` in a fresh Python: from this checkout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def nvml() -> Iterator[Any]:
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


@pytest.fixture(scope="module", autouse=True)
def supported() -> None:
    reason = asyncio.run(parking.park_support())
    assert reason is None, f"park should work on this GPU machine: {reason}"


class Holder:
    """A process holding 1 GiB of CUDA memory with known values, as a kernel would."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        first = self.read()
        assert first["sum"] == EXPECTED
        self.uuid = first["uuid"].removeprefix("GPU-")

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the holder process ended (status {self.process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def checksum(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write("sum\n")
        self.process.stdin.flush()
        return float(self.read()["sum"])


def _end(process: subprocess.Popen[str]) -> None:
    """Kill a CUDA test process safely: parked first where it runs (see the module's doc),
    each step bounded, so a driver in trouble fails the test instead of hanging it."""
    try:
        if asyncio.run(parking.state(process.pid, timeout=30)) == "running":
            asyncio.run(parking.park(process.pid, timeout=120))
    except (ParkFailed, ParkUnsupported):
        pass  # it cannot be parked (locked, or holding what the driver cannot checkpoint): killed as it is
    finally:
        process.kill()
        process.wait(timeout=60)


@pytest.fixture
def holder() -> Iterator[Holder]:
    held = Holder()
    with held.process:
        try:
            yield held
        finally:
            _end(held.process)


def _device(nvml: Any, uuid: str) -> Any:
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        name = nvml.nvmlDeviceGetUUID(handle)
        if (name if isinstance(name, str) else name.decode()).removeprefix("GPU-") == uuid:
            return handle
    raise AssertionError(f"NVML does not list GPU-{uuid}")


def _used(nvml: Any, handle: Any) -> int:
    return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)


def _pids(nvml: Any, handle: Any) -> set[int]:
    return {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}


def _until(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_park_frees_the_gpu_and_unpark_brings_the_values_back(holder, nvml):
    handle = _device(nvml, holder.uuid)
    held, listed = _used(nvml, handle), holder.process.pid in _pids(nvml, handle)  # not in another pid namespace
    assert asyncio.run(parking.state(holder.process.pid)) == "running"

    parked = asyncio.run(parking.park(holder.process.pid))
    assert parked["state"] == "checkpointed" and parked["seconds"] > 0
    assert _until(lambda: _used(nvml, handle) <= held - GIB), (held, _used(nvml, handle))
    assert holder.process.pid not in _pids(nvml, handle)
    assert holder.process.poll() is None
    assert asyncio.run(parking.state(holder.process.pid)) == "checkpointed"

    unparked = asyncio.run(parking.unpark(holder.process.pid))
    assert unparked["state"] == "running"
    assert _used(nvml, handle) >= held - GIB // 8
    assert (holder.process.pid in _pids(nvml, handle)) == listed
    assert holder.checksum() == EXPECTED


def test_parking_twice_or_unparking_a_running_process_is_refused(holder):
    pid = holder.process.pid
    with pytest.raises(ParkFailed, match=rf"^process {pid} is running, not parked$") as running:
        asyncio.run(parking.unpark(pid))
    assert running.value.state == "running"
    asyncio.run(parking.park(pid))
    with pytest.raises(ParkFailed, match=rf"^process {pid} is already parked, not running$") as parked:
        asyncio.run(parking.park(pid))
    assert parked.value.state == "checkpointed"
    asyncio.run(parking.unpark(pid))
    assert holder.checksum() == EXPECTED


def test_unpark_onto_the_same_gpu_named_by_uuid(holder):
    """A remap names every GPU the process was parked from; where the driver cannot remap
    (before 580) unpark refuses it and the process stays parked until unparked plainly."""
    pid, uuid = holder.process.pid, f"GPU-{holder.uuid}"
    asyncio.run(parking.park(pid))
    if asyncio.run(parking.probe())["remap"]:
        assert asyncio.run(parking.unpark(pid, remap={uuid: uuid}))["state"] == "running"
    else:
        with pytest.raises(ParkUnsupported, match="needs driver 580"):
            asyncio.run(parking.unpark(pid, remap={uuid: uuid}))
        asyncio.run(parking.unpark(pid))
    assert holder.checksum() == EXPECTED


WITH_CHILD = """
import subprocess, sys, torch
x = torch.ones(64 << 20, device="cuda")
child = subprocess.Popen([sys.executable, "-c", "import sys, torch; y = torch.ones(1 << 20, device='cuda'); "
                          "print(flush=True); sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.read()
"""


def test_a_process_whose_child_has_a_cuda_context_is_refused_and_keeps_running(nvml):
    """Park moves one process's memory: a child's CUDA context would stay on the lent GPU."""
    with subprocess.Popen([sys.executable, "-c", WITH_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            listed = set().union(*(_pids(nvml, nvml.nvmlDeviceGetHandleByIndex(i))
                                   for i in range(nvml.nvmlDeviceGetCount())))
            if parent.pid not in listed:
                pytest.skip("NVML does not list this pid namespace's processes (a container that hides the host's "
                            "pids), so park cannot see a kernel's children here (docs/operators/staging.md)")
            with pytest.raises(ParkUnsupported, match=rf"^process {parent.pid} has child processes with CUDA "
                                                      rf"contexts of their own, .*: pid {child} \("):
                asyncio.run(parking.park(parent.pid))
            assert asyncio.run(parking.state(parent.pid)) == "running" and parent.poll() is None
        finally:
            _end(parent)  # its child reads the pipe the parent held: it ends too


def test_a_process_without_cuda_is_refused_and_keeps_running():
    with subprocess.Popen([sys.executable, "-c", "import sys, torch; sys.stdin.read()"],
                          stdin=subprocess.PIPE) as process:
        try:
            with pytest.raises(ParkUnsupported, match=rf"^process {process.pid} does not use CUDA"):
                asyncio.run(parking.park(process.pid))
            assert process.poll() is None
        finally:
            process.kill()
