"""Whose kernels a hub user (or service) may see and operate: from the hub's own answer.

The hub says who is asking and with which scopes (``HubOAuth``'s user model). Two custom
scopes, defined by :func:`~.hub_config.configure`, carry the service's permissions and can
be filtered like any JupyterHub scope:

- ``custom:gpuckpt:read`` — see kernels; ``!user=NAME`` or ``!group=NAME`` narrows it.
- ``custom:gpuckpt:manage`` — suspend and resume them too (it includes ``read``).

Hub admins (``admin`` in the model) reach everyone (the hub's ``admin`` role cannot be given
custom scopes), and a user always sees their own kernels; operating them takes
``custom:gpuckpt:manage!user``, which ``configure`` gives the ``user`` role by default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

READ_SCOPE = "custom:gpuckpt:read"
MANAGE_SCOPE = "custom:gpuckpt:manage"


@dataclass(frozen=True)
class Reach:
    """The users one caller may see (or operate): everyone, or named users and groups."""

    everyone: bool = False
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def covers(self, user: str, groups: Iterable[str] = ()) -> bool:
        return self.everyone or user in self.users or not self.groups.isdisjoint(groups)

    @property
    def needs_groups(self) -> bool:
        """Whether :meth:`covers` must know users' groups (a ``!group=`` filter)."""
        return not self.everyone and bool(self.groups)


def reach(model: dict[str, Any], *, manage: bool = False) -> Reach:
    """Whom the caller described by the hub's ``model`` may see (``manage``: operate).

    Parameters
    ----------
    model
        The user or service model ``HubOAuth`` returns: ``name``, ``kind``, ``admin``,
        ``scopes`` (expanded, as the hub resolves them for the caller's token).
    manage
        Reach for suspend and resume rather than for reading.
    """
    if model.get("admin"):
        return Reach(everyone=True)
    wanted = (MANAGE_SCOPE,) if manage else (READ_SCOPE, MANAGE_SCOPE)
    own = not manage and model.get("kind", "user") == "user"
    users: set[str] = {model["name"]} if own else set()
    groups: set[str] = set()
    for scope in model.get("scopes", []):
        base, _, where = str(scope).partition("!")
        if base not in wanted:
            continue
        if not where:
            return Reach(everyone=True)
        kind, _, name = where.partition("=")
        if kind == "user":
            users.add(name)
        elif kind == "group":
            groups.add(name)
    return Reach(users=frozenset(users), groups=frozenset(groups))
