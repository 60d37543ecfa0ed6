"""Suspend and resume through the REST API, against a real jupyter_server and kernels."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from server_fixtures import api, run, start_kernel


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


async def test_suspend_ends_the_process_and_resume_brings_the_variables_back(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "import numpy as np\nweights = np.arange(1_000_000)\nnote = 'kept'")
    pid = int(await run(jp_serverapp, kernel_id, "import os; print(os.getpid())"))

    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert model["state"] == "suspended"
    assert model["last_checkpoint"]["variables"] == 4  # np, weights, note, os
    assert not _alive(pid)
    response = await jp_fetch("api", "kernels")
    assert kernel_id in [k["id"] for k in json.loads(response.body)]

    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running"
    out = await run(jp_serverapp, kernel_id, "import os; print(int(weights.sum()), note, os.getpid())")
    total, note, new_pid = out.split()
    assert (int(total), note) == (sum(range(1_000_000)), "kept")
    assert int(new_pid) != pid


async def test_suspended_kernel_stays_attached_to_its_session(jp_fetch, jp_serverapp):
    body = json.dumps({"path": "analysis.ipynb", "type": "notebook", "name": "analysis.ipynb",
                       "kernel": {"name": "python3-gpuckpt"}})
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=body)).body)
    kernel_id = session["kernel"]["id"]
    await run(jp_serverapp, kernel_id, "x = 1")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert [(s["path"], s["kernel"]["id"]) for s in sessions] == [("analysis.ipynb", kernel_id)]


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "keep_checkpoints": 3}])
async def test_checkpoints_do_not_count_as_activity_and_old_ones_are_pruned(jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    before = (await api(jp_fetch, "kernels", kernel_id))["last_activity"]
    ids = []
    for _ in range(4):  # keep_checkpoints is 3 in this test
        model = await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
        ids.append(model["last_checkpoint"]["id"])
    assert (await api(jp_fetch, "kernels", kernel_id))["last_activity"] == before
    listed = [c["id"] for c in await api(jp_fetch, "kernels", kernel_id, "checkpoints")]
    assert listed == ids[1:]


async def test_concurrent_requests_end_consistent_and_lose_nothing(jp_fetch, jp_serverapp):
    kernels = [await start_kernel(jp_fetch) for _ in range(3)]
    for i, kernel_id in enumerate(kernels):
        await run(jp_serverapp, kernel_id, f"value = {i} * 1000")
    actions = ["suspend", "resume", "checkpoint", "suspend", "suspend", "resume", "resume", "checkpoint"]
    requests = [api(jp_fetch, "kernels", k, a, method="POST", wait="1") for a in actions for k in kernels]
    outcomes = await asyncio.gather(*requests, return_exceptions=True)
    for outcome in outcomes:  # each either worked or was refused for the state it found
        assert isinstance(outcome, dict) or getattr(outcome, "code", None) == 409, outcome
    for i, kernel_id in enumerate(kernels):
        model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
        assert model["state"] == "running"
        provisioner = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_kernel_of(int(p), kernel_id)]
        assert pids == [provisioner.pid]  # exactly one process per kernel
        assert int(await run(jp_serverapp, kernel_id, "print(value)")) == i * 1000


def _is_kernel_of(pid: int, kernel_id: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "ipykernel_launcher" in cmdline and f"kernel-{kernel_id}.json" in cmdline and _alive(pid)


async def test_kernelspec_loads_the_hooks_at_start(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    out = await run(jp_serverapp, kernel_id, "%gpuckpt list")
    assert out.strip() == "No checkpoints."
