"""A real JupyterHub for the hub service's tests: configurable-http-proxy from npm, users'
servers as local processes (SimpleLocalProcessSpawner, everything as this user), each with
the extension and the kernelspec from ``jupyter gpuckpt install-kernelspec``, and the
gpuckpt service registered by ``jupyter_gpuckpt.hub.configure``. All state lives under one
folder; nothing is downloaded while the tests run (CI installs jupyterhub and the proxy)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from live_server import JUPYTER, Server, jupyter_env
from server_fixtures import ws_execute
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

REPO = Path(__file__).resolve().parent.parent
SKIP = "JUPYTER_GPUCKPT_SKIP_HUB"
TESTER_TOKEN = "gpuckpt-hub-tester-token-0123456789"
PASSWORD = "gpuckpt-test-password"
"""Every user's password on the hub's login form (DummyAuthenticator)."""
USERS = ("alice", "bob")
ADMIN = "admin"
KERNEL_NAME = "python3-gpuckpt"


def proxy_command() -> str:
    """configurable-http-proxy: on the PATH, or in the repository's node_modules; else fail
    (or skip, with JUPYTER_GPUCKPT_SKIP_HUB=1) saying how to install it."""
    found = shutil.which("configurable-http-proxy") or next(
        (str(p) for p in [REPO / "node_modules" / ".bin" / "configurable-http-proxy"] if p.exists()), None)
    if found:
        return found
    if os.environ.get(SKIP):
        pytest.skip(f"{SKIP} is set and configurable-http-proxy is not installed")
    pytest.fail("configurable-http-proxy is not installed: `npm install -g configurable-http-proxy` "
                f"(or in this repository: `npm install --no-save configurable-http-proxy`); {SKIP}=1 skips")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclass
class Response:
    code: int
    body: bytes
    headers: Any

    def json(self) -> Any:
        return json.loads(self.body)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass
class Hub:
    url: str
    """The proxy's public address, ``http://127.0.0.1:PORT/``."""
    base: Path

    def request(self, method: str, path: str, token: str | None = None, body: Any = None,
                timeout: float = 120) -> Response:
        """One request through the proxy (redirects are answered, not followed)."""
        headers = {"Authorization": f"token {token}"} if token else {}
        data = None if body is None and method == "GET" else json.dumps(body or {}).encode()
        request = urllib.request.Request(f"{self.url}{path.lstrip('/')}", method=method, headers=headers, data=data)
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                return Response(response.status, response.read(), response.headers)
        except urllib.error.HTTPError as e:
            return Response(e.code, e.read(), e.headers)

    def hub_api(self, method: str, path: str, body: Any = None) -> Any:
        response = self.request(method, f"hub/api/{path}", TESTER_TOKEN, body)
        assert response.code < 300, (response.code, response.body)
        return response.json() if response.body else None

    def token(self, user: str) -> str:
        """A new API token of ``user``, with all of the user's permissions."""
        return str(self.hub_api("POST", f"users/{user}/tokens", {"note": "gpuckpt hub test"})["token"])

    def start_servers(self, *users: str) -> None:
        """Start the users' default servers, all at once, and wait until each is ready."""
        for user in users:
            self.hub_api("POST", f"users/{user}/server")
        deadline = time.monotonic() + 90
        for user in users:
            while not self.hub_api("GET", f"users/{user}")["servers"].get("", {}).get("ready"):
                assert time.monotonic() < deadline, (self.base / "hub.log").read_text()[-5000:]
                time.sleep(0.2)

    def user_server(self, user: str) -> Server:
        """``user``'s server as live_server's helpers drive it (``run`` code in a kernel)."""
        home = self.base / "users" / user
        return Server(f"{self.url}user/{user}/", jupyter_env(home), home / "root", home / "data", home / "runtime")

    def start_kernel(self, user: str, token: str, name: str = KERNEL_NAME) -> str:
        response = self.request("POST", f"user/{user}/api/kernels", token, {"name": name})
        assert response.code == 201, (response.code, response.body)
        return str(response.json()["id"])

    def execute(self, user: str, token: str, kernel_id: str, code: str) -> tuple[dict[str, Any], str]:
        """Run a cell as a notebook does, over the kernel's websocket through the proxy: the
        execute reply, and what the cell printed."""
        async def execute() -> tuple[dict[str, Any], list[dict[str, Any]]]:
            url = self.url.replace("http", "ws", 1) + f"user/{user}/api/kernels/{kernel_id}/channels"
            ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
            try:
                return await ws_execute(ws, code)
            finally:
                ws.close()
                while await asyncio.wait_for(ws.read_message(), 10) is not None:  # until closed: no socket left
                    pass

        reply, iopub = asyncio.run(execute())
        return reply, "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")

    def wait_for_service(self) -> None:
        deadline = time.monotonic() + 60
        while self.request("GET", "services/gpuckpt/api/kernels", TESTER_TOKEN).code in (502, 503, 404):
            assert time.monotonic() < deadline, (self.base / "hub.log").read_text()[-5000:]
            time.sleep(0.2)


