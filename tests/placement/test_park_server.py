"""Park through the server where the CUDA driver cannot park (these machines have none): the
refusal is reported with the driver's reason and the kernel is suspended instead. The park
itself is covered on a GPU by tests/placement/test_gpu_park.py."""

from __future__ import annotations

import pytest
from server_fixtures import api, run, start_kernel
from tornado.httpclient import HTTPClientError


def _no_driver_reason(text: str) -> bool:
    return "CUDA driver" in text or "cuda-python is not installed" in text


async def test_a_park_asked_for_where_the_driver_cannot_suspends_and_says_why(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "value = 41 + 1")

    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="park")
    assert model["state"] == "suspended"
    assert model["notice"].startswith("The kernel could not be parked (") and "suspended instead" in model["notice"]
    assert _no_driver_reason(model["notice"]), model["notice"]

    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running" and (await run(jp_serverapp, kernel_id, "print(value)")).strip() == "42"


async def test_the_default_park_falls_back_to_suspend_quietly(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    policy_model = await api(jp_fetch, "policy")
    assert policy_model["release_mode"] == "park" and policy_model["park_timeout"] == 3600.0
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert model["state"] == "suspended" and model["notice"] is None  # nobody asked to park: no news

    with pytest.raises(HTTPClientError) as refused:
        await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1", mode="park")
    assert refused.value.code == 400
    with pytest.raises(HTTPClientError) as refused:
        await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="hibernate")
    assert refused.value.code == 400
