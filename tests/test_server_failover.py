"""Failover: a kernel whose process is killed comes back, same id, from its last checkpoint."""

from __future__ import annotations

import asyncio
import os
import signal

from server_fixtures import api, run, start_kernel


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