def _config(base: Path, public: int, hub: int, proxy_api: int, service: int, users_allowed: tuple[str, ...]) -> str:
    shared = base / "shared"
    users = base / "users"
    return f"""
import sys
from jupyter_gpuckpt.hub import configure

c = get_config()  # noqa
c.JupyterHub.bind_url = "http://127.0.0.1:{public}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub}
c.ConfigurableHTTPProxy.command = [{proxy_command()!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.JupyterHub.db_url = "sqlite:///{base}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{base}/jupyterhub_cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allowed_users = {set(users_allowed)!r}
c.Authenticator.admin_users = {{{ADMIN!r}}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "{users}/{{username}}/root"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--ServerApp.allow_root=True", "--GPUCheckpointApp.policy_interval=3600",
                  "--GPUCheckpointApp.host_memory_limit=0", "--GPUCheckpointApp.release_mode=suspend"]
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}  # POST .../server answers at once: start both
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.Spawner.environment = {{
    "JUPYTER_PATH": "{shared}", "JUPYTER_PLATFORM_DIRS": "1",
    **{{key: (lambda folder: lambda spawner: f"{users}/{{spawner.user.name}}/{{folder}}")(folder)
       for key, folder in (("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                           ("JUPYTER_CONFIG_DIR", "config"), ("IPYTHONDIR", "ipython"))}},
}}
c.JupyterHub.services = [{{"name": "tester", "api_token": {TESTER_TOKEN!r}}}]
configure(c, proxy_url="http://127.0.0.1:{public}", port={service})
c.JupyterHub.load_roles.append({{"name": "tester", "services": ["tester"], "scopes": [
    "admin:users", "admin:servers", "tokens", "access:servers", "access:services", "custom:gpuckpt:manage"]}})
"""


@contextmanager
def running_hub(base: Path, users: tuple[str, ...] = USERS, extra_config: str = "") -> Iterator[Hub]:
    """Start JupyterHub with everything under ``base``; stop it, and every server, on exit.

    ``users``: who may log in (each with Jupyter dirs under ``base/users/NAME``: a test may write
    ``config/jupyter_server_config.json`` there before starting the server); ``extra_config``:
    lines appended to ``jupyterhub_config.py`` (more services and roles, other intervals)."""
    shared = base / "shared"
    (base / "installer").mkdir()
    env = jupyter_env(base / "installer")
    env["JUPYTER_DATA_DIR"] = str(shared)
    subprocess.run([JUPYTER, "gpuckpt", "install-kernelspec", "--user"], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    for user in users:
        for folder in ("data", "runtime", "config", "ipython", "root"):
            (base / "users" / user / folder).mkdir(parents=True, exist_ok=True)
    public, hub_port, proxy_api, service = free_ports(4)
    (base / "jupyterhub_config.py").write_text(_config(base, public, hub_port, proxy_api, service, users)
                                               + extra_config)
    hub_env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_", "CONFIGPROXY"))}
    log = (base / "hub.log").open("a")
    process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(base / "jupyterhub_config.py")],
                               cwd=base, env=hub_env, stdout=log, stderr=subprocess.STDOUT)
    hub = Hub(f"http://127.0.0.1:{public}/", base)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (base / "hub.log").read_text()[-5000:]
            assert time.monotonic() < deadline, (base / "hub.log").read_text()[-5000:]
            try:
                if hub.request("GET", "hub/api/", timeout=2).code == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        hub.wait_for_service()
        yield hub
    finally:
        process.terminate()  # the hub stops its servers (cleanup_servers) and its managed service
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
