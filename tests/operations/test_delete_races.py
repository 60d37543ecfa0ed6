"""A kernel shut down while an operation is asked of it: the operation gets a prompt 404 or 409,
never a 500 after the kernel's whole ready timeout, and nothing lists the kernel afterwards."""

from __future__ import annotations

import asyncio
import time

import pytest
from server_fixtures import api, run, start_kernel
from tornado.httpclient import HTTPClientError


@pytest.mark.parametrize("action", ["suspend", "checkpoint"])
async def test_an_operation_asked_just_after_a_delete_is_refused_promptly(jp_fetch, jp_serverapp, action):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "answer = 42")
    deleting = asyncio.ensure_future(jp_fetch("api", "kernels", kernel_id, method="DELETE"))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(HTTPClientError) as refused:
        await api(jp_fetch, "kernels", kernel_id, action, method="POST", wait="1")
    took = time.monotonic() - started
    await deleting
    assert refused.value.code in (404, 409), refused.value.response.body if refused.value.response else refused.value
    assert took < 5, f"refused after {took:.1f} s"
    assert kernel_id not in {k["id"] for k in await api(jp_fetch, "kernels")}


async def test_a_kernel_deleted_while_it_suspends_is_gone_for_every_request(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "import numpy as np\nweights = np.random.default_rng(7).random(40_000_000)")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST")
    while (await api(jp_fetch, "kernels", kernel_id))["state"] == "running":
        await asyncio.sleep(0.01)
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    for path, method in (((), "GET"), (("resume",), "POST"), (("suspend",), "POST")):
        with pytest.raises(HTTPClientError) as refused:
            await api(jp_fetch, "kernels", kernel_id, *path, method=method, wait="1")
        assert refused.value.code == 404, (path, refused.value)
    assert kernel_id not in {k["id"] for k in await api(jp_fetch, "kernels")}
