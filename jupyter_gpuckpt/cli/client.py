"""The CLI's side of the REST API: find a running Jupyter server and call ``/api/gpuckpt/...``.

A server is found as ``jupyter server list`` finds it (its info file in the Jupyter runtime
dir), or named with ``--url`` and ``--token`` (defaults: ``$JUPYTER_GPUCKPT_URL``,
``$JUPYTER_TOKEN``). A found server's own token, from its info file, comes before
``$JUPYTER_TOKEN``: that is the token it accepts, and the variable may be another server's.
Every failure becomes a :class:`CLIError` whose message is the one line the user reads.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..rest_client import RestClient, RestError

URL_ENV = "JUPYTER_GPUCKPT_URL"
TOKEN_ENV = "JUPYTER_TOKEN"
_UUID_LENGTH = 36


class CLIError(Exception):
    """A failure the command line reports as one line, without a traceback."""


@dataclass(frozen=True)
class Server:
    """Where a Jupyter server answers (base URL, ending in ``/``) and its token."""

    url: str
    token: str


def _normalized(url: str) -> str:
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    return url if url.endswith("/") else f"{url}/"


def _root_dir(info: dict[str, Any]) -> Path | None:
    root = info.get("root_dir") or info.get("notebook_dir")
    return Path(root).resolve() if root else None


def _pick(running: list[dict[str, Any]], cwd: Path) -> dict[str, Any]:
    """The only server, else the one whose root dir holds ``cwd`` most closely."""
    if len(running) == 1:
        return running[0]
    holding = [(len(root.parts), info) for info in running
               if (root := _root_dir(info)) is not None and cwd.is_relative_to(root)]
    deepest = max((depth for depth, _ in holding), default=None)
    chosen = [info for depth, info in holding if depth == deepest]
    if len(chosen) == 1:
        return chosen[0]
    urls = ", ".join(sorted(str(info.get("url")) for info in running))
    raise CLIError(f"{len(running)} Jupyter servers are running ({urls}); choose one with --url")


def _running_servers() -> list[dict[str, Any]]:
    # Imported here: jupyter_server.serverapp takes seconds to import, and --url with
    # --token needs none of it.
    from jupyter_server.serverapp import list_running_servers

    return list(list_running_servers())


def find_server(url: str | None = None, token: str | None = None, cwd: Path | None = None) -> Server:
    """The server to talk to.

    Parameters
    ----------
    url, token
        Explicit choices (``--url``, ``--token``). Without a URL, ``$JUPYTER_GPUCKPT_URL``,
        else a running server's info file; without a token, the found server's, else
        ``$JUPYTER_TOKEN`` (the other way round for a URL given explicitly).
    cwd
        Picks among several running servers; defaults to the current directory.
    """
    url = url or os.environ.get(URL_ENV) or None
    env_token = os.environ.get(TOKEN_ENV)
    if url:
        url = _normalized(url)
        token = token if token is not None else env_token
        if token is not None:
            return Server(url, token)
        known = next((info for info in _running_servers() if _normalized(str(info.get("url", ""))) == url), {})
        return Server(url, str(known.get("token", "")))
    running = _running_servers()
    if not running:
        raise CLIError("no running Jupyter server found (start one, or pass --url and --token)")
    info = _pick(running, (cwd or Path.cwd()).resolve())
    # A found server's own token beats $JUPYTER_TOKEN, which may belong to another server.
    token = token if token is not None else str(info.get("token") or env_token or "")
    return Server(_normalized(str(info["url"])), token)


def _error_message(error: RestError) -> str:
    if error.code is None:
        return error.message
    if error.code == 403 and error.said in (None, "Forbidden"):
        return "the server refused the request (HTTP 403): check --token or $JUPYTER_TOKEN"
    if error.code == 404 and error.said in (None, "Not Found"):
        return f"{error.url} was not found (HTTP 404): is the jupyter_gpuckpt extension enabled on the server?"
    return error.message


class GPUCheckpointClient:
    """Calls the extension's REST API on one server.

    Parameters
    ----------
    server
        Where to send requests.
    timeout
        Seconds to wait for an answer to a quick request; operations that wait for their
        result (``?wait=1``) wait as long as the server takes.
    """

    def __init__(self, server: Server, timeout: float = 30.0) -> None:
        self.server = server
        self.timeout = timeout

    def request(self, method: str, path: str, *, timeout: float | None = None, **params: str) -> Any:
        """``method`` on ``api/gpuckpt/<path>``; the decoded JSON answer."""
        return self._call(method, f"api/gpuckpt/{path}", timeout, params)

    def _call(self, method: str, path: str, timeout: float | None, params: dict[str, str]) -> Any:
        async def calling() -> Any:
            client = RestClient(self.server.url, self.server.token or None, timeout)
            try:
                return await client.json(method, path, params=params or None)
            finally:
                client.close()

        try:
            return asyncio.run(calling())
        except RestError as e:
            raise CLIError(_error_message(e)) from None

    def get(self, path: str) -> Any:
        return self.request("GET", path, timeout=self.timeout)

    def kernels(self) -> list[dict[str, Any]]:
        return list(self.get("kernels"))

    def notebooks(self) -> dict[str, str]:
        """Kernel id -> the paths of the notebooks (consoles, files) whose sessions use it, as
        jupyter_server's ``/api/sessions`` has them: the names the user knows the kernels by."""
        paths: dict[str, list[str]] = {}
        for session in self._call("GET", "api/sessions", self.timeout, {}):
            if session.get("kernel"):
                paths.setdefault(str(session["kernel"]["id"]), []).append(str(session.get("path") or "-"))
        return {kernel_id: ", ".join(sorted(found)) for kernel_id, found in paths.items()}

    def kernel(self, kernel_id: str) -> dict[str, Any]:
        return dict(self.get(f"kernels/{quote(kernel_id, safe='')}"))

    def checkpoints(self, kernel_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"kernels/{quote(kernel_id, safe='')}/checkpoints"))

    def act(self, kernel_id: str, action: str, wait: bool = True, mode: str | None = None) -> dict[str, Any]:
        """POST ``checkpoint``, ``suspend`` (``mode``: ``park`` or ``suspend``) or ``resume``;
        with ``wait`` the finished model."""
        path = f"kernels/{quote(kernel_id, safe='')}/{action}"
        options = {"mode": mode} if mode else {}
        if wait:
            return dict(self.request("POST", path, timeout=None, wait="1", **options))
        return dict(self.request("POST", path, timeout=self.timeout, **options))

    def resolve(self, kernel_id: str) -> str:
        """A full kernel id from a unique prefix of one; anything else goes to the server as is."""
        if not kernel_id:
            raise CLIError("the kernel id is empty")
        if len(kernel_id) >= _UUID_LENGTH:
            return kernel_id
        matches = [k["id"] for k in self.kernels() if str(k["id"]).startswith(kernel_id)]
        if len(matches) > 1:
            raise CLIError(f"{kernel_id!r} matches {len(matches)} kernels: {', '.join(matches)}")
        return str(matches[0]) if matches else kernel_id
