"""The server's policy pass: how each kernel looks to the policy (``policy.py``), who waits
for GPUs, what each group holds, and acting on the decisions, warnings and "Keep running"
included.

The decisions themselves are ``policy.plan``'s, the same code the trace replay runs. Every
source of a pass fails alone (:mod:`.policy_faults`); a kernel whose GPUs could not be read
this pass counts as busy: nothing is suspended on figures that are not fresh.
"""

from __future__ import annotations

import asyncio
import grp
import logging
import os
import pwd
from collections.abc import Callable, Mapping
from typing import Any

from ..events import Emit
from ..kernels import activity
from ..kernels.lifecycle import AWAY, State
from ..kernels.registry import KernelRegistry
from ..operations.actions import KernelOperations
from ..placement import GPUCheckpointProvisioner
from ..placement.demand import Demand
from ..placement.gpus import GPUPool
from . import decisions as policy
from .faults import PolicyFaults


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
    """Runs policy passes over the registry's kernels.

    Parameters
    ----------
    registry
        The kernels and their records.
    operations
        What a decision asks for: suspend, checkpoint, convert.
    policy_for
        The effective policy of a kernel (the server's, with its kernelspec's overrides).
    floors
        GPUs each group keeps under policy suspends.
    group_of
        A kernel's group (kernelspec ``metadata.gpuckpt.group``, the admin's user mapping, or
        the user's Unix group).
    emit
        ``emit(event, data)``, for the ``policy`` event.
    log
        Where the passes' failures are logged (:attr:`faults`).
    """

    def __init__(self, registry: KernelRegistry, operations: KernelOperations,
                 policy_for: Callable[[str], policy.Policy], floors: Mapping[str, int],
                 group_of: Callable[[str], str], emit: Emit,
                 log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.registry = registry
        self.operations = operations
        self.policy_for = policy_for
        self.floors = floors
        self.group_of = group_of
        self.emit = emit
        self.faults = PolicyFaults(log)

    def view(self, kernel_id: str, model: dict[str, Any], now: float, gpus_known: bool = True) -> policy.KernelView:
        """The kernel as the policy sees it, from its REST model (``gpus_known``: its GPUs'
        figures are fresh; if not, it counts as busy, as if they were working)."""
        record = self.registry.record(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)
        last = model["last_checkpoint"]
        idle = model["idle_seconds"]
        warned = record.warned_at
        if warned is not None and idle is not None and now - idle > warned:
            warned = None  # used since the warning: the warning is void
        # a fallback checkpoint in a ledger written before it kept one's time has none: age unknown
        age = None if last is None or last.get("time") is None else now - last["time"]
        return policy.KernelView(
            kernel_id, model["state"], model["execution_state"] == "busy" or not gpus_known, idle,
            len(model["gpus"]), max((g["utilization"] for g in model["gpus"]), default=0),
            model["connections"] or 0, model["suspendable"], int((last or {}).get("bytes_total") or 0),
            self.group_of(kernel_id), provisioner.demand_pool if provisioner else "",
            tuple(self.registry.watcher.gaps.get(kernel_id, ())), warned, model["parked_for"], age,
            user_gaps=tuple(self.registry.watcher.user_gaps))

    async def demand(self, kernel_ids: list[str]) -> dict[str, Demand]:
        """The GPU requests waiting in each pool that these kernels' GPUs could serve."""
        found: dict[str, Demand] = {}
        for kernel_id in kernel_ids:
            provisioner = self.registry.provisioner(kernel_id) if kernel_id in self.registry.kernel_manager else None
            if provisioner is None or provisioner.demand_pool in found:
                continue
            pool = provisioner.demand_pool
            try:
                found[pool] = await provisioner.demand()
            except Exception as e:  # Slurm down, say: the pool's kernels are decided with nobody waiting
                self.faults.failed("demand", pool, e)
                found[pool] = Demand()
            else:
                self.faults.worked("demand", pool)
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
            provisioner = self.registry.provisioner(kernel_id) if kernel_id in self.registry.kernel_manager else None
            if provisioner is None or type(provisioner) in asked:
                continue
            asked.add(type(provisioner))
            placement = type(provisioner).__name__
            try:
                reported = await provisioner.group_gpus() or {}
            except Exception as e:  # this server's own count stands
                self.faults.failed("groups", placement, e)
                reported = {}
            else:
                self.faults.worked("groups", placement)
            for group, gpus in reported.items():
                held[group] = max(held.get(group, 0), gpus)
        return held

    async def run_pass(self) -> list[policy.Decision]:
        """Decide for every kernel, keep each decision on its record (the model's ``policy``),
        and act on them, the kernels side by side.

        Each source fails alone: a kernel that cannot be looked at is left out, a pool whose
        waiting requests cannot be read has none this pass, a failed action is the kernel's
        alone. A kernel whose GPUs could not be read (NVML failed or hung) counts as busy:
        it may still be checkpointed, never suspended on figures that are not fresh.
        """
        now = policy.now()
        readings = await GPUPool.instance().readings()
        if readings.error is None:
            self.faults.worked("gpus")
        else:
            self.faults.failed("gpus", "", readings.error)
        kernel_ids = list(self.registry.kernel_manager.list_kernel_ids())
        views: list[policy.KernelView] = []
        policies: dict[str, policy.Policy] = {}
        blind: set[str] = set()  # kernels on GPUs whose figures are not fresh
        for kernel_id in kernel_ids:
            try:
                model = self.registry.model_with(kernel_id, readings.gpus)
                known = not readings.stale.intersection(g["uuid"] for g in model["gpus"])
                policies[kernel_id] = self.policy_for(kernel_id)
                views.append(self.view(kernel_id, model, now, gpus_known=known))
            except Exception as e:  # a kernel shut down meanwhile, say: the others are still decided
                policies.pop(kernel_id, None)
                self.faults.failed("kernel", kernel_id, e)
                continue
            self.faults.worked("kernel", kernel_id)
            if not known and model["execution_state"] != "busy":
                blind.add(kernel_id)
        demand = await self.demand([v.kernel_id for v in views])
        floors = policy.Floors(self.floors, await self.held(kernel_ids, views) if self.floors else {})
        decisions = [policy.Decision(d.kernel_id, None, f"kept: its GPU use is unknown ({readings.problem})")
                     if d.kernel_id in blind and d.action is None else d
                     for d in policy.plan(policies.__getitem__, views, demand, floors, now)]
        await asyncio.gather(*(self._act(d, now) for d in decisions))
        self.faults.retain(kernel_ids)
        return decisions

    async def _act(self, decision: policy.Decision, now: float) -> None:
        kernel_id = decision.kernel_id
        record = self.registry.records.get(kernel_id)
        if record is None:
            return
        if decision.action is None and record.state in AWAY and \
                record.decision is not None and record.decision.action in ("suspend", "convert"):
            return  # the model keeps why the policy suspended it, until it runs again
        record.decision = decision.note
        try:
            if decision.action == "warn":
                record.warned_at = now
                self._announce(decision)
            elif decision.action == "suspend":
                self._announce(decision)
                await self.operations.suspend(kernel_id, reason="policy")
                record.warned_at = None
            elif decision.action == "checkpoint":
                await self.operations.checkpoint(kernel_id, reason="periodic")
            elif decision.action == "convert":
                await self.operations.convert(kernel_id, reason="policy")
        except Exception as e:  # the kernel's alone: the others' actions go on
            self.faults.failed("action", kernel_id, e, f"the policy's {decision.action} of kernel {kernel_id}")
        else:
            if decision.action is not None:
                self.faults.worked("action", kernel_id)

    def _announce(self, decision: policy.Decision) -> None:
        self.emit("policy", {"kernel_id": decision.kernel_id, "action": decision.action, "reason": decision.reason,
                             "due_in": decision.due_in, "for_demand": decision.for_demand})

    async def keep(self, kernel_id: str) -> dict[str, Any]:
        """The user chose "Keep running": it counts as activity, so the warned suspend is off
        and the idle time starts again. Returns the kernel's model."""
        record = self.registry.record(kernel_id)
        activity.touch(self.registry.km(kernel_id))
        record.warned_at = None
        reason = "the user chose Keep running"
        record.decision = policy.Decision(kernel_id, None, f"kept: {reason}").note
        self.emit("policy", {"kernel_id": kernel_id, "action": "kept", "reason": reason, "due_in": None,
                             "for_demand": False})
        return await self.registry.model(kernel_id)
