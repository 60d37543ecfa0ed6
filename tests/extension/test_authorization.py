"""Every REST route of the extension goes through jupyter_server's authorizer: a user it
denies gets 403 on every method of every route, before anything runs (in the manner of
jupyter_server_terminals' test_auth.py). The routes come from ``default_handlers`` itself, so
a new route without ``@authorized`` fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_gpuckpt.extension.handlers import default_handlers

METHODS = ("get", "post", "put", "patch", "delete")
VALUES = {"kernel_id": "f4ea6ee6-97ff-4de2-9f8f-40895f5364bb", "checkpoint_id": "20261202-220225-74f8ada9"}
"""Ids of the right shape that name nothing: a denied user must learn not even that. Fixed, as
the test ids they make must be the same in every pytest-xdist worker."""


class DenyAll(Authorizer):  # type: ignore[misc]
    """An authorizer that answers no to everything, as a locked-down deployment may."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return False


def _group_values(pattern: str) -> Iterator[dict[str, str]]:
    """The values each named group of ``pattern`` takes: every alternative of an
    ``(?P<name>a|b)`` group, an id of the right shape for the others."""
    choices = {name: body.split("|") if "|" in body else [VALUES[name]]
               for name, body in re.findall(r"\(\?P<(\w+)>([^)]*)\)", pattern)}
    if not choices:
        yield {}
        return
    names = list(choices)
    for name in names:
        for value in choices[name]:
            yield {n: (value if n == name else choices[n][0]) for n in names}


def requests() -> list[tuple[str, str]]:
    """``(method, path)`` for every method of every route."""
    found = []
    for pattern, handler in default_handlers:
        for values in _group_values(pattern):
            path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m, values=values: values[m.group(1)], pattern).lstrip("/")
            found += [(method.upper(), path) for method in METHODS if method in vars(handler)]
    return sorted(set(found))


async def _status(jp_fetch: Any, method: str, path: str) -> int:
    body = b"" if method in ("POST", "PUT", "PATCH") else None
    try:
        response = await jp_fetch(*path.split("/"), method=method, body=body, params={"wait": "1"})
    except HTTPClientError as e:
        return int(e.code)
    return int(response.code)


def test_every_route_and_method_is_listed() -> None:
    listed = requests()
    assert ("POST", f"api/gpuckpt/kernels/{VALUES['kernel_id']}/rebuild") in listed
    assert ("DELETE", f"api/gpuckpt/checkpoints/{VALUES['checkpoint_id']}") in listed
    assert {path.split("/")[2] for _, path in listed} == {"kernels", "checkpoints", "gpus", "policy"}
    assert len(listed) >= len(default_handlers) + 3  # the four actions of the action route


@pytest.fixture
def denied() -> bool:
    return False


@pytest.fixture
def jp_server_config(jp_server_config: Any, denied: bool) -> Any:
    if denied:
        jp_server_config["ServerApp"]["authorizer_class"] = DenyAll
    return jp_server_config


@pytest.mark.parametrize("denied", [True])
@pytest.mark.parametrize(("method", "path"), requests())
async def test_a_denied_user_gets_403_everywhere(jp_fetch: Any, jp_serverapp: Any, denied: bool,
                                                 method: str, path: str) -> None:
    assert await _status(jp_fetch, method, path) == 403


@pytest.mark.parametrize(("method", "path"), requests())
async def test_an_allowed_user_is_not_refused(jp_fetch: Any, jp_serverapp: Any, method: str, path: str) -> None:
    assert await _status(jp_fetch, method, path) in (200, 204, 404)
