"""The hub's REST API, as the service reads it: users, their groups and their servers.

The service's own token (``$JUPYTERHUB_API_TOKEN``) carries its role's scopes:
``list:users`` and ``read:users:name`` (who exists), ``read:users:groups`` (for ``!group=``
filters), ``read:servers`` (each server's URL and readiness). User names taken from requests
reach the hub only URL-quoted, and a user server's address only ever comes from the hub.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from ..rest_client import RestClient, RestError
from .errors import ServerUnavailable, UnknownUser

_PAGINATED = "application/jupyterhub-pagination+json"


@dataclass(frozen=True)
class UserServer:
    """One of a user's servers that is up (``name`` is ``""`` for the default server)."""

    user: str
    name: str
    url: str
    """Where the hub routes it: a path under the proxy (``/user/alice/``), or a full URL
    with subdomains."""
    last_activity: str | None = None


@dataclass(frozen=True)
class HubUser:
    name: str
    groups: tuple[str, ...] = ()
    servers: tuple[UserServer, ...] = field(default=())


def _user(model: dict[str, Any]) -> HubUser:
    servers = tuple(
        UserServer(model["name"], name, server["url"], server.get("last_activity"))
        for name, server in (model.get("servers") or {}).items() if server.get("ready"))
    return HubUser(model["name"], tuple(model.get("groups") or ()), servers)


class HubAPI:
    """Reads users and servers from the hub with the service's token.

    Parameters
    ----------
    api_url
        The hub's API (``$JUPYTERHUB_API_URL``, ``http://127.0.0.1:8081/hub/api``).
    token
        The service's API token.
    timeout
        Seconds one request may take.
    """

    def __init__(self, api_url: str, token: str, timeout: float) -> None:
        self.api_url = api_url.rstrip("/")
        self._client = RestClient(self.api_url, token, timeout, name=f"the hub's API at {self.api_url}")

    async def _get(self, path: str, accept: str = "application/json") -> Any:
        try:
            return await self._client.json("GET", path.lstrip("/"), accept=accept)
        except RestError as e:
            if e.code == 404:
                raise UnknownUser("no such user") from e
            if e.code is None:
                raise ServerUnavailable(f"the hub's API cannot be reached at {self.api_url}: {e.reason}") from e
            raise ServerUnavailable(f"the hub's API answered {e.code} to {path.split('?')[0]}: "
                                    "does the service's role grant list:users, read:servers?") from e

    async def users(self) -> list[HubUser]:
        """Every user with at least one server up, page by page."""
        found: list[HubUser] = []
        offset: int | None = 0
        while offset is not None:
            page = await self._get(f"/users?{urlencode({'state': 'ready', 'offset': offset})}", _PAGINATED)
            if isinstance(page, list):  # a hub older than pagination answers everything at once
                return [_user(model) for model in page]
            found.extend(_user(model) for model in page["items"])
            following = (page.get("_pagination") or {}).get("next")
            offset = following["offset"] if following else None
        return found

    async def user(self, name: str) -> HubUser:
        """One user, by a name that came from a request (:class:`UnknownUser` if none)."""
        if not name or len(name) > 255:
            raise UnknownUser("no such user")
        return _user(await self._get(f"/users/{quote(name, safe='')}"))
