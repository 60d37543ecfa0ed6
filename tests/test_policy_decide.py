"""The policy's decision for one kernel, case by case (the loop itself: test_server_policy.py)."""

from __future__ import annotations

import pytest

from jupyter_gpuckpt.policy import Policy, decide

NOW = 10_000.0


def _policy(**changes) -> Policy:
    base = Policy(idle_timeout=600, gpu_utilization_threshold=5, suspend_connected=True,
                  checkpoint_interval=0, keep_checkpoints=5)
    return Policy(**{**base.__dict__, **changes})


def _model(**changes) -> dict:
    base = {"state": "running", "execution_state": "idle", "idle_seconds": 900.0, "gpus": [],
            "connections": 0, "suspendable": True, "last_checkpoint": None}
    return {**base, **changes}


@pytest.mark.parametrize(("policy", "model", "expected"), [
    (_policy(), _model(), "suspend"),
    (_policy(), _model(idle_seconds=30.0), None),
    (_policy(idle_timeout=0), _model(), None),
    (_policy(), _model(execution_state="busy"), None),
    (_policy(exempt=True), _model(), None),
    (_policy(), _model(state="suspended"), None),
    (_policy(), _model(suspendable=False), None),
    (_policy(), _model(gpus=[{"utilization": 80}]), None),
    (_policy(), _model(gpus=[{"utilization": 2}]), "suspend"),
    (_policy(suspend_connected=False), _model(connections=1), None),
    (_policy(suspend_connected=False), _model(connections=0), "suspend"),
    (_policy(idle_timeout=0, checkpoint_interval=60), _model(idle_seconds=5.0), "checkpoint"),
    (_policy(idle_timeout=0, checkpoint_interval=60),
     _model(idle_seconds=5.0, last_checkpoint={"time": NOW - 30}), None),
    (_policy(idle_timeout=0, checkpoint_interval=60),
     _model(idle_seconds=5.0, last_checkpoint={"time": NOW - 120}), "checkpoint"),
    # nothing ran since the last checkpoint: another one would hold the same state
    (_policy(idle_timeout=0, checkpoint_interval=60),
     _model(idle_seconds=500.0, last_checkpoint={"time": NOW - 120}), None),
])
def test_decide(policy, model, expected):
    assert decide(policy, model, NOW) == expected


def test_kernelspec_metadata_overrides_only_known_settings():
    policy = _policy().override({"gpuckpt": {"idle_timeout": 30, "suspend_connected": False, "bogus": 1}})
    assert (policy.idle_timeout, policy.suspend_connected, policy.checkpoint_interval) == (30, False, 0)
