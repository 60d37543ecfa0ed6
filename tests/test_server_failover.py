"""Failover: a kernel whose process is killed comes back, same id, from its last checkpoint."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from server_fixtures import api, run, start_kernel, ws_execute


async def test_killed_kernel_is_restored_from_its_last_checkpoint(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = [1, 2, 3]")
    model = await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    assert model["last_checkpoint"]["last_cell"] == 1
    await run(jp_serverapp, kernel_id, "lost = 'after the checkpoint'")
    await run(jp_serverapp, kernel_id, "kept.append(4)")
    pid = int(await run(jp_serverapp, kernel_id, "import os; print(os.getpid())"))

    os.kill(pid, signal.SIGKILL)
    for _ in range(300):
        model = await api(jp_fetch, "kernels", kernel_id)
        if model["notice"] and model["state"] == "running":
            break
        await asyncio.sleep(0.1)
    assert "restored from checkpoint" in model["notice"]
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
