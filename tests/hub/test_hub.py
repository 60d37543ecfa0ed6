"""The gpuckpt JupyterHub service against a real hub: admins see every user's kernels, a
user only their own, and an admin suspends and resumes a user's kernel through it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hub_fixtures import ADMIN, USERS, Hub, running_hub

from jupyter_gpuckpt.hub.access import reach
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json

LOOSE = "bobs-never-suspended"
"""A kernelspec bob installs for himself, asking to be exempt from the admin's policy."""


@dataclass
class Setup:
    hub: Hub
    tokens: dict[str, str]
    kernels: dict[str, str]
    """user -> their kernel's id"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base: Path = tmp_path_factory.mktemp("hub")
    with running_hub(base) as hub:
        spec = kernelspec_json("Never suspended")
        spec["metadata"]["gpuckpt"] = {"exempt": True}
        (base / "users" / "bob" / "data" / "kernels" / LOOSE).mkdir(parents=True)
        (base / "users" / "bob" / "data" / "kernels" / LOOSE / "kernel.json").write_text(json.dumps(spec))
        tokens = {user: hub.token(user) for user in (*USERS, ADMIN)}
        hub.start_servers(*USERS)
        kernels = {user: hub.start_kernel(user, tokens[user]) for user in USERS}
        for user in USERS:
            assert hub.user_server(user).run(kernels[user], f"x = {user!r} * 2; print(x)").strip() == user * 2
        yield Setup(hub, tokens, kernels)


def service(setup: Setup, user: str, path: str, method: str = "GET") -> tuple[int, object]:
    response = setup.hub.request(method, f"services/gpuckpt/{path}", setup.tokens[user])
    return response.code, response.json() if response.body else None


def test_admin_sees_every_users_kernels(setup: Setup) -> None:
    code, view = service(setup, ADMIN, "api/kernels")
    assert code == 200, view
    assert isinstance(view, dict)
    owners = {k["id"]: k["user"] for k in view["kernels"]}
    assert {owners[kid] for kid in setup.kernels.values()} == set(USERS)
    assert all(owners[kid] == user for user, kid in setup.kernels.items())
    assert {u["user"] for u in view["users"]} >= set(USERS) and view["errors"] == []
    row = next(k for k in view["kernels"] if k["id"] == setup.kernels["alice"])
    assert row["state"] == "running" and row["kernelspec"] and row["server"] == ""
    assert {"node", "gpus", "idle_seconds", "last_checkpoint", "notebook"} <= row.keys()
    for summary in view["users"]:
        assert summary["released_gpu_hours"] >= 0 and summary["kernels"] == 1
    policies = {u["user"]: u["servers"][0]["policy"] for u in view["users"] if u["user"] in USERS}
    assert policies["alice"]["refused_overrides"] == {} and policies["alice"]["user_overridable"] == []
    assert policies["bob"]["refused_overrides"] == {
        LOOSE: {"exempt": "true is looser than the server's false: a kernelspec may only set it to false"}}


def test_user_sees_only_their_own(setup: Setup) -> None:
    code, view = service(setup, "alice", "api/kernels")
    assert code == 200, view
    assert isinstance(view, dict)
    assert [k["id"] for k in view["kernels"]] == [setup.kernels["alice"]]
    assert [u["user"] for u in view["users"]] == ["alice"]
    assert service(setup, "alice", "api/users/alice/kernels")[0] == 200
    for path in ("api/users/bob/kernels", "api/users/nobody/kernels"):  # the same answer: no probing names
        code, answer = service(setup, "alice", path)
        assert code == 404 and isinstance(answer, dict) and "message" in answer
    code, _ = service(setup, "alice", f"api/users/bob/kernels/{setup.kernels['bob']}/suspend", "POST")
    assert code == 404


def test_requests_are_checked(setup: Setup) -> None:
    assert setup.hub.request("GET", "services/gpuckpt/api/kernels").code == 403  # no token: no redirect
    page = setup.hub.request("GET", "services/gpuckpt/")
    assert page.code == 302 and "/hub/api/oauth2/authorize" in page.headers["Location"]  # the hub's OAuth
    assert service(setup, ADMIN, "api/users/alice/kernels/not-a-kernel/suspend", "POST")[0] == 400
    assert service(setup, ADMIN, "api/users/alice/kernels/0123abcd/suspend", "POST")[0] == 404


def test_admin_suspends_and_resumes_a_users_kernel(setup: Setup) -> None:
    kernel = setup.kernels["bob"]
    code, answer = service(setup, ADMIN, f"api/users/bob/kernels/{kernel}/suspend", "POST")
    assert code == 200, answer
    assert isinstance(answer, dict) and answer["state"] == "suspended" and answer["user"] == "bob"
    _, view = service(setup, ADMIN, "api/users/bob/kernels")
    assert isinstance(view, dict) and view["kernels"][0]["state"] == "suspended"
    assert view["kernels"][0]["last_checkpoint"]["id"]
    code, answer = service(setup, ADMIN, f"api/users/bob/kernels/{kernel}/resume", "POST")
    assert code == 200 and isinstance(answer, dict) and answer["state"] == "running", answer
    assert setup.hub.user_server("bob").run(kernel, "print(x)").strip() == "bobbob"


def test_page_lists_the_kernels(setup: Setup) -> None:
    page = setup.hub.request("GET", "services/gpuckpt/", setup.tokens[ADMIN])
    assert page.code == 200 and page.headers["Content-Type"].startswith("text/html")
    html = page.body.decode()
    for user, kernel in setup.kernels.items():
        assert re.search(rf'data-kernel="{kernel}" data-user="{user}"', html)
    refused = re.search(r'<tr data-user="bob" data-server="">(.*?)</tr>', html, re.S)
    assert refused and f"{LOOSE}: exempt: true is looser" in refused.group(1)
    buttons = re.search(rf'data-kernel="{setup.kernels["alice"]}".*?</tr>', html, re.S)
    assert buttons and re.findall(r"<button[^>]*>(\w+)</button>", buttons.group(0)) == ["suspend"]  # it runs
    mine = setup.hub.request("GET", "services/gpuckpt/", setup.tokens["alice"]).body.decode()
    assert setup.kernels["alice"] in mine and setup.kernels["bob"] not in mine


def test_metrics_per_user(setup: Setup) -> None:
    response = setup.hub.request("GET", "services/gpuckpt/metrics", setup.tokens[ADMIN])
    assert response.code == 200, response.body
    text = response.body.decode()
    for user in USERS:
        assert f'jupyter_gpuckpt_hub_server_up{{server="",user="{user}"}} 1.0' in text
        assert f'jupyter_gpuckpt_hub_released_gpu_seconds_total{{user="{user}"}}' in text
    assert 'jupyter_gpuckpt_hub_kernels{state="running",user="alice"} 1.0' in text


def test_reach_from_scopes() -> None:
    alice = {"name": "alice", "kind": "user", "scopes": ["custom:gpuckpt:read!group=vision"]}
    assert reach(alice).covers("alice") and reach(alice).covers("carol", ["vision"])
    assert not reach(alice).covers("bob") and not reach(alice, manage=True).covers("carol", ["vision"])
    assert reach({"name": "x", "kind": "service", "scopes": ["custom:gpuckpt:read"]}).everyone
    assert reach({"name": "root", "admin": True, "scopes": []}, manage=True).everyone
    bob = {"name": "bob", "kind": "user", "scopes": []}  # configure(users_manage_own=False)
    assert reach(bob).covers("bob") and not reach(bob, manage=True).covers("bob")
    bob["scopes"] = ["custom:gpuckpt:manage!user=bob"]
    assert reach(bob, manage=True).covers("bob") and not reach(bob, manage=True).covers("alice")
