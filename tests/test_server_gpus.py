"""GPU assignment by UUID, with a test NVML inventory (the real one: tests/test_gpu.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
from server_fixtures import api, run, start_kernel


def _inventory(tmp_path, monkeypatch, gpus: list[dict]) -> None:
    """Describe the host's GPUs to the server (it reads them when it starts)."""
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps(gpus))
    monkeypatch.setenv("JUPYTER_GPUCKPT_TEST_GPUS", str(inventory))


@pytest.fixture
def two_test_gpus(tmp_path, monkeypatch):
    _inventory(tmp_path, monkeypatch, [
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
    await asyncio.sleep(3)
    assert not third.done()  # all GPUs are taken: it waits rather than start without one
    waiting = (await api(jp_fetch, "gpus"))["waiting"]
    assert len(waiting) == 1 and waiting[0]["gpus"] == 1  # and says so

    lent = await _visible(jp_serverapp, first)
    await api(jp_fetch, "kernels", first, "suspend", method="POST", wait="1")
    third_id = await asyncio.wait_for(third, 60)
    assert await _visible(jp_serverapp, third_id) == lent

    resumed = asyncio.ensure_future(api(jp_fetch, "kernels", first, "resume", method="POST", wait="1"))
    await asyncio.sleep(2)
    assert not resumed.done()  # waits for a GPU too
    await api(jp_fetch, "kernels", second, "suspend", method="POST", wait="1")
    model = await asyncio.wait_for(resumed, 60)
    assert model["state"] == "running" and [g["uuid"] for g in model["gpus"]] == [await _visible(jp_serverapp, first)]


async def test_no_gpus_means_kernels_start_without_any(no_gpus, jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    assert await _visible(jp_serverapp, kernel_id) == "None"
    assert (await api(jp_fetch, "gpus"))["gpus"] == []
