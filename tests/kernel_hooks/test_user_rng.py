"""Nothing the server does moves the user's random streams (issue 25, point 6).

IPython 9 builds its banner, picking a tip with ``random.choice``, for every
``kernel_info_request``, and the server (and each client of its kernel manager) sends those
before every call into the kernel. After ``random.seed(0)`` the next draws after a
checkpoint, or a suspend and a resume, must be those of a kernel nobody interrupted.
"""

from __future__ import annotations

import json
import random

import numpy as np
import torch
from server_fixtures import api, run, start_kernel

SEED = ("import random, numpy as np, torch\nrandom.seed(0); np.random.seed(0); torch.manual_seed(0)\n"
        "weights = np.arange(100_000.0); bias = torch.ones(100_000)")  # buffers the save and restore move
DRAW = "import json; print(json.dumps([random.random(), float(np.random.random()), torch.rand(1).item()]))"


def _uninterrupted() -> list[float]:
    """The first draw of each stream after seeding it with 0."""
    return [random.Random(0).random(), float(np.random.RandomState(0).random_sample()),
            torch.rand(1, generator=torch.Generator().manual_seed(0)).item()]


def test_the_uninterrupted_draws_are_the_issues():
    assert _uninterrupted()[0] == 0.8444218515250481


async def test_a_checkpoint_leaves_the_random_streams_where_they_were(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, SEED)
    model = await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    assert model["last_checkpoint"]["id"]
    assert json.loads(await run(jp_serverapp, kernel_id, DRAW)) == _uninterrupted()


async def test_a_suspend_and_resume_leave_the_random_streams_where_they_were(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, SEED)
    assert (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1",
                      mode="suspend"))["state"] == "suspended"
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["state"] == "running"
    assert json.loads(await run(jp_serverapp, kernel_id, DRAW)) == _uninterrupted()


def test_kernel_info_requests_keep_one_tip_and_take_no_draw(kernels):
    k = kernels.start()
    k.ok("import random; random.seed(0)")
    banners = []
    for _ in range(3):
        k.client.kernel_info()
        banners.append(k.client.get_shell_msg(timeout=30)["content"]["banner"])
    assert "Tip: " in banners[0]
    assert banners == banners[:1] * 3
    assert k.value("random.random()") == 0.8444218515250481


def test_loading_the_hooks_after_seeding_takes_no_draw(kernels):
    k = kernels.start(load_hooks=False)
    k.ok("import random; random.seed(0)\n%load_ext kernel_hooks")
    assert k.value("random.random()") == 0.8444218515250481
