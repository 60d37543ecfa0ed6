"""Failover: a kernel whose process is killed comes back, same id, from its last checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from server_fixtures import api, run, start_kernel, ws_execute, ws_request


async def _killed_and_restored(jp_fetch: Any, kernel_id: str, pid: int) -> dict[str, Any]:
    """Kill the kernel's process; its model once the server has restored it from its checkpoint."""
    os.kill(pid, signal.SIGKILL)
    for _ in range(300):
        model = await api(jp_fetch, "kernels", kernel_id)
        if model["notice"] and model["state"] == "running":
            break
        await asyncio.sleep(0.1)
    assert "restored from checkpoint" in model["notice"]
    return dict(model)

async def test_killed_kernel_is_restored_from_its_last_checkpoint(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = [1, 2, 3]")
    model = await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    assert model["last_checkpoint"]["last_cell"] == 1
    await run(jp_serverapp, kernel_id, "lost = 'after the checkpoint'")
    await run(jp_serverapp, kernel_id, "kept.append(4)")
    pid = int(await run(jp_serverapp, kernel_id, "import os; print(os.getpid())"))

    model = await _killed_and_restored(jp_fetch, kernel_id, pid)
    # cell 1 ran before the checkpoint (which is silent and takes no number); 2-4 after it
    assert "Cells run after that checkpoint: 2, 3, 4" in model["notice"]
    out = await run(jp_serverapp, kernel_id, "import os; print(kept, 'lost' in dir(), os.getpid())")
    kept, lost, new_pid = out.rsplit(" ", 2)
    assert (kept, lost) == ("[1, 2, 3]", "False")
    assert int(new_pid) != pid


async def test_cells_sent_while_the_process_is_gone_wait_for_the_restore(jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 'from the checkpoint'")
    await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    pid = int(await run(jp_serverapp, kernel_id, "import os; print(os.getpid())"))
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        reply, iopub = await _execute_after_death(jp_fetch, jp_serverapp, kernel_id, pid, ws, "print(kept)")
    finally:
        ws.close()
    assert reply["content"]["status"] == "ok", reply["content"]
    printed = "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")
    assert printed == "from the checkpoint\n"
    shown = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "display_data"]
    assert len(shown) == 1 and "The kernel's process died; it was restored from checkpoint" in shown[0]


async def test_without_a_checkpoint_a_waiting_cell_is_told_and_not_run(jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    pid = int(await run(jp_serverapp, kernel_id, "import os; print(os.getpid())"))
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        reply, iopub = await _execute_after_death(jp_fetch, jp_serverapp, kernel_id, pid, ws, "print('ran')")
    finally:
        ws.close()
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KernelNotRestored"
    assert "had no checkpoint" in reply["content"]["evalue"]
    assert not [m for m in iopub if m["msg_type"] == "stream"]  # the cell did not run


async def _execute_after_death(jp_fetch, serverapp, kernel_id: str, pid: int, ws, code: str):
    """Kill the kernel and run ``code`` before jupyter_client's restarter notices (it is held
    back until the server holds the cell: the window is otherwise up to its 3 s poll)."""
    await ws_execute(ws, "'connected'")  # jupyter_server's connect (its nudge) is over
    km = serverapp.kernel_manager.get_kernel(kernel_id)
    km.stop_restarter()
    os.kill(pid, signal.SIGKILL)
    while _exists(pid):
        await asyncio.sleep(0.01)
    execution = asyncio.ensure_future(ws_execute(ws, code))
    deadline = asyncio.get_running_loop().time() + 30
    while (await api(jp_fetch, "kernels", kernel_id))["state"] != "restoring":  # the server holds it
        assert not execution.done() and asyncio.get_running_loop().time() < deadline, "the cell was not held"
        await asyncio.sleep(0.01)
    km.start_restarter()
    return await execution


def _exists(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_a_widget_comes_back_opened_after_a_failover(jp_fetch, jp_ws_fetch, jp_serverapp):
    """The notebook saw the kernel restart (its widget manager then drops its models): the
    restored widget is opened again, with a ``comm_open`` under its id, and takes the page's
    messages."""
    kernel_id = await start_kernel(jp_fetch)
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        _, iopub = await ws_execute(ws, "import ipywidgets as W, os; s = W.IntSlider(value=5); s.value = 6\n"
                                        "print(s.model_id, os.getpid())")
        model_id, pid = "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream").split()
        await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
        await ws_execute(ws, "s.value = 7")  # after the checkpoint: lost

        await _killed_and_restored(jp_fetch, kernel_id, int(pid))
        seen = await _every_message_until(ws, "print(s.value)")
        comm = ws_request("comm_msg", {"comm_id": model_id, "data": {"method": "update", "state": {"value": 11},
                                                                    "buffer_paths": []}})[0]
        await ws.write_message(comm)
        _, after = await ws_execute(ws, "print(s.value)")
    finally:
        ws.close()
    statuses = [m["content"]["execution_state"] for m in seen if m["msg_type"] == "status"]
    assert "restarting" in statuses
    opened = [m["content"] for m in seen if m["msg_type"] == "comm_open" and m["content"]["comm_id"] == model_id]
    assert len(opened) == 1 and opened[0]["target_name"] == "jupyter.widget"
    assert opened[0]["data"]["state"]["value"] == 6
    assert "".join(m["content"]["text"] for m in seen if m["msg_type"] == "stream").endswith("6\n")
    assert "".join(m["content"]["text"] for m in after if m["msg_type"] == "stream") == "11\n"


async def _every_message_until(ws, code: str) -> list[dict[str, Any]]:
    """Every message the websocket got (whatever their parent), up to the end of running ``code``."""
    text, msg_id = ws_request("execute_request", {"code": code, "silent": False, "store_history": True,
                                                  "user_expressions": {}, "allow_stdin": False})
    await ws.write_message(text)
    seen: list[dict[str, Any]] = []
    replied = idle = False
    while not (replied and idle):
        msg = json.loads(await asyncio.wait_for(ws.read_message(), 120))
        seen.append(msg)
        ours = msg["parent_header"].get("msg_id") == msg_id
        replied = replied or (ours and msg["msg_type"] == "execute_reply")
        idle = idle or (ours and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle")
    return seen
