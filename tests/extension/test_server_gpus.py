"""GPU assignment by UUID, with a test NVML inventory (the real one: tests/kernel_hooks/test_gpu.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from server_fixtures import api, run, start_kernel


def _inventory(tmp_path, monkeypatch, gpus: list[dict]) -> Path:
    """Describe the host's GPUs to the server (which GPUs exist is read when it starts,
    what they do at every reading)."""
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps(gpus))
    monkeypatch.setenv("JUPYTER_GPUCKPT_TEST_GPUS", str(inventory))
    return inventory


async def _until(condition, what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.1)


@pytest.fixture
def two_test_gpus(tmp_path, monkeypatch):
    return _inventory(tmp_path, monkeypatch, [
        {"uuid": "GPU-test-a", "name": "Test GPU", "memory_total": 80 << 30},
        {"uuid": "GPU-test-b", "name": "Test GPU", "memory_total": 80 << 30},
    ])


@pytest.fixture
def no_gpus(tmp_path, monkeypatch):
    """A machine without GPUs, even when the tests run on a GPU host."""
    _inventory(tmp_path, monkeypatch, [])


async def _visible(serverapp, kernel_id: str) -> str:
    out = await run(serverapp, kernel_id, "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'))")
    return out.strip()


async def test_kernels_get_distinct_gpus_and_a_suspend_lends_one(two_test_gpus, jp_fetch, jp_serverapp):
    first = await start_kernel(jp_fetch)
    second = await start_kernel(jp_fetch)
    assert {await _visible(jp_serverapp, first), await _visible(jp_serverapp, second)} == {"GPU-test-a", "GPU-test-b"}
    gpus = await api(jp_fetch, "gpus")
    assert {g["kernel_id"] for g in gpus["gpus"]} == {first, second}

    third = asyncio.ensure_future(start_kernel(jp_fetch))

    async def third_waits() -> bool:
        return bool((await api(jp_fetch, "gpus"))["waiting"])

    await _until(third_waits, "the third kernel waits for a GPU")
    assert not third.done()  # all GPUs are taken: it waits rather than start without one
    waiting = (await api(jp_fetch, "gpus"))["waiting"]
    assert len(waiting) == 1 and waiting[0]["gpus"] == 1  # and says so

    lent = await _visible(jp_serverapp, first)
    await api(jp_fetch, "kernels", first, "suspend", method="POST", wait="1")
    third_id = await asyncio.wait_for(third, 60)
    assert await _visible(jp_serverapp, third_id) == lent

    resumed = asyncio.ensure_future(api(jp_fetch, "kernels", first, "resume", method="POST", wait="1"))

    async def resume_waits() -> bool:
        return bool((await api(jp_fetch, "kernels", first))["waiting_for_gpus"])

    await _until(resume_waits, "the resume waits for a GPU")
    assert not resumed.done()  # waits for a GPU too
    assert (await api(jp_fetch, "kernels", first))["state"] == "restoring"
    await api(jp_fetch, "kernels", second, "suspend", method="POST", wait="1")
    model = await asyncio.wait_for(resumed, 60)
    assert model["state"] == "running" and [g["uuid"] for g in model["gpus"]] == [await _visible(jp_serverapp, first)]


async def test_no_gpus_means_kernels_start_without_any(no_gpus, jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    assert await _visible(jp_serverapp, kernel_id) == "None"
    assert (await api(jp_fetch, "gpus"))["gpus"] == []


async def test_gpu_readings_are_fresh_for_requests_and_the_policy(two_test_gpus, jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    model = await api(jp_fetch, "kernels", kernel_id)
    assert [g["utilization"] for g in model["gpus"]] == [0]
    held = model["gpus"][0]["uuid"]
    busy = [{"uuid": "GPU-test-a", "name": "Test GPU", "memory_total": 80 << 30},
            {"uuid": "GPU-test-b", "name": "Test GPU", "memory_total": 80 << 30}]
    for gpu in busy:
        if gpu["uuid"] == held:
            gpu.update(utilization=93, memory_used=12 << 30, processes=[{"pid": 4242, "memory_used": 12 << 30}])
    two_test_gpus.write_text(json.dumps(busy))  # the GPU starts working after the server started

    model = await api(jp_fetch, "kernels", kernel_id)
    assert [(g["utilization"], g["memory_used"]) for g in model["gpus"]] == [(93, 12 << 30)]
    listed = {g["uuid"]: g for g in (await api(jp_fetch, "gpus"))["gpus"]}
    assert listed[held]["utilization"] == 93 and listed[held]["processes"] == [{"pid": 4242, "memory_used": 12 << 30}]

    # the policy reads the same: a kernel whose GPU works is not idle, whatever its idle time
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    app.idle_timeout = 0.001
    await app.policy_loop.run_pass()
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "running"
    two_test_gpus.write_text(json.dumps([{k: v for k, v in g.items() if k in ("uuid", "name", "memory_total")}
                                         for g in busy]))
    await app.policy_loop.run_pass()
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended"
