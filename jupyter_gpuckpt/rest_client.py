"""Calls to a Jupyter REST API: a user's server (the CLI, the hub service, the live replay) or
the hub's own. The project's one HTTP client, on tornado's (which jupyter_server and
JupyterHub use): the token, JSON, Jupyter's ``{"message": ...}`` errors, and the XSRF cookie
a server without a token wants on POSTs, in one place. Each caller turns :class:`RestError`
into its own domain's error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode, urljoin

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

_UNREACHABLE = 599
"""tornado's code for no answer at all: a timeout, or no connection."""


class RestError(Exception):
    """A call failed: no answer (``code`` None; ``reason`` says why, in the system's words),
    or an HTTP error (``said``: the server's own message, if it gave one)."""

    def __init__(self, url: str, code: int | None, message: str, said: str | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.url, self.code, self.message, self.said, self.reason = url, code, message, said, reason


@dataclass(frozen=True)
class Answer:
    """What the server answered."""

    url: str
    code: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON (None when empty).

        Raises
        ------
        RestError
            The body is not JSON: not a Jupyter API that answered.
        """
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            raise RestError(self.url, self.code, f"{self.url} did not answer JSON; is this a Jupyter server?") from None

    @property
    def message(self) -> str | None:
        """Jupyter's error message (``{"message": ...}``), if the body is one."""
        try:
            found = json.loads(self.body).get("message")
        except (ValueError, AttributeError):
            return None
        return str(found) if found else None


class RestClient:
    """Calls to the API under ``base_url``, with ``token`` if there is one.

    Parameters
    ----------
    base_url
        The server's base URL (``http://host:8888/user/ana/``), or the hub's API URL.
    token
        Sent as ``Authorization: token ...``; without one, POSTs carry the XSRF cookie.
    timeout
        Seconds a call may take unless it says otherwise (None: no limit).
    name
        What the messages call it (default: ``the Jupyter server at BASE_URL``).
    """

    def __init__(self, base_url: str, token: str | None = None, timeout: float | None = 30.0,
                 name: str | None = None) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.name = name or f"the Jupyter server at {self.base_url}"
        self.token = token
        self.timeout = timeout
        self._client: AsyncHTTPClient | None = None
        self._xsrf: str | None = None

    @property
    def _http(self) -> AsyncHTTPClient:
        """Its own tornado client, made in the event loop of its first call (closed by :meth:`close`)."""
        if self._client is None:
            self._client = AsyncHTTPClient(force_instance=True)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def headers(self) -> dict[str, str]:
        """The authorization every call (a websocket's too) carries."""
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """``path`` under the base URL (a path from the root, ``/user/ana/api``, replaces its path)."""
        return urljoin(self.base_url, path) + (f"?{urlencode(params)}" if params else "")

    async def fetch(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                    body: Any = None, accept: str = "application/json", timeout: float | None = -1.0,
                    errors: bool = True) -> Answer:
        """``method`` on ``path`` (relative to the base URL), ``body`` sent as JSON; the answer.

        Parameters
        ----------
        timeout
            Seconds this call may take (None: no limit; default: the client's).
        errors
            Raise :class:`RestError` for an HTTP error (else it is returned like any answer).

        Raises
        ------
        RestError
            No answer, or (with ``errors``) an HTTP error.
        """
        url = self.url(path, params)
        headers = {"Accept": accept, **self.headers}
        if method != "GET" and not self.token and (xsrf := await self._xsrf_cookie()):
            headers.update({"X-XSRFToken": xsrf, "Cookie": f"_xsrf={xsrf}"})
        data = (json.dumps(body) if body is not None else "") if method in ("POST", "PUT", "PATCH") else None
        limit = self.timeout if timeout == -1.0 else timeout
        request = HTTPRequest(url, method, headers, data, follow_redirects=False,
                              request_timeout=limit if limit is not None else 10 * 365 * 86400.0)
        try:
            response = await self._http.fetch(request, raise_error=False)
        except HTTPClientError as e:  # tornado raises its 599 even without raise_error
            reason = str(e.message or e)
            raise RestError(url, None, f"{self.name} did not answer: {reason}", reason=reason) from None
        except OSError as e:
            reason = str(e.strerror or e)
            raise RestError(url, None, f"cannot reach {self.name}: {reason}", reason=reason) from None
        if response.code == _UNREACHABLE:
            reason = str(response.error)
            raise RestError(url, None, f"{self.name} did not answer: {reason}", reason=reason)
        answer = Answer(url.partition("?")[0], response.code, response.body or b"")
        if errors and response.code >= 400:
            raise RestError(answer.url, response.code, f"{answer.message or response.reason} (HTTP {response.code})",
                            answer.message)
        return answer

    async def json(self, method: str, path: str, **options: Any) -> Any:
        """:meth:`fetch`'s answer as JSON."""
        return (await self.fetch(method, path, **options)).json()

    async def _xsrf_cookie(self) -> str | None:
        """The ``_xsrf`` cookie a server without a token wants echoed on POSTs: any page it
        serves (its login page, even a 404) sets it; a token-authenticated call skips the check."""
        if self._xsrf is None:
            try:
                response = await self._http.fetch(HTTPRequest(self.url("login"), follow_redirects=False),
                                                  raise_error=False)
            except (OSError, HTTPClientError):
                return None  # the call itself reports what is wrong
            cookies: SimpleCookie = SimpleCookie()
            for header in response.headers.get_list("Set-Cookie"):
                cookies.load(header)
            self._xsrf = cookies["_xsrf"].value if "_xsrf" in cookies else None
        return self._xsrf

