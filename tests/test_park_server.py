"""Park through the server where the CUDA driver cannot park (these machines have none): the
refusal is reported with the driver's reason and the kernel is suspended instead. The park
itself is covered on a GPU by tests/test_gpu_park.py."""

from __future__ import annotations

import pytest
from server_fixtures import api, run, start_kernel
from tornado.httpclient import HTTPClientError

from jupyter_gpuckpt import policy
from jupyter_gpuckpt.lifecycle import State


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


def test_a_kernel_parked_past_the_park_timeout_is_to_be_suspended() -> None:
    settings = policy.Policy(0.0, 5, True, 0.0, 5, park_timeout=600.0)
    model = {"state": State.PARKED.value, "parked_for": 599.0}
    assert policy.decide(settings, model, 0.0) is None
    assert policy.decide(settings, {**model, "parked_for": 601.0}, 0.0) == "convert"
    never = policy.Policy(0.0, 5, True, 0.0, 5, park_timeout=0.0)
    assert policy.decide(never, {**model, "parked_for": 10**6}, 0.0) is None
