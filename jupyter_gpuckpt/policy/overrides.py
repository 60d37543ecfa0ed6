"""What a kernelspec may change of the admin's policy: a kernelspec's ``metadata.gpuckpt``
applies setting by setting, each only where it is at least as tight as the server's
(:data:`TIGHTER`), unless the admin lets users loosen it (``GPUCheckpointApp.user_overridable``).
Users can install kernelspecs of their own, so without this rule any of them could exempt
their kernels from the policy a hub's admin set for everyone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields, replace
from typing import Any

from .decisions import POLICY_FIELDS, RECLAIM_MODES, Policy


def _limit(seconds: float) -> float:
    """A timeout (or count) as a limit: 0 or less is none at all, the loosest."""
    return seconds if seconds > 0 else math.inf


def _cpu_limit(p: Policy) -> float:
    return _limit(p.idle_timeout if p.cpu_idle_timeout < 0 else p.cpu_idle_timeout)


TIGHTER: dict[str, tuple[str, Callable[[Policy, Policy], bool]]] = {
    # setting: (what a kernelspec may set it to unless the admin allows more, test(theirs, admin's))
    "idle_timeout": ("lower (not to 0)", lambda p, a: _limit(p.idle_timeout) <= _limit(a.idle_timeout)),
    "cpu_idle_timeout": ("lower (not to 0; below 0 is idle_timeout)", lambda p, a: _cpu_limit(p) <= _cpu_limit(a)),
    "gpu_utilization_threshold": ("higher", lambda p, a: p.gpu_utilization_threshold >= a.gpu_utilization_threshold),
    "suspend_connected": ("to true", lambda p, a: p.suspend_connected or not a.suspend_connected),
    "checkpoint_interval": ("to the server's value", lambda p, a: p.checkpoint_interval == a.checkpoint_interval),
    "keep_checkpoints": ("lower (not to 0: all)",
                         lambda p, a: _limit(p.keep_checkpoints) <= _limit(a.keep_checkpoints)),
    "exempt": ("to false", lambda p, a: not p.exempt or a.exempt),
    "release_mode": ('to "suspend"', lambda p, a: p.release_mode in (a.release_mode, "suspend")),
    "park_timeout": ("lower (not to 0)", lambda p, a: _limit(p.park_timeout) <= _limit(a.park_timeout)),
    "reclaim": ('to "both"', lambda p, a: p.reclaim in (a.reclaim, "both")),
    "demand_idle": ("lower", lambda p, a: p.demand_idle <= a.demand_idle),
    "rhythm": ("to true", lambda p, a: p.rhythm or not a.rhythm),
    "rhythm_wait_cost": ("lower", lambda p, a: p.rhythm_wait_cost <= a.rhythm_wait_cost),
    "rhythm_min": ("lower", lambda p, a: p.rhythm_min <= a.rhythm_min),
    "rhythm_gaps": ("lower", lambda p, a: p.rhythm_gaps <= a.rhythm_gaps),
    "warn_before": ("lower", lambda p, a: p.warn_before <= a.warn_before),
    "resume_on_return": ("to false", lambda p, a: not p.resume_on_return or a.resume_on_return),
    "wait_budget": ("higher", lambda p, a: p.wait_budget >= a.wait_budget),
}
"""When a kernelspec's value of a policy setting is at least as tight as the admin's: it
suspends no later, frees at least as much, keeps no more in the shared store. "Not to 0":
0 means never (or all), the loosest of all. ``rhythm`` only ever shortens the idle limit (it is capped
at ``idle_timeout``), so turning it on is tighter; ``resume_on_return`` takes GPUs back before a
cell asks for them, so turning it off is. ``reclaim``: "both" does all that "idle"
and "on_demand" do; those two differ in kind. ``checkpoint_interval`` has no tighter side
(fewer checkpoints save the store, more save the user's work): the admin's value only.

.. versionadded:: 0.2
"""

_CHOICES = {"reclaim": RECLAIM_MODES, "release_mode": ("park", "suspend")}


def _typed(name: str, value: Any) -> Any:
    """``value`` (from JSON) as setting ``name``'s type; ValueError if it is not one."""
    kind = next(str(f.type) for f in fields(Policy) if f.name == name)
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "float" and number:
        return float(value)
    if kind == "int" and number and float(value).is_integer():
        return int(value)
    if kind == "str" and value in _CHOICES.get(name, (value,)):
        return value
    wanted = {"bool": "true or false", "float": "a number", "int": "a whole number"}.get(kind)
    wanted = wanted or " or ".join(map(json.dumps, _CHOICES.get(name, ())))
    raise ValueError(f"{json.dumps(value, default=repr)} is not {wanted}")


def overridden(admin: Policy, metadata: Mapping[str, Any], loosenable: Collection[str] = POLICY_FIELDS,
               member_of: Collection[str] | None = None) -> tuple[Policy, dict[str, str]]:
    """``admin``'s policy with a kernelspec's ``metadata["gpuckpt"]`` applied, and the
    settings refused, each with the reason.

    Each setting is judged alone against ``admin``: its value must have the setting's type
    and make a usable policy, and unless ``loosenable`` names the setting it must be at least
    as tight as the admin's (:data:`TIGHTER`). The ``group`` it names (for the floors) must be
    one the user is in, where ``member_of`` lists them; other keys are left to whoever reads them.

    .. versionadded:: 0.2
    """
    asked = metadata.get("gpuckpt") or {}
    if not isinstance(asked, Mapping):
        return admin, {"gpuckpt": f"metadata.gpuckpt is not an object but {type(asked).__name__}"}
    updates: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for name, value in asked.items():
        if name not in TIGHTER:
            continue
        try:
            candidate = replace(admin, **{name: _typed(name, value)})
        except ValueError as e:
            refused[name] = str(e)
            continue
        rule, tighter = TIGHTER[name]
        problem = candidate.problem()
        if problem is None and name not in loosenable and not tighter(candidate, admin):
            problem = (f"{json.dumps(value)} is looser than the server's {json.dumps(getattr(admin, name))}: "
                       f"a kernelspec may only set it {rule}")
        if problem is None:
            updates[name] = getattr(candidate, name)
        else:
            refused[name] = problem
    group = asked.get("group")
    if group and member_of is not None and str(group) not in member_of:
        refused["group"] = f"{json.dumps(group)} is not a group of this user: the kernel counts in the user's own group"
    return replace(admin, **updates), refused
