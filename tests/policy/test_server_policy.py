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


async def test_idle_kernel_is_suspended_and_busy_one_is_not(jp_fetch, jp_serverapp, tmp_path):
    idle = await start_kernel(jp_fetch)
    busy = await start_kernel(jp_fetch)
    done = tmp_path / "done"
    client = jp_serverapp.kernel_manager.get_kernel(busy).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=30)
        # busy until the test says so, however long the idle kernel's suspend takes; the policy
        # starts once the cell runs, so a slow start of the cell is not idle time
        client.execute(f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)")
        while (await api(jp_fetch, "kernels", busy))["execution_state"] != "busy":
            await asyncio.sleep(0.1)
        await run(jp_serverapp, idle, "x = 1")
        await _start_policy(jp_serverapp)
        assert await _state_after(jp_fetch, idle, 60) == "suspended"
        await asyncio.sleep(1.5)  # later passes leave the reason of the suspend on the model
        why = (await api(jp_fetch, "kernels", idle))["policy"]
        assert why["action"] == "suspend" and why["reason"].startswith("idle ") and "(timeout 2 s)" in why["reason"]
        model = await api(jp_fetch, "kernels", busy)
        assert (model["state"], model["execution_state"]) == ("running", "busy")
        assert model["idle_seconds"] is not None
    finally:
        done.touch()
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


@pytest.mark.parametrize("gpuckpt_config", [{"checkpoint_interval": 1.0, "policy_interval": 3600.0}])
async def test_periodic_checkpoints_follow_the_users_work(jp_fetch, jp_serverapp, gpuckpt_config):
    """Policy passes are run by the test, so what each decided is known: no waiting to see
    that something did not happen."""
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "step = 1")
    await app.policy_loop.run_pass()
    first = (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"]
    assert first is not None

    await asyncio.sleep(1.1)  # the interval passes...
    await app.policy_loop.run_pass()  # ...but nothing ran since: nothing new to save
    assert (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"]["id"] == first["id"]

    await run(jp_serverapp, kernel_id, "step = 2")
    await asyncio.sleep(1.1)
    await app.policy_loop.run_pass()
    latest = (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"]
    assert latest["id"] != first["id"] and latest["last_cell"] > first["last_cell"]
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "running"


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 3600.0, "policy_interval": 0.3, "rhythm": True,
                                             "rhythm_gaps": 3, "warn_before": 0.0}])
async def test_a_new_kernel_takes_its_users_rhythm_until_it_has_its_own(jp_fetch, jp_serverapp, gpuckpt_config):
    """The server sees the pauses between cells on each kernel's IOPub, per kernel and over all
    of them (the user's); a kernel with too few pauses of its own takes its user's."""
    watcher = jp_serverapp.web_app.settings["gpuckpt_app"].parts.registry.watcher
    first = await start_kernel(jp_fetch)
    for _ in range(4):  # four cells, three pauses
        await run(jp_serverapp, first, "x = 1")
        await asyncio.sleep(0.3)
    assert len(watcher.gaps[first]) == 3 and all(0.2 < g < 30 for g in watcher.gaps[first]), watcher.gaps
    second = await start_kernel(jp_fetch)
    await run(jp_serverapp, second, "y = 2")
    assert list(watcher.user_gaps) == list(watcher.gaps[first]) and len(watcher.gaps[second]) == 0
    await _start_policy(jp_serverapp)
    deadline = asyncio.get_running_loop().time() + 30
    while not all([(await api(jp_fetch, "kernels", k))["policy"] for k in (first, second)]):
        assert asyncio.get_running_loop().time() < deadline, "no policy pass"
        await asyncio.sleep(0.2)
    # pauses under a second: the shortest limit (rhythm_min, 30 s) holds them all
    reasons = {k: (await api(jp_fetch, "kernels", k))["policy"]["reason"] for k in (first, second)}
    assert reasons[first].endswith("of 30 s (its rhythm: 0 of the last 3 pauses were longer)"), reasons
    assert reasons[second].endswith("of 30 s (its user's rhythm: 0 of the last 3 pauses were longer)"), reasons
