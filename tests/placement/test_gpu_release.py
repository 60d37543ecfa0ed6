"""Freeing a real GPU through the server (``pytest -m gpu`` on a lent GPU machine): a staged
suspend and resume of CUDA tensors, park and unpark (CUDA driver 570+, cuda-bindings in the
kernel's environment), and a parked kernel turned suspended by the policy.

The same paths run on CPU machines in tests/staging/test_staged_suspend.py and tests/placement/test_park_server.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psutil
import pytest
from server_fixtures import api, run, start_kernel

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

STATE = ("import os, torch\ntorch.manual_seed(5)\nbig = torch.randn(128 * 1024 * 1024, device='cuda')  # 512 MiB\n"
         "checksum = round(big.double().sum().item(), 3)")
CHECK = ("print(round(big.double().sum().item(), 3) == checksum, big.device, os.getpid(), "
         "os.environ['CUDA_VISIBLE_DEVICES'])")
HELD = 512 << 20


def _nvml(read: Any) -> Any:
    import pynvml

    pynvml.nvmlInit()
    try:
        return read(pynvml)
    finally:
        pynvml.nvmlShutdown()


def _used_by(pid: int) -> int:
    """GPU memory NVML counts for process ``pid`` (0 when it lists none)."""
    def read(nvml: Any) -> int:
        return sum(int(process.usedGpuMemory or 0) for index in range(nvml.nvmlDeviceGetCount())
                   for process in nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(index))
                   if process.pid == pid)

    return int(_nvml(read))


def _device_used(uuid: str) -> int:
    """GPU memory in use on GPU ``uuid``, as NVML counts it: device-wide, so it holds in containers too."""
    def read(nvml: Any) -> int:
        return int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByUUID(uuid)).used)

    return int(_nvml(read))


async def _kernel(jp_fetch: Any, jp_serverapp: Any) -> tuple[str, int, str, bool]:
    """A kernel holding 512 MiB on its GPU: its id, pid, GPU's UUID, and whether NVML lists its
    pid. In a container that hides the host's pids NVML does not, and a figure per process would
    read 0 whatever the kernel holds: the tests then rely on the device-wide figures alone."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    ok, device, pid, uuid = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device) == ("True", "cuda:0")
    assert _device_used(uuid) >= HELD
    used = _used_by(int(pid))
    assert used == 0 or used >= HELD
    return kernel_id, int(pid), uuid, used > 0


async def test_a_staged_suspend_frees_the_gpu_and_resumes_cuda_tensors_from_host_memory(jp_fetch, jp_serverapp):
    kernel_id, _, uuid, _ = await _kernel(jp_fetch, jp_serverapp)
    before = _device_used(uuid)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="suspend")
    assert model["state"] == "suspended" and model["gpus"] == []
    assert model["last_checkpoint"]["durability"] == "staged"
    assert before - _device_used(uuid) >= HELD  # the GPU's memory is free before the state is on disk
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["report"]["source"] == "host memory"
    ok, device, _, _ = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device) == ("True", "cuda:0")


async def test_park_frees_the_gpu_keeps_the_process_and_unpark_brings_the_tensors_back(jp_fetch, jp_serverapp):
    kernel_id, pid, uuid, listed = await _kernel(jp_fetch, jp_serverapp)
    before = _device_used(uuid)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="park")
    assert model["state"] == "parked", model["notice"]
    assert model["gpus"] == [] and psutil.pid_exists(pid)  # the process lives on
    assert not listed or _used_by(pid) == 0  # holding no GPU memory
    parked = _device_used(uuid)
    assert before - parked >= HELD  # the memory is in host memory, held by the driver
    assert model["last_checkpoint"]["durability"] == "durable"  # taken first: the node may die
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running"
    ok, device, same_pid, _ = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device, int(same_pid)) == ("True", "cuda:0", pid)  # the same process, nothing serialized
    assert _device_used(uuid) - parked >= HELD and (not listed or _used_by(pid) >= HELD)
    # ended parked, not live: killing a process the driver restored hard-hangs some hosts
    # (NVIDIA/cuda-checkpoint#53); a parked one is killed safely when the server stops
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="park")
    assert model["state"] == "parked", model["notice"]


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 1.0, "park_timeout": 2.0}])
async def test_a_kernel_parked_past_its_timeout_is_suspended_and_resumes_from_its_checkpoint(
        jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id, pid, _, _ = await _kernel(jp_fetch, jp_serverapp)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="park")
    assert model["state"] == "parked", model["notice"]
    deadline = time.monotonic() + 30
    while (model := await api(jp_fetch, "kernels", kernel_id))["state"] != "suspended":
        assert time.monotonic() < deadline, model
        await asyncio.sleep(0.5)
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    ok, device, new_pid, _ = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device) == ("True", "cuda:0") and int(new_pid) != pid
