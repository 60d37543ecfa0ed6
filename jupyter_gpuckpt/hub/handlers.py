"""The service's routes, under its prefix (``/services/gpuckpt/``), every one behind the hub.

Browsers log in through the hub's OAuth (``HubOAuth``: a redirect to the hub, then
``oauth_callback``); API clients and Prometheus send a hub token (``Authorization: token
...``). Either way the hub says who asks and with which scopes; ``manager.py`` decides what
they may see. Domain errors (``errors.py``) become HTTP status codes here and only here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from tornado import web

from .errors import Forbidden, HubServiceError, KernelNotFound, ServerUnavailable, UnknownUser, WrongState
from .manager import ACTIONS, HubKernelsManager, actions_in
from .metrics import exposition

AUTH_RESOURCE = "custom:gpuckpt"
_KERNEL_ID = re.compile(r"[0-9a-fA-F-]{1,64}", re.ASCII)
_STATUS: list[tuple[type[Exception], int]] = [
    (UnknownUser, 404), (KernelNotFound, 404), (Forbidden, 403), (WrongState, 409),
    (ServerUnavailable, 502), (HubServiceError, 500),
]
"""Domain errors, most specific first, and the status each answers."""
T = TypeVar("T")


@contextmanager
def _http_errors() -> Iterator[None]:
    try:
        yield
    except HubServiceError as e:
        code = next(code for kind, code in _STATUS if isinstance(e, kind))
        raise web.HTTPError(code, str(e)) from e


def checked_kernel_id(kernel_id: str) -> str:
    """A kernel id from a request, or 400: it goes into a user server's URL."""
    if not _KERNEL_ID.fullmatch(kernel_id):
        raise web.HTTPError(400, "not a kernel id (hex digits and dashes)")
    return kernel_id


class HubServiceHandler(HubOAuthenticated, web.RequestHandler):  # type: ignore[misc]
    """Base: the hub's OAuth for authentication, the manager for everything else."""

    auth_resource = AUTH_RESOURCE

    def initialize(self) -> None:
        self.hub_auth = self.settings["hub_auth"]

    def check_xsrf_cookie(self) -> None:
        """Tornado checks XSRF before authenticating; find out first whether a token (which
        needs no XSRF check) or the OAuth cookie (which does) authenticates the request."""
        _ = self.current_user
        super().check_xsrf_cookie()

    @property
    def manager(self) -> HubKernelsManager:
        manager: HubKernelsManager = self.settings["gpuckpt_manager"]
        return manager

    @property
    def caller(self) -> dict[str, Any]:
        """The hub's model of who asks (set once ``web.authenticated`` passed)."""
        model: dict[str, Any] = self.current_user
        return model

    async def domain(self, work: Callable[[], Awaitable[T]]) -> T:
        with _http_errors():
            return await work()


class APIHandler(HubServiceHandler):
    """JSON in and out; no login redirect, a 403 instead, and errors as ``{"message": ...}``."""

    def get_login_url(self) -> str:
        raise web.HTTPError(403, "log in to the hub, or send a hub token with access to this service")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json")
        error = kwargs.get("exc_info", (None, None))[1]
        message = error.log_message if isinstance(error, web.HTTPError) and error.log_message else self._reason
        self.finish(json.dumps({"message": message}))

    def answer(self, result: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(result))


class KernelsAPIHandler(APIHandler):
    """``GET api/kernels``: the kernels of everyone the caller may see, and per-user figures."""

    @web.authenticated
    async def get(self) -> None:
        self.answer(await self.domain(lambda: self.manager.kernels(self.caller)))


class UserKernelsAPIHandler(APIHandler):
    """``GET api/users/{user}/kernels``: one user's; 404 for a user the caller may not see."""

    @web.authenticated
    async def get(self, user: str) -> None:
        self.answer(await self.domain(lambda: self.manager.kernels(self.caller, user)))


class KernelActionAPIHandler(APIHandler):
    """``POST api/users/{user}/kernels/{id}/suspend|resume``: waits for the result."""

    @web.authenticated
    async def post(self, user: str, kernel_id: str, action: str) -> None:
        kernel_id = checked_kernel_id(kernel_id)
        self.answer(await self.domain(lambda: self.manager.operate(self.caller, user, kernel_id, action)))


class PageHandler(HubServiceHandler):
    """The page: every kernel the caller may see, with the buttons its state allows, and the
    policy each server applies."""

    @web.authenticated
    async def get(self) -> None:
        view = await self.domain(lambda: self.manager.kernels(self.caller))
        self.render("kernels.html", caller=self.caller, actions_in=actions_in, **view)


class PageActionHandler(HubServiceHandler):
    """The page's buttons (a form post, XSRF-checked): operate, then back to the page."""

    @web.authenticated
    async def post(self, user: str, kernel_id: str, action: str) -> None:
        kernel_id = checked_kernel_id(kernel_id)
        await self.domain(lambda: self.manager.operate(self.caller, user, kernel_id, action))
        self.redirect(self.settings["service_prefix"], status=303)


class MetricsHandler(APIHandler):
    """``GET metrics``: Prometheus' text format, for the users the scraper's token may see."""

    @web.authenticated
    async def get(self) -> None:
        reports = await self.domain(lambda: self.manager.reports(self.caller))
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.finish(exposition(reports))


class OAuthCallbackHandler(HubOAuthCallbackHandler):  # type: ignore[misc]
    """The end of the hub's OAuth login (JupyterHub's own handler, given our ``HubOAuth``)."""

    def initialize(self) -> None:
        self.hub_auth = self.settings["hub_auth"]


def routes(prefix: str) -> list[tuple[str, type[web.RequestHandler]]]:
    """The route table under the service's prefix (ending in ``/``)."""
    user, kid, action = r"(?P<user>[^/]+)", r"(?P<kernel_id>[^/]+)", rf"(?P<action>{'|'.join(ACTIONS)})"
    return [
        (prefix, PageHandler),
        (f"{prefix}oauth_callback", OAuthCallbackHandler),
        (f"{prefix}users/{user}/kernels/{kid}/{action}", PageActionHandler),
        (f"{prefix}api/kernels", KernelsAPIHandler),
        (f"{prefix}api/users/{user}/kernels", UserKernelsAPIHandler),
        (f"{prefix}api/users/{user}/kernels/{kid}/{action}", KernelActionAPIHandler),
        (f"{prefix}metrics", MetricsHandler),
    ]
