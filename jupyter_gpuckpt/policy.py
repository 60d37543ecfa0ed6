"""Idle policy: which kernels to suspend or checkpoint now.

The settings are the extension's traitlets; a kernelspec can override any of them in its
metadata under ``"gpuckpt"`` (for example ``{"idle_timeout": 600}``). A busy kernel is never
suspended by policy, and checkpoint traffic never counts as activity.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any

from .lifecycle import State

POLICY_FIELDS = ("idle_timeout", "gpu_utilization_threshold", "suspend_connected",
                 "checkpoint_interval", "keep_checkpoints", "exempt", "release_mode", "park_timeout")


@dataclass
class Policy:
    """The effective policy for one kernel."""

    idle_timeout: float
    gpu_utilization_threshold: int
    suspend_connected: bool
    checkpoint_interval: float
    keep_checkpoints: int
    exempt: bool = False
    release_mode: str = "park"
    """How a suspend frees the GPU: "park" (CUDA driver, process kept) where it can, else "suspend"."""
    park_timeout: float = 3600.0
    """A kernel parked this long is suspended (its process ended); 0 never."""

    def override(self, metadata: dict[str, Any]) -> Policy:
        """This policy with a kernelspec's ``metadata["gpuckpt"]`` applied."""
        names = {f.name for f in fields(self)}
        updates = {k: v for k, v in (metadata.get("gpuckpt") or {}).items() if k in names}
        return Policy(**{**self.__dict__, **updates})


def decide(policy: Policy, model: dict[str, Any], now: float) -> str | None:
    """"suspend", "checkpoint", "convert" (a kernel parked for ``park_timeout`` is suspended)
    or None for a kernel's model (see ``CheckpointManager.model``)."""
    if model["state"] == State.PARKED.value:
        parked = model.get("parked_for")
        return "convert" if policy.park_timeout > 0 and parked is not None and parked >= policy.park_timeout else None
    if policy.exempt or model["state"] != State.RUNNING.value or model["execution_state"] == "busy":
        return None
    idle = model["idle_seconds"]
    busy_gpu = any(g["utilization"] > policy.gpu_utilization_threshold for g in model["gpus"])
    connected_ok = policy.suspend_connected or not model["connections"]
    if (policy.idle_timeout > 0 and idle is not None and idle >= policy.idle_timeout
            and not busy_gpu and connected_ok and model["suspendable"]):
        return "suspend"
    last = model["last_checkpoint"]
    since = now - last["time"] if last else None
    if policy.checkpoint_interval > 0 and (since is None or since >= policy.checkpoint_interval):
        if last is None or idle is None or idle < (since or 0):  # something ran since
            return "checkpoint"
    return None


def now() -> float:
    return time.time()
