"""Idle policy: idle kernels are suspended; busy, exempt ones are not; kernelspecs override."""

from __future__ import annotations

import asyncio

import pytest
from server_fixtures import FAST_KERNEL_NAME, api, run, start_kernel


async def _state_after(jp_fetch, kernel_id: str, seconds: float) -> str:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        model = await api(jp_fetch, "kernels", kernel_id)
        if model["state"] == "suspended":
            return "suspended"
        await asyncio.sleep(0.2)
    return str(model["state"])


@pytest.fixture
def gpuckpt_config():
    return {"idle_timeout": 2.0, "policy_interval": 0.5}


async def _start_policy(serverapp) -> None:
    """pytest-jupyter does not run the server's start hooks; run them (the policy loop)."""
    await serverapp.extension_manager.start_all_extensions()


async def test_idle_kernel_is_suspended_and_busy_one_is_not(jp_fetch, jp_serverapp):
    await _start_policy(jp_serverapp)
    idle = await start_kernel(jp_fetch)
    busy = await start_kernel(jp_fetch)
    await run(jp_serverapp, idle, "x = 1")
    client = jp_serverapp.kernel_manager.get_kernel(busy).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=30)
        client.execute("import time; time.sleep(8)")
        assert await _state_after(jp_fetch, idle, 15) == "suspended"
        assert (await api(jp_fetch, "kernels", busy))["state"] == "running"
        model = await api(jp_fetch, "kernels", busy)
        assert model["execution_state"] == "busy"
    finally:
        client.stop_channels()


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 1.0, "policy_interval": 0.5,
                                             "exempt_kernelspecs": [FAST_KERNEL_NAME]}])
async def test_exempt_kernelspec_is_not_suspended(jp_fetch, jp_serverapp, gpuckpt_config):
    await _start_policy(jp_serverapp)
    exempt = await start_kernel(jp_fetch, name=FAST_KERNEL_NAME)
    control = await start_kernel(jp_fetch)
    assert await _state_after(jp_fetch, control, 15) == "suspended"
    assert (await api(jp_fetch, "kernels", exempt))["state"] == "running"


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 3600.0, "policy_interval": 0.5}])
async def test_kernelspec_metadata_overrides_the_idle_timeout(jp_fetch, jp_serverapp, gpuckpt_config):
    await _start_policy(jp_serverapp)
    fast = await start_kernel(jp_fetch, name=FAST_KERNEL_NAME)
    slow = await start_kernel(jp_fetch)
    assert await _state_after(jp_fetch, fast, 15) == "suspended"
    assert (await api(jp_fetch, "kernels", slow))["state"] == "running"
    policy = await api(jp_fetch, "policy")
    assert policy["idle_timeout"] == 3600.0


@pytest.mark.parametrize("gpuckpt_config", [{"checkpoint_interval": 1.0, "policy_interval": 0.5}])
async def test_periodic_checkpoints_follow_the_users_work(jp_fetch, jp_serverapp, gpuckpt_config):
    await _start_policy(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "step = 1")
    for _ in range(100):
        first = (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"]
        if first:
            break
        await asyncio.sleep(0.2)
    assert first is not None
    await asyncio.sleep(2.5)  # idle: nothing new to save, so no new checkpoint
    assert (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"]["id"] == first["id"]
    await run(jp_serverapp, kernel_id, "step = 2")
    for _ in range(100):
        latest = (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"]
        if latest["id"] != first["id"]:
            break
        await asyncio.sleep(0.2)
    assert latest["id"] != first["id"] and latest["last_cell"] > first["last_cell"]
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "running"
