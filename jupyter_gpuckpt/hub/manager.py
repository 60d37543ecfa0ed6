"""What the handlers ask for: the kernels a caller may see, and operations on them.

Joins who may see whom (``access.py``), who has servers up (``hub_api.py``) and what those
servers say (``collect.py``). Raises the domain's errors only; ``handlers.py`` answers HTTP.
"""

from __future__ import annotations

from typing import Any

from .access import Reach, reach
from .collect import KernelCollector, ServerReport
from .errors import Forbidden, UnknownUser
from .hub_api import HubAPI, HubUser

ACTIONS = ("suspend", "resume")
_ACTIONS_IN = {"running": ("suspend",), "parked": ("resume",), "suspended": ("resume",)}


def actions_in(state: str) -> tuple[str, ...]:
    """The operations that make sense for a kernel in ``state`` (the page's buttons)."""
    return _ACTIONS_IN.get(state, ())


def _summary(user: str, reports: list[ServerReport]) -> dict[str, Any]:
    mine = [r for r in reports if r.user == user]
    return {
        "user": user,
        "kernels": sum(len(r.kernels) for r in mine),
        "gpus_held": sum(len(k.get("gpus") or ()) for r in mine for k in r.kernels),
        "released_gpus": sum(r.released_gpus for r in mine),
        "released_gpu_hours": sum(r.released_gpu_seconds for r in mine) / 3600,
        "servers": [{"server": r.server, "url": r.url, "error": r.error, "policy": r.policy} for r in mine],
    }


class HubKernelsManager:
    """Every user's GPU kernels, as one caller may see and operate them.

    Parameters
    ----------
    hub
        The hub's API, read with the service's token.
    collector
        Reads and operates user servers.
    """

    def __init__(self, hub: HubAPI, collector: KernelCollector) -> None:
        self.hub = hub
        self.collector = collector

    async def _visible(self, caller: dict[str, Any], name: str | None) -> list[HubUser]:
        """The users with servers up that ``caller`` may see (only ``name``, if given)."""
        allowed = reach(caller)
        if name is not None:
            return [await self._reachable(allowed, name)]
        return [u for u in await self.hub.users() if allowed.covers(u.name, u.groups)]

    async def _reachable(self, allowed: Reach, name: str) -> HubUser:
        """The user ``name`` from the hub, if ``allowed`` covers them; others look unknown."""
        if not allowed.covers(name) and not allowed.needs_groups:
            raise UnknownUser(f"no user {name!r} among those you may see")
        user = await self.hub.user(name)
        if not allowed.covers(user.name, user.groups):
            raise UnknownUser(f"no user {name!r} among those you may see")
        return user

    async def kernels(self, caller: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        """The kernels of every user ``caller`` may see (or of ``name`` alone), a summary per
        user (GPU-hours given back ...), and the servers that could not be read."""
        users = await self._visible(caller, name)
        reports = await self.collector.collect(users)
        return {
            "kernels": [kernel for report in reports for kernel in report.kernels],
            "users": [_summary(user.name, reports) for user in users],
            "errors": [{"user": r.user, "server": r.server, "error": r.error} for r in reports if r.error],
        }

    async def operate(self, caller: dict[str, Any], name: str, kernel_id: str, action: str) -> dict[str, Any]:
        """``suspend`` or ``resume`` a kernel of user ``name`` for ``caller``, waiting for the result.

        Raises :class:`UnknownUser` if the caller may not see ``name``, :class:`Forbidden` if
        they may see but not manage them, and the collector's errors.
        """
        user = await self._reachable(reach(caller), name)
        if not reach(caller, manage=True).covers(user.name, user.groups):
            raise Forbidden(f"you may see {user.name}'s kernels but not suspend or resume them "
                            "(custom:gpuckpt:manage)")
        return await self.collector.operate(user, kernel_id, action)

    async def reports(self, caller: dict[str, Any]) -> list[ServerReport]:
        """The servers' reports for the metrics: every user ``caller`` may see."""
        return await self.collector.collect(await self._visible(caller, None))
