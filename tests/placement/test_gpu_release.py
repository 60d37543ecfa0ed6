"""Freeing a real GPU through the server (``pytest -m gpu`` on a lent GPU machine): a staged
suspend and resume of CUDA tensors, park and unpark (CUDA driver 570+, cuda-bindings in the
kernel's environment), and a parked kernel turned suspended by the policy.

The same paths run on CPU machines in tests/staging/test_staged_suspend.py and tests/placement/test_park_server.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from server_fixtures import api, run, start_kernel

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

STATE = ("import os, torch\ntorch.manual_seed(5)\nbig = torch.randn(128 * 1024 * 1024, device='cuda')  # 512 MiB\n"
         "checksum = round(big.double().sum().item(), 3)")
CHECK = "print(round(big.double().sum().item(), 3) == checksum, big.device, os.getpid())"


def _used_by(pid: int) -> int:
    """GPU memory NVML counts for process ``pid`` (0 when it holds none)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        total = 0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == pid:
                    total += process.usedGpuMemory or 0
        return total
    finally:
        pynvml.nvmlShutdown()


def _device_used() -> int:
    """GPU memory in use on the first GPU, as NVML counts it."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used)
    finally:
        pynvml.nvmlShutdown()


async def _kernel(jp_fetch: Any, jp_serverapp: Any) -> tuple[str, int]:
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    ok, device, pid = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device) == ("True", "cuda:0")
    assert _used_by(int(pid)) >= 512 << 20
    return kernel_id, int(pid)


async def test_a_staged_suspend_frees_the_gpu_and_resumes_cuda_tensors_from_host_memory(jp_fetch, jp_serverapp):
    kernel_id, pid = await _kernel(jp_fetch, jp_serverapp)
    before = _device_used()
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="suspend")
    assert model["state"] == "suspended" and model["gpus"] == []
    assert model["last_checkpoint"]["durability"] == "staged"
    assert before - _device_used() >= 512 << 20  # the GPU's memory is free before the state is on disk
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["report"]["source"] == "host memory"
    ok, device, _ = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device) == ("True", "cuda:0")


async def test_park_frees_the_gpu_keeps_the_process_and_unpark_brings_the_tensors_back(jp_fetch, jp_serverapp):
    kernel_id, pid = await _kernel(jp_fetch, jp_serverapp)
    before = _device_used()
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="park")
    assert model["state"] == "parked", model["notice"]
    assert model["gpus"] == [] and _used_by(pid) == 0  # the process lives on, holding no GPU memory
    assert before - _device_used() >= 512 << 20  # the memory is in host memory, held by the driver
    assert model["last_checkpoint"]["durability"] == "durable"  # taken first: the node may die
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running"
    ok, device, same_pid = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device, int(same_pid)) == ("True", "cuda:0", pid)  # the same process, nothing serialized
    assert _used_by(pid) >= 512 << 20


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 1.0, "park_timeout": 2.0}])
async def test_a_kernel_parked_past_its_timeout_is_suspended_and_resumes_from_its_checkpoint(
        jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id, pid = await _kernel(jp_fetch, jp_serverapp)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="park")
    assert model["state"] == "parked", model["notice"]
    deadline = time.monotonic() + 30
    while (model := await api(jp_fetch, "kernels", kernel_id))["state"] != "suspended":
        assert time.monotonic() < deadline, model
        await asyncio.sleep(0.5)
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    ok, device, new_pid = (await run(jp_serverapp, kernel_id, CHECK)).split()
    assert (ok, device) == ("True", "cuda:0") and int(new_pid) != pid
