"""The admin's policy, set once in the hub's config (``c.Spawner.args``), suspends every user's
idle GPU kernel; the hub service shows why, what each user gives back now, and, once a kernel
is back, the GPU-hours it gave back, per user on its API and its Prometheus metrics.

Each user's server has one GPU (described, not real: ``$JUPYTER_GPUCKPT_TEST_GPUS``, as in the
other server tests), which the user's kernel takes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_fixtures import ADMIN, USERS, Hub, running_hub
from prometheus_client.parser import text_string_to_metric_families

IDLE_TIMEOUT = 3


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    base: Path = tmp_path_factory.mktemp("hub-policy")
    inventory = base / "gpus.json"
    inventory.write_text(json.dumps([{"uuid": "GPU-hub-0", "name": "Test GPU", "memory_total": 2**34}]))
    admins_policy = f"""
c.Spawner.environment["JUPYTER_GPUCKPT_TEST_GPUS"] = {str(inventory)!r}
c.Spawner.args = [a for a in c.Spawner.args if "policy_interval" not in a] + [
    "--GPUCheckpointApp.policy_interval=1", "--GPUCheckpointApp.idle_timeout={IDLE_TIMEOUT}",
    "--GPUCheckpointApp.warn_before=0"]
"""
    with running_hub(base, extra_config=admins_policy) as hub:
        hub.start_servers(*USERS)
        yield hub


def _view(hub: Hub, token: str) -> dict[str, Any]:
    response = hub.request("GET", "services/gpuckpt/api/kernels", token)
    assert response.code == 200, (response.code, response.body)
    return dict(response.json())


def test_the_admins_policy_suspends_each_users_idle_gpu_kernel(hub: Hub) -> None:
    tokens = {user: hub.token(user) for user in (*USERS, ADMIN)}
    kernels = {}
    for user in USERS:  # each kernel was given its server's GPU
        kernels[user] = hub.start_kernel(user, tokens[user])
        code = f"import os; x = {user!r}; print(x, os.environ['CUDA_VISIBLE_DEVICES'])"
        reply, printed = hub.execute(user, tokens[user], kernels[user], code)
        assert printed.split() == [user, "GPU-hub-0"], reply

    deadline = time.monotonic() + 60
    view = _view(hub, tokens[ADMIN])
    while {k["state"] for k in view["kernels"]} != {"suspended"}:
        assert time.monotonic() < deadline, view["kernels"]
        time.sleep(0.5)
        view = _view(hub, tokens[ADMIN])
    for kernel in view["kernels"]:
        assert kernel["policy"]["reason"].startswith("idle ") and f"timeout {IDLE_TIMEOUT} s" in \
            kernel["policy"]["reason"], kernel["policy"]
    summaries = {u["user"]: u for u in view["users"]}
    assert [(summaries[u]["released_gpus"], summaries[u]["gpus_held"]) for u in USERS] == [(1, 0), (1, 0)]
    policies = [summaries[u]["servers"][0]["policy"] for u in USERS]
    assert [(p["idle_timeout"], p["reclaim"]) for p in policies] == [(IDLE_TIMEOUT, "idle")] * 2

    # alice's next cell brings hers back: the GPU-hours her kernel gave back are counted then
    assert hub.execute("alice", tokens["alice"], kernels["alice"], "print(x)")[1].strip() == "alice"
    summaries = {u["user"]: u for u in _view(hub, tokens[ADMIN])["users"]}
    assert summaries["alice"]["released_gpu_hours"] > 0 and summaries["alice"]["released_gpus"] == 0
    assert summaries["bob"]["released_gpu_hours"] == 0 and summaries["bob"]["released_gpus"] == 1
    metrics = {(sample.name, sample.labels.get("user")): sample.value for family in text_string_to_metric_families(
        hub.request("GET", "services/gpuckpt/metrics", tokens[ADMIN]).body.decode()) for sample in family.samples}
    assert metrics[("jupyter_gpuckpt_hub_released_gpus", "bob")] == 1
    assert metrics[("jupyter_gpuckpt_hub_released_gpu_seconds_total", "alice")] > 0
    assert metrics[("jupyter_gpuckpt_hub_released_gpu_seconds_total", "bob")] == 0

    # bob sees his own, and only his
    mine = _view(hub, tokens["bob"])
    assert [(k["user"], k["id"], k["state"]) for k in mine["kernels"]] == [("bob", kernels["bob"], "suspended")]
