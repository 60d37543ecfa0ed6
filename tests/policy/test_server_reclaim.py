"""Reclaim through the real server: on demand with the local GPU pool, warnings with "Keep
running", floors and GPU vs CPU timeouts, each decision explained in the kernel model.

Policy passes are run by the test (``policy_interval`` is an hour), so what each pass
decided is known without waiting to see that something did not happen.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_fixtures import api, run, start_kernel, ws_execute
from tornado.httpclient import HTTPClientError

from jupyter_gpuckpt import events
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json
from jupyter_gpuckpt.policy.reclaim import unix_group


@pytest.fixture
def one_test_gpu(tmp_path, monkeypatch):
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps([{"uuid": "GPU-test-a", "name": "Test GPU", "memory_total": 80 << 30}]))
    monkeypatch.setenv("JUPYTER_GPUCKPT_TEST_GPUS", str(inventory))


@pytest.fixture
def policy_events(jp_serverapp: Any) -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=events.schema_id("policy"), listener=listener)
    yield seen
    jp_serverapp.event_logger.remove_listener(schema_id=events.schema_id("policy"), listener=listener)


def _app(serverapp: Any) -> Any:
    return serverapp.web_app.settings["gpuckpt_app"]


async def _until(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.1)


async def _policy_actions(jp_fetch: Any) -> dict[tuple[str, str], float]:
    """``jupyter_gpuckpt_policy_actions`` from the server's ``/metrics``, by action and cause."""
    text = (await jp_fetch("metrics")).body.decode()
    return {(s.labels["action"], s.labels["cause"]): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "jupyter_gpuckpt_policy_actions_total"}


async def _idle_for(seconds: float) -> None:
    await asyncio.sleep(seconds)


@pytest.mark.parametrize("gpuckpt_config", [{"reclaim": "on_demand", "demand_idle": 0.5, "policy_interval": 3600.0}])
async def test_on_demand_lends_the_idle_kernels_gpu_to_a_waiting_one_and_takes_it_back(
        one_test_gpu, jp_fetch, jp_serverapp, gpuckpt_config):
    app = _app(jp_serverapp)
    first = await start_kernel(jp_fetch)
    await run(jp_serverapp, first, "kept = 41")
    await _idle_for(0.6)

    # nobody waits: an idle kernel keeps its GPU, however long it idles
    await app.policy_loop.run_pass()
    model = await api(jp_fetch, "kernels", first)
    assert model["state"] == "running"
    assert model["policy"]["action"] is None and model["policy"]["reason"].endswith("nobody waits for a GPU")

    second = asyncio.ensure_future(start_kernel(jp_fetch))

    async def second_waits() -> bool:
        return bool((await api(jp_fetch, "gpus"))["waiting"])

    await _until(second_waits, "the second kernel waits for the only GPU")
    await app.policy_loop.run_pass()
    second_id = await asyncio.wait_for(second, 60)
    model = await api(jp_fetch, "kernels", first)
    assert model["state"] == "suspended"
    assert model["policy"]["action"] == "suspend" and model["policy"]["for_demand"]
    assert model["policy"]["reason"].startswith("idle ") and "1 waiting for a GPU" in model["policy"]["reason"]
    assert [g["uuid"] for g in (await api(jp_fetch, "kernels", second_id))["gpus"]] == ["GPU-test-a"]

    # the first comes back when the GPU frees, with its state
    resumed = asyncio.ensure_future(api(jp_fetch, "kernels", first, "resume", method="POST", wait="1"))

    async def first_waits() -> bool:
        return bool((await api(jp_fetch, "kernels", first))["waiting_for_gpus"])

    await _until(first_waits, "the first kernel's resume waits for the GPU")
    await jp_fetch("api", "kernels", second_id, method="DELETE")
    assert (await asyncio.wait_for(resumed, 120))["state"] == "running"
    assert (await run(jp_serverapp, first, "print(kept + 1)")).strip() == "42"


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 1.0, "warn_before": 0.8, "policy_interval": 3600.0}])
async def test_an_open_notebook_is_warned_and_keep_running_counts_as_activity(
        jp_fetch, jp_ws_fetch, jp_serverapp, policy_events, gpuckpt_config):
    app = _app(jp_serverapp)
    before = await _policy_actions(jp_fetch)  # the counters are the process's, across tests
    kernel_id = await start_kernel(jp_fetch)
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")  # the notebook is open
    try:
        reply, _ = await ws_execute(ws, "kept = 41")
        assert reply["content"]["status"] == "ok"
        await _idle_for(0.4)
        await app.policy_loop.run_pass()  # idle 0.4 s: inside the warning window of a 1 s timeout
        model = await api(jp_fetch, "kernels", kernel_id)
        assert model["state"] == "running" and model["policy"]["action"] == "warn"
        assert policy_events[-1]["action"] == "warn" and policy_events[-1]["kernel_id"] == kernel_id
        assert policy_events[-1]["due_in"] == pytest.approx(0.8)

        kept = await api(jp_fetch, "kernels", kernel_id, "keep", method="POST")
        assert kept["idle_seconds"] < 0.5 and kept["policy"]["reason"] == "kept: the user chose Keep running"
        assert policy_events[-1]["action"] == "kept"
        await _idle_for(0.5)
        await app.policy_loop.run_pass()  # the warning was answered: a new one, no suspend
        model = await api(jp_fetch, "kernels", kernel_id)
        assert model["state"] == "running" and model["policy"]["action"] == "warn"

        await _idle_for(1.0)
        await app.policy_loop.run_pass()  # warned 1 s ago, idle 1.5 s: now it goes
        model = await api(jp_fetch, "kernels", kernel_id)
        assert model["state"] == "suspended"
        assert [e["action"] for e in policy_events] == ["warn", "kept", "warn", "suspend"]
        after = await _policy_actions(jp_fetch)
        assert [after[k] - before.get(k, 0) for k in (("warn", "idle"), ("kept", "user"), ("suspend", "idle"))] == [
            2, 1, 1]
        reply, _ = await ws_execute(ws, "kept + 1")
        assert reply["content"]["status"] == "ok"
    finally:
        ws.close()


