"""The server's policy pass: how each kernel looks to the policy (``policy.py``), who waits
for GPUs, what each group holds, and acting on the decisions, warnings and "Keep running"
included.

The decisions themselves are ``policy.plan``'s, the same code the trace replay runs.
"""

from __future__ import annotations

import asyncio
import grp
import logging
import os
import pwd
from collections.abc import Callable, Mapping
from typing import Any

from . import activity, policy
from .events import Emit
from .gpus import GPU, GPUPool
from .lifecycle import AWAY, State
from .manager import CheckpointManager
from .placement import GPUCheckpointProvisioner


def unix_group() -> str:
    """The primary Unix group of the server's user: the default policy group."""
    try:
        return grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        return str(os.getgid())


def unix_groups() -> set[str]:
    """Every Unix group the server's user is in: the groups a kernelspec may name."""
    names = {unix_group()}
    for gid in os.getgroups():
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.add(str(gid))
    return names


def user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


class Reclaimer:
    """Runs policy passes over one manager's kernels.

    Parameters
    ----------
    manager
        The kernels, their records and operations.
    policy_for
        The effective policy of a kernel (the server's, with its kernelspec's overrides).
    floors
        GPUs each group keeps under policy suspends.
    group_of
        A kernel's group (kernelspec ``metadata.gpuckpt.group``, the admin's user mapping, or
        the user's Unix group).
    emit
        ``emit(event, data)``, for the ``policy`` event.
    """

    def __init__(self, manager: CheckpointManager, policy_for: Callable[[str], policy.Policy],
                 floors: Mapping[str, int], group_of: Callable[[str], str], emit: Emit,
                 log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.manager = manager
        self.policy_for = policy_for
        self.floors = floors
        self.group_of = group_of
        self.emit = emit
        self.log = log

    def view(self, kernel_id: str, model: dict[str, Any], now: float) -> policy.KernelView:
        """The kernel as the policy sees it, from its REST model."""
        record = self.manager.record(kernel_id)
        provisioner = self.manager.provisioner(kernel_id)
        last = model["last_checkpoint"]
        idle = model["idle_seconds"]
        warned = record.warned_at
        if warned is not None and idle is not None and now - idle > warned:
            warned = None  # used since the warning: the warning is void
        return policy.KernelView(
            kernel_id, model["state"], model["execution_state"] == "busy", idle, len(model["gpus"]),
            max((g["utilization"] for g in model["gpus"]), default=0), model["connections"] or 0,
            model["suspendable"], int((last or {}).get("bytes_total") or 0), self.group_of(kernel_id),
            provisioner.demand_pool if provisioner else "", tuple(self.manager.watcher.gaps.get(kernel_id, ())),
            warned, model["parked_for"], None if last is None else now - last["time"],
            user_gaps=tuple(self.manager.watcher.user_gaps))

    async def demand(self, kernel_ids: list[str]) -> dict[str, policy.Demand]:
        """The GPU requests waiting in each pool that these kernels' GPUs could serve."""
        found: dict[str, policy.Demand] = {}
        for kernel_id in kernel_ids:
            provisioner = self.manager.provisioner(kernel_id)
            if provisioner is None or provisioner.demand_pool in found:
                continue
            try:
                found[provisioner.demand_pool] = await provisioner.demand()
            except Exception as e:  # Slurm down, say: the pool's kernels are decided with nobody waiting
                self.log.warning("gpuckpt policy: no demand for %s this pass: %s", provisioner.demand_pool, e)
                found[provisioner.demand_pool] = policy.Demand()
        return found

    async def held(self, kernel_ids: list[str], views: list[policy.KernelView]) -> dict[str, int]:
        """GPUs each group's running kernels hold: this server's, or every server's where the
        placement can tell."""
        held: dict[str, int] = {}
        for v in views:
            if v.state in (State.RUNNING.value, State.CHECKPOINTING.value):
                held[v.group] = held.get(v.group, 0) + v.gpus
        asked: set[type[GPUCheckpointProvisioner]] = set()
        for kernel_id in kernel_ids:
            provisioner = self.manager.provisioner(kernel_id)
            if provisioner is None or type(provisioner) in asked:
                continue
            asked.add(type(provisioner))
            try:
                reported = await provisioner.group_gpus() or {}
            except Exception as e:  # this server's own count stands
                self.log.warning("gpuckpt policy: no group holdings from %s this pass: %s",
                                 type(provisioner).__name__, e)
                reported = {}
            for group, gpus in reported.items():
                held[group] = max(held.get(group, 0), gpus)
        return held

    async def run_pass(self, readings: list[GPU] | None = None) -> list[policy.Decision]:
        """Decide for every kernel, keep each decision on its record (the model's ``policy``),
        and act on them, the kernels side by side."""
        now = policy.now()
        readings = GPUPool.instance().readings() if readings is None else readings
        kernel_ids = list(self.manager.kernel_manager.list_kernel_ids())
        views = []
        for kernel_id in kernel_ids:
            try:
                views.append(self.view(kernel_id, self.manager.model(kernel_id, readings), now))
            except Exception:  # a kernel shut down meanwhile, say: the others are still decided
                self.log.exception("gpuckpt policy could not look at kernel %s", kernel_id)
        wanted = {v.kernel_id for v in views}
        demand = await self.demand([k for k in kernel_ids if k in wanted])
        floors = policy.Floors(self.floors, await self.held(kernel_ids, views) if self.floors else {})
        decisions = policy.plan(self.policy_for, views, demand, floors, now)
        await asyncio.gather(*(self._act(d, now) for d in decisions))
        return decisions

    async def _act(self, decision: policy.Decision, now: float) -> None:
        kernel_id = decision.kernel_id
        record = self.manager.records.get(kernel_id)
        if record is None:
            return
        if decision.action is None and record.state in AWAY and \
                (record.decision or {}).get("action") in ("suspend", "convert"):
            return  # the model keeps why the policy suspended it, until it runs again
        record.decision = decision.to_json()
        try:
            if decision.action == "warn":
                record.warned_at = now
                self._announce(decision)
            elif decision.action == "suspend":
                self._announce(decision)
                await self.manager.operations.suspend(kernel_id, reason="policy")
                record.warned_at = None
            elif decision.action == "checkpoint":
                await self.manager.operations.checkpoint(kernel_id, reason="periodic")
            elif decision.action == "convert":
                await self.manager.operations.convert(kernel_id, reason="policy")
        except Exception:
            self.log.exception("gpuckpt policy could not %s kernel %s", decision.action, kernel_id)

    def _announce(self, decision: policy.Decision) -> None:
        self.emit("policy", {"kernel_id": decision.kernel_id, "action": decision.action, "reason": decision.reason,
                             "due_in": decision.due_in, "for_demand": decision.for_demand})

    def keep(self, kernel_id: str) -> dict[str, Any]:
        """The user chose "Keep running": it counts as activity, so the warned suspend is off
        and the idle time starts again. Returns the kernel's model."""
        record = self.manager.record(kernel_id)
        activity.touch(self.manager.km(kernel_id))
        record.warned_at = None
        reason = "the user chose Keep running"
        record.decision = policy.Decision(kernel_id, None, f"kept: {reason}").to_json()
        self.emit("policy", {"kernel_id": kernel_id, "action": "kept", "reason": reason, "due_in": None,
                             "for_demand": False})
        return self.manager.model(kernel_id)
