"""Suspend and resume through the REST API, against a real jupyter_server and kernels."""

from __future__ import annotations

import json
import os

from server_fixtures import api, run, start_kernel


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0] != "Z"


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