async def test_keep_running_needs_a_known_kernel(jp_fetch):
    with pytest.raises(HTTPClientError) as answer:
        await api(jp_fetch, "kernels", "0123abcd", "keep", method="POST")
    assert answer.value.code == 404


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 0.5, "group_floors": {unix_group(): 1},
                                             "policy_interval": 3600.0}])
async def test_a_group_floor_keeps_an_idle_gpu_kernel(one_test_gpu, jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    await _idle_for(0.6)
    await _app(jp_serverapp).policy_loop.run_pass()
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "running"
    assert model["policy"]["reason"] == f"kept: group floor ({unix_group()} keeps 1 GPU(s))"
    assert (await api(jp_fetch, "policy"))["group_floors"] == {unix_group(): 1}


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 3600.0, "cpu_idle_timeout": 0.5,
                                             "policy_interval": 3600.0}])
async def test_gpu_and_cpu_kernels_have_their_own_timeouts(one_test_gpu, jp_fetch, jp_serverapp, jp_data_dir,
                                                           gpuckpt_config):
    folder = jp_data_dir / "kernels" / "cpu-only"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("CPU only", gpus=0)))
    gpu_kernel = await start_kernel(jp_fetch)  # takes the only GPU
    cpu_kernel = await start_kernel(jp_fetch, name="cpu-only")
    for kernel_id in (gpu_kernel, cpu_kernel):
        await run(jp_serverapp, kernel_id, "x = 1")
    await _idle_for(0.6)
    await _app(jp_serverapp).policy_loop.run_pass()
    gpu_model, cpu_model = [await api(jp_fetch, "kernels", k) for k in (gpu_kernel, cpu_kernel)]
    assert gpu_model["state"] == "running" and "of 60 min" in gpu_model["policy"]["reason"]
    assert cpu_model["gpus"] == [] and cpu_model["state"] == "suspended"
    assert cpu_model["policy"]["action"] == "suspend" and "(timeout " in cpu_model["policy"]["reason"]


@pytest.mark.parametrize("gpuckpt_config", [{"reclaim": "on_demand", "demand_idle": 0.5, "policy_interval": 3600.0}])
async def test_a_kernel_that_starts_waiting_wakes_the_policy_loop(one_test_gpu, jp_fetch, jp_serverapp,
                                                                  gpuckpt_config):
    await jp_serverapp.extension_manager.start_all_extensions()  # the loop, which would sleep an hour
    first = await start_kernel(jp_fetch)
    await run(jp_serverapp, first, "x = 1")
    await _idle_for(0.6)
    second = await asyncio.wait_for(start_kernel(jp_fetch), 60)  # served by the pass its wait woke
    assert (await api(jp_fetch, "kernels", first))["state"] == "suspended"
    assert [g["uuid"] for g in (await api(jp_fetch, "kernels", second))["gpus"]] == ["GPU-test-a"]


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 1.0, "policy_interval": 3600.0}])
async def test_a_kernel_the_user_resumes_is_not_suspended_again_at_the_next_pass(jp_fetch, jp_serverapp,
                                                                                 gpuckpt_config):
    app = _app(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    await _idle_for(1.2)
    await app.policy_loop.run_pass()
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended"
    await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    await app.policy_loop.run_pass()  # the resume was the user's activity: its idle time starts again
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "running" and model["idle_seconds"] < 1.0


async def test_a_running_cell_is_the_servers_activity_for_the_hubs_culler(jp_fetch, jp_serverapp, tmp_path):
    kernel_id = await start_kernel(jp_fetch)
    done = tmp_path / "done"
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=30)
        client.execute(f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)")  # silent
        await _until(lambda: _busy(jp_fetch, kernel_id), "the cell runs")
        before = (await api(jp_fetch, "kernels", kernel_id))["last_activity"]
        await asyncio.sleep(1.0)
        await _app(jp_serverapp).policy_loop.run_pass()
        status = json.loads((await jp_fetch("api", "status")).body)
        # the server's, which the hub reads: later than anything the silent cell sent
        assert datetime.fromisoformat(status["last_activity"]) > datetime.fromisoformat(before)
    finally:
        done.touch()
        client.stop_channels()


async def _busy(jp_fetch: Any, kernel_id: str) -> bool:
    return (await api(jp_fetch, "kernels", kernel_id))["execution_state"] == "busy"
