"""Restart means a fresh kernel, suspended or not: a suspended kernel restarted comes back within
seconds as a new process with no state, and its checkpoints stay listed, so the user can still
restore one."""

from __future__ import annotations

import time

from server_fixtures import api, run, start_kernel


async def test_restarting_a_suspended_kernel_gives_a_fresh_one_and_keeps_its_checkpoints(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "answer = 42")
    suspended = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint = suspended["last_checkpoint"]["id"]
    started = time.monotonic()
    await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body=b"")
    took = time.monotonic() - started
    assert took < 5, f"the restart took {took:.1f} s"
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "running", model
    assert await run(jp_serverapp, kernel_id, "print('answer' in globals())") == "False\n"  # state gone
    listed = [c["id"] for c in await api(jp_fetch, "kernels", kernel_id, "checkpoints")]
    assert checkpoint in listed
    restored = await run(jp_serverapp, kernel_id, f"%gpuckpt restore {checkpoint}\nprint(answer)")
    assert restored.rstrip().endswith("42"), restored
