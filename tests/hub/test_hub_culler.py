"""Behind JupyterHub a stopped server loses no kernel: jupyterhub-idle-culler (the real one,
a service the hub runs with its role) stops idle users' servers, whose kernels the policy had
suspended or which ``suspend_on_stop`` suspends as the server stops; so does a server the hub
API stops. Started again (as a login does), the user's server lists each kernel suspended,
with its id and notebook, and the notebook's next cell resumes it with its state."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_fixtures import KERNEL_NAME, Hub, running_hub
from server_fixtures import run, start_kernel

from jupyter_gpuckpt.extension.app import GPUCheckpointApp

POLICY_USER = "carol"
"""Idle 3 s, the policy suspends her kernel; then the culler stops her server."""
IDLE_USER = "erin"
"""No idle policy: her kernel runs, idle, until the culler stops her server."""
STOPPED_USER = "dave"
"""Never culled: the hub API stops his server."""
USERS = (POLICY_USER, IDLE_USER, STOPPED_USER)
CULL_TIMEOUT = 3


def _extra_config(base: Path) -> str:
    """The culler as a managed service with the role it needs; activity reported every second.
    It culls only the servers listed in ``cull-these`` (so that nothing is culled while a test
    sets up, and the stopped user's server never is), through its ``cull_arbiter_hook``."""
    culler = base / "culler"
    culler.mkdir()
    (culler / "idle_culler_config.py").write_text(f"""
from pathlib import Path

def cull_listed(inactive, inactive_limit, server, **kwargs):
    listed = Path({str(culler / "cull-these")!r})
    return listed.exists() and server["url"] in listed.read_text().split() and \\
        inactive.total_seconds() >= inactive_limit

c.IdleCuller.cull_arbiter_hook = cull_listed
""")
    return f"""
c.JupyterHub.services.append({{
    "name": "idle-culler", "cwd": {str(culler)!r},
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", "--timeout={CULL_TIMEOUT}", "--cull-every=1"],
}})
c.JupyterHub.load_roles.append({{"name": "idle-culler", "services": ["idle-culler"],
                                 "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}})
c.JupyterHub.last_activity_interval = 1  # the hub reads the proxy's activity every second
c.Spawner.environment["JUPYTERHUB_ACTIVITY_INTERVAL"] = "1"  # the servers report theirs every second
c.Spawner.args = [a for a in c.Spawner.args if "policy_interval" not in a] + ["--GPUCheckpointApp.policy_interval=1"]
"""


class Setup:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.tokens = {user: hub.token(user) for user in USERS}
        self.kernels: dict[str, str] = {}

    def user_api(self, user: str, method: str, path: str, body: Any = None) -> Any:
        response = self.hub.request(method, f"user/{user}/api/{path}", self.tokens[user], body)
        assert response.code < 300, (response.code, response.body)
        return response.json() if response.body else None

    def kernel(self, user: str) -> dict[str, Any]:
        return dict(self.user_api(user, "GET", f"gpuckpt/kernels/{self.kernels[user]}"))

    def open_notebook(self, user: str) -> None:
        """The user opens analysis.ipynb (a session, its kernel started) and runs ``x = 41``."""
        session = self.user_api(user, "POST", "sessions", {"path": "analysis.ipynb", "name": "analysis.ipynb",
                                                           "type": "notebook", "kernel": {"name": KERNEL_NAME}})
        self.kernels[user] = session["kernel"]["id"]
        self.hub.user_server(user).run(self.kernels[user], "x = 41")

    def server_up(self, user: str) -> bool:
        return "" in self.hub.hub_api("GET", f"users/{user}")["servers"]

    def wait_until_stopped(self, *users: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while any(self.server_up(user) for user in users):
            assert time.monotonic() < deadline, (self.hub.base / "hub.log").read_text()[-6000:]
            time.sleep(0.3)

    def log_in(self, *users: str) -> None:
        """What a login does: the user's own request starts their server; then wait for it."""
        for user in users:
            response = self.hub.request("POST", f"hub/api/users/{user}/server", self.tokens[user])
            assert response.code in (201, 202), (response.code, response.body)
        deadline = time.monotonic() + 90
        for user in users:
            while not self.hub.hub_api("GET", f"users/{user}")["servers"].get("", {}).get("ready"):
                assert time.monotonic() < deadline, (self.hub.base / "hub.log").read_text()[-6000:]
                time.sleep(0.2)

    def assert_comes_back(self, user: str) -> None:
        """The kernel is listed suspended (same id, same notebook) and its next cell resumes it
        with its state."""
        kernel_id = self.kernels[user]
        deadline = time.monotonic() + 30
        while kernel_id not in {k["id"] for k in self.user_api(user, "GET", "gpuckpt/kernels")}:
            assert time.monotonic() < deadline, f"{user}'s kernel was not registered again"
            time.sleep(0.2)
        model = self.kernel(user)
        assert model["state"] == "suspended" and model["last_checkpoint"]["durability"] == "durable", model
        sessions = {s["kernel"]["id"]: s["path"] for s in self.user_api(user, "GET", "sessions")}
        assert sessions == {kernel_id: "analysis.ipynb"}
        reply, printed = self.hub.execute(user, self.tokens[user], kernel_id, "print(x + 1)")
        assert reply["content"]["status"] == "ok", reply["content"]
        assert printed.strip() == "42"
        assert self.kernel(user)["state"] == "running"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base: Path = tmp_path_factory.mktemp("hub-culler")
    with running_hub(base, users=USERS, extra_config=_extra_config(base)) as hub:
        # only carol's kernels are suspended when idle
        (base / "users" / POLICY_USER / "config" / "jupyter_server_config.json").write_text(
            json.dumps({"GPUCheckpointApp": {"idle_timeout": 3, "warn_before": 0}}))
        setup = Setup(hub)
        hub.start_servers(*USERS)
        yield setup


def test_culled_servers_lose_no_kernel(setup: Setup) -> None:
    started = time.monotonic()
    for user in (POLICY_USER, IDLE_USER):
        setup.open_notebook(user)
    deadline = time.monotonic() + 60
    while setup.kernel(POLICY_USER)["state"] != "suspended":  # the policy suspends carol's idle kernel
        assert time.monotonic() < deadline, setup.kernel(POLICY_USER)
        time.sleep(0.5)
    assert setup.kernel(IDLE_USER)["state"] == "running"
    print(f"kernels ready, carol's suspended: {time.monotonic() - started:.1f} s")

    listed = setup.hub.base / "culler" / "cull-these"
    listed.write_text(f"/user/{POLICY_USER}/\n/user/{IDLE_USER}/\n")
    setup.wait_until_stopped(POLICY_USER, IDLE_USER)  # no request reaches them: idle, culled
    listed.unlink()
    culled = (setup.hub.base / "hub.log").read_text()
    assert f"Culling server {POLICY_USER}" in culled and f"Culling server {IDLE_USER}" in culled
    print(f"culled: {time.monotonic() - started:.1f} s")

    setup.log_in(POLICY_USER, IDLE_USER)
    print(f"started again: {time.monotonic() - started:.1f} s")
    for user in (POLICY_USER, IDLE_USER):
        setup.assert_comes_back(user)
    print(f"resumed: {time.monotonic() - started:.1f} s")


def test_a_stopped_server_suspends_its_kernels_first(setup: Setup) -> None:
    setup.open_notebook(STOPPED_USER)
    assert setup.kernel(STOPPED_USER)["state"] == "running"
    response = setup.hub.request("DELETE", f"hub/api/users/{STOPPED_USER}/server", setup.tokens[STOPPED_USER])
    assert response.code in (202, 204), (response.code, response.body)
    setup.wait_until_stopped(STOPPED_USER)
    assert "suspending 1 running kernel(s) before the server stops" in (setup.hub.base / "hub.log").read_text()
    setup.log_in(STOPPED_USER)
    setup.assert_comes_back(STOPPED_USER)


def test_suspend_on_stop_is_on_under_jupyterhub(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_SERVICE_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    assert GPUCheckpointApp().suspend_on_stop is False
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/carol/")
    assert GPUCheckpointApp().suspend_on_stop is True
    assert GPUCheckpointApp(suspend_on_stop=False).suspend_on_stop is False


# -- in one process: the stop itself ------------------------------------------------------------


def _app(serverapp: Any) -> Any:
    return serverapp.web_app.settings["gpuckpt_app"]


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "suspend_on_stop": True}])
async def test_stop_suspends_running_kernels_once(jp_fetch: Any, jp_serverapp: Any) -> None:
    app = _app(jp_serverapp)
    kernel_ids = [await start_kernel(jp_fetch) for _ in range(2)]
    await run(jp_serverapp, kernel_ids[0], "x = 41")
    # the hub's SIGINT, then its SIGTERM: the second stop waits for the first
    await asyncio.gather(app.stop_extension(), app.stop_extension())
    ledger = json.loads(Path(app.ledger_path).read_text())
    for kernel_id in kernel_ids:
        assert ledger[kernel_id]["state"] == "suspended", ledger
        assert ledger[kernel_id]["last_checkpoint"]["durability"] == "durable"


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "suspend_on_stop": True,
                                             "suspend_on_stop_timeout": 0.001}])
async def test_a_kernel_not_suspended_in_time_is_shut_down_as_before(jp_fetch: Any, jp_serverapp: Any) -> None:
    app = _app(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 41")
    await app.stop_extension()
    assert app.parts.registry.records.get(kernel_id).state.value == "running"
    assert kernel_id not in json.loads(Path(app.ledger_path).read_text())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v", "-s"]))
