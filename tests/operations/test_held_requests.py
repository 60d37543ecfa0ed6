"""Every request a page sends while its kernel is away gets a reply: a cell sent while a suspend
is under way runs (the kernel resumes right after), and completion, inspection, history and comm
requests held while the kernel is suspended are answered once it is back, however it came back,
or with an error reply if it is shut down instead."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from server_fixtures import api, run, start_kernel, ws_execute, ws_request

REQUESTS = {
    "complete_request": {"code": "answ", "cursor_pos": 4},
    "inspect_request": {"code": "answer", "cursor_pos": 6, "detail_level": 0},
    "is_complete_request": {"code": "for i in range(3):"},
    "history_request": {"output": False, "raw": True, "hist_access_type": "tail", "n": 5},
    "comm_info_request": {},
}


async def _replies(ws: Any, wanted: dict[str, str], timeout: float) -> dict[str, dict[str, Any]]:
    """The replies to the requests ``wanted`` names (msg_id: type), read off ``ws``."""
    got: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(wanted):
        msg = json.loads(await asyncio.wait_for(ws.read_message(), max(0.1, deadline - time.monotonic())))
        parent = msg["parent_header"].get("msg_id")
        if parent in wanted and msg["msg_type"] == wanted[parent].replace("_request", "_reply"):
            got[wanted[parent]] = msg["content"]
    return got


async def _send_all(ws: Any) -> dict[str, str]:
    wanted = {}
    for msg_type, content in REQUESTS.items():
        text, msg_id = ws_request(msg_type, content)
        await ws.write_message(text)
        wanted[msg_id] = msg_type
    return wanted


async def test_requests_held_while_suspended_are_answered_once_a_rest_resume_brings_it_back(
        jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "answer = 42")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        wanted = await _send_all(ws)
        await asyncio.sleep(1)  # held: nothing resumes a kernel for a completion
        assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended"
        await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
        replies = await _replies(ws, wanted, timeout=30)
    finally:
        ws.close()
    assert {kind: reply["status"] for kind, reply in replies.items()} == {
        **dict.fromkeys(REQUESTS, "ok"), "is_complete_request": "incomplete"}
    assert "answer" in replies["complete_request"]["matches"]  # from the restored kernel's namespace


async def test_a_cell_sent_while_a_suspend_is_checkpointing_runs_in_the_kernel_resumed_after(
        jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "import numpy as np\nweights = np.random.default_rng(7).random(40_000_000)\n"
                                       "answer = 42")
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST")  # a policy's suspend, say
        states = []
        while not states or states[-1] == "running":
            states.append((await api(jp_fetch, "kernels", kernel_id))["state"])
            await asyncio.sleep(0.01)
        assert states[-1] == "checkpointing", states  # the cell arrives while the kernel saves
        started = time.monotonic()
        reply, iopub = await ws_execute(ws, "answer + 1", timeout=90)
        took = time.monotonic() - started
    finally:
        ws.close()
    assert reply["content"]["status"] == "ok", reply
    assert [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "execute_result"] == ["43"]
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "running" and model["last_checkpoint"] is not None
    print(f"the cell sent while checkpointing was answered in {took:.1f} s")


async def test_requests_held_for_a_kernel_shut_down_get_an_error_reply(jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "answer = 42")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        wanted = await _send_all(ws)
        await asyncio.sleep(0.5)
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
        replies = await _replies(ws, wanted, timeout=15)
    finally:
        ws.close()
    assert {kind: reply["status"] for kind, reply in replies.items()} == {
        **dict.fromkeys(REQUESTS, "error"), "is_complete_request": "unknown"}
    assert all(reply["ename"] == "KernelNotRestored" for kind, reply in replies.items() if kind != "is_complete_request")
