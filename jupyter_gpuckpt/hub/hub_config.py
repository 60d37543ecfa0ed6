"""Registering the service in ``jupyterhub_config.py``: the service, its role, its scopes.

::

    from jupyter_gpuckpt.hub import configure
    configure(c, proxy_url="http://127.0.0.1:8000")

is the whole setup: the hub then starts ``python -m jupyter_gpuckpt.hub`` itself (a
managed service) and lists it on its Services menu. Roles already in ``c.JupyterHub.load_roles``
are extended, not replaced.
"""

from __future__ import annotations

import sys
from typing import Any

from .access import MANAGE_SCOPE, READ_SCOPE

SERVICE_NAME = "gpuckpt"
SERVICE_SCOPES = ["list:users", "read:users:name", "read:users:groups", "read:servers", "access:servers"]
"""The service's own role: find users and their servers up, and call those servers' API."""
CUSTOM_SCOPES = {
    READ_SCOPE: {"description": "See GPU kernels in the gpuckpt service (filter: !user=, !group=)."},
    MANAGE_SCOPE: {"description": "Suspend and resume GPU kernels in the gpuckpt service.",
                   "subscopes": [READ_SCOPE]},
}


def _role(config: Any, name: str, scopes: list[str], **members: list[str]) -> None:
    """Add ``scopes`` (and members) to the role ``name`` in ``load_roles``, creating it if needed."""
    roles = list(config.JupyterHub.load_roles) if "load_roles" in config.JupyterHub else []
    role = next((r for r in roles if r["name"] == name), None)
    if role is None:
        role = {"name": name, "scopes": ["self"] if name == "user" else []}
        roles.append(role)
    role["scopes"] = [*role.get("scopes", []), *(s for s in scopes if s not in role.get("scopes", []))]
    for kind, names in members.items():
        role[kind] = [*role.get(kind, []), *(n for n in names if n not in role.get(kind, []))]
    config.JupyterHub.load_roles = roles


def configure(config: Any, *, proxy_url: str = "", port: int = 10101, users_manage_own: bool = True,
              environment: dict[str, str] | None = None) -> None:
    """Register the gpuckpt service in a hub's config.

    Parameters
    ----------
    config
        The ``c`` of ``jupyterhub_config.py``.
    proxy_url
        The hub's public address as the service reaches it (default: the service's own).
    port
        Where the service listens, on 127.0.0.1 (the proxy routes ``/services/gpuckpt/`` there).
    users_manage_own
        Users may suspend and resume their own kernels from the service's page (they always see
        them); hub admins see and operate everyone's.
    environment
        More environment for the service's process.
    """
    command = [sys.executable, "-m", "jupyter_gpuckpt.hub", *([f"--proxy-url={proxy_url}"] if proxy_url else [])]
    services = list(config.JupyterHub.services) if "services" in config.JupyterHub else []
    services.append({
        "name": SERVICE_NAME, "url": f"http://127.0.0.1:{port}", "command": command, "display": True,
        "environment": dict(environment or {}),
        # what a user's login token for the service may carry: their reach in it, no more
        "oauth_client_allowed_scopes": [READ_SCOPE, MANAGE_SCOPE],
    })
    config.JupyterHub.services = services
    custom = dict(config.JupyterHub.custom_scopes) if "custom_scopes" in config.JupyterHub else {}
    config.JupyterHub.custom_scopes = {**custom, **CUSTOM_SCOPES}
    _role(config, "gpuckpt-service", SERVICE_SCOPES, services=[SERVICE_NAME])
    own = f"{MANAGE_SCOPE if users_manage_own else READ_SCOPE}!user"
    _role(config, "user", [f"access:services!service={SERVICE_NAME}", own])
