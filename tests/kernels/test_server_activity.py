"""The server's own calls into a kernel, and the panel's polling, are not the user's activity.

What counts: a cell the user runs (the kernel's ``last_activity`` and the server's, which
``/api/status`` reports and JupyterHub's idle culler reads), and a request the user makes
(a ``POST`` suspend, resume, checkpoint or keep: the server's API activity; a resume, the
kernel's too). What does not: the checkpoints and restores the server runs in the kernel,
periodic or asked for, and the ``GET`` requests the frontend and the hub service poll.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any

import pytest
from server_fixtures import api, run, start_kernel

PERIODIC = {"checkpoint_interval": 2.0, "policy_interval": 0.5}
WATCH_SECONDS = 8.0
"""How long an idle server is watched: four checkpoint intervals, sixteen policy passes."""


async def _server_activity(jp_fetch: Any) -> datetime:
    """The server's ``last_activity``, as JupyterHub reads it (``/api/status`` is not activity itself)."""
    return datetime.fromisoformat(json.loads((await jp_fetch("api", "status")).body)["last_activity"])


def _kernel_activity(serverapp: Any, kernel_id: str) -> datetime:
    return serverapp.kernel_manager.get_kernel(kernel_id).last_activity


async def _poll_like_the_panel(jp_fetch: Any, kernel_id: str) -> set[str]:
    """What the frontend's panel reads every few seconds; the kernel's checkpoints' ids."""
    await api(jp_fetch, "kernels")
    await api(jp_fetch, "kernels", kernel_id)
    await api(jp_fetch, "gpus")
    await api(jp_fetch, "policy")
    return {c["id"] for c in await api(jp_fetch, "kernels", kernel_id, "checkpoints")}


async def _watch(jp_fetch: Any, kernel_id: str, seconds: float, known: set[str]) -> set[str]:
    """Poll as the panel does until a checkpoint not in ``known`` is taken (at most a minute),
    then ``seconds`` more; every checkpoint seen."""
    loop = asyncio.get_running_loop()
    seen = set(known)
    deadline = loop.time() + 60
    while seen == known:
        assert loop.time() < deadline, "no periodic checkpoint was taken"
        seen |= await _poll_like_the_panel(jp_fetch, kernel_id)
        await asyncio.sleep(0.25)
    end = loop.time() + seconds
    while loop.time() < end:
        seen |= await _poll_like_the_panel(jp_fetch, kernel_id)
        await asyncio.sleep(0.25)
    return seen


async def _user_ran_a_cell(serverapp: Any, kernel_id: str, code: str) -> None:
    await run(serverapp, kernel_id, code)
    await asyncio.sleep(0.5)  # the cell's last IOPub messages reach the server's activity watcher


@pytest.mark.parametrize("gpuckpt_config", [PERIODIC])
async def test_periodic_checkpoints_of_an_idle_server_are_not_activity(jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await _user_ran_a_cell(jp_serverapp, kernel_id, "x = 1")
    server, kernel = await _server_activity(jp_fetch), _kernel_activity(jp_serverapp, kernel_id)
    await jp_serverapp.extension_manager.start_all_extensions()  # the policy loop

    seen = await _watch(jp_fetch, kernel_id, WATCH_SECONDS, set())
    # one: nothing ran after it, so the later passes found nothing new to save
    assert len(seen) == 1
    assert (await _server_activity(jp_fetch), _kernel_activity(jp_serverapp, kernel_id)) == (server, kernel)
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["execution_state"] == "idle" and model["last_checkpoint"]["id"] in seen


@pytest.mark.parametrize("gpuckpt_config", [PERIODIC])
async def test_suspend_and_resume_count_as_the_users_requests_only(jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await _user_ran_a_cell(jp_serverapp, kernel_id, "x = 1")
    kernel = _kernel_activity(jp_serverapp, kernel_id)

    asked = datetime.now(timezone.utc)
    suspended = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    answered = datetime.now(timezone.utc)
    # the POST is the user's request; the checkpoint it took is not the kernel's activity
    assert asked <= await _server_activity(jp_fetch) <= answered
    assert _kernel_activity(jp_serverapp, kernel_id) == kernel

    asked = datetime.now(timezone.utc)
    await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    answered = datetime.now(timezone.utc)
    server, kernel = await _server_activity(jp_fetch), _kernel_activity(jp_serverapp, kernel_id)
    assert asked <= kernel <= server <= answered  # the user's resume counts for the kernel too

    await jp_serverapp.extension_manager.start_all_extensions()  # the resume ran something: a checkpoint is due
    seen = await _watch(jp_fetch, kernel_id, WATCH_SECONDS / 2, {suspended["last_checkpoint"]["id"]})
    assert len(seen) == 2
    assert (await _server_activity(jp_fetch), _kernel_activity(jp_serverapp, kernel_id)) == (server, kernel)
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "running"


async def test_a_users_cell_is_activity(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await _user_ran_a_cell(jp_serverapp, kernel_id, "x = 1")
    server, kernel = await _server_activity(jp_fetch), _kernel_activity(jp_serverapp, kernel_id)
    await _poll_like_the_panel(jp_fetch, kernel_id)
    assert (await _server_activity(jp_fetch), _kernel_activity(jp_serverapp, kernel_id)) == (server, kernel)

    await _user_ran_a_cell(jp_serverapp, kernel_id, "y = x + 1")
    assert await _server_activity(jp_fetch) > server and _kernel_activity(jp_serverapp, kernel_id) > kernel
