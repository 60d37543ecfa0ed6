"""The hub service's page in a real browser, behind the hub's login: the admin signs in on
the hub's login form, grants the service access (the hub's OAuth confirmation), and sees
both users' kernels with their owners; alice, signed in the same way, sees only hers. Then
alice's JupyterLab behind the hub's proxy and base URL (``/user/alice/``): the extension's
REST calls, its event stream and the kernel's websocket, holding a cell across a suspend.

Debian's chromium driven by Playwright, as in test_lab_browser.py; a real JupyterHub from
hub_fixtures.py. Screenshots land in ``tests/artifacts/hub_browser/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from browser import (  # noqa: F401 (chromium: the autouse fixture)
    CHROMIUM,
    CHROMIUM_ARGS,
    SKIP,
    STATUS,
    TOGGLE,
    chromium,
    new_notebook,
    run_cell,
)
from hub_fixtures import ADMIN, PASSWORD, USERS, Hub, running_hub
from paths import ROOT, TESTS

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ARTIFACTS = TESTS / "artifacts" / "hub_browser"
BUILT = ROOT / "jupyter_gpuckpt" / "labextension"
"""The JupyterLab extension as ``jlpm build`` left it in this checkout."""
pytestmark = pytest.mark.skipif(os.environ.get(SKIP) == "1", reason=f"{SKIP}=1: the browser tests are skipped on purpose")


@dataclass
class Setup:
    hub: Hub
    kernels: dict[str, str]
    """user -> their kernel's id"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):  # this run's screenshots only
        old.unlink()
    base = tmp_path_factory.mktemp("hub")
    with running_hub(base) as hub:
        for user in USERS:  # JupyterLab with this checkout's extension, and no news pop-up
            data, config = base / "users" / user / "data", base / "users" / user / "config"
            (data / "labextensions").mkdir()
            (data / "labextensions" / "jupyter-gpuckpt").symlink_to(BUILT, target_is_directory=True)
            (config / "labconfig").mkdir()
            (config / "labconfig" / "page_config.json").write_text(json.dumps(
                {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
        hub.start_servers(*USERS)
        yield Setup(hub, {user: hub.start_kernel(user, hub.token(user)) for user in USERS})


@contextmanager
def chromium_browser() -> Iterator[Browser]:
    """Chromium for one test: Playwright's sync API runs an event loop while it is open, which
    must be closed before pytest-jupyter's loop fixture is torn down (so: no module fixture)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def signed_in(browser: Browser, hub: Hub, user: str) -> Iterator[Page]:
    """A fresh browser session (its own cookies) on the service's page, signed in as ``user``
    through the hub's login form and OAuth confirmation. A failure leaves a screenshot."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1300, "height": 700})
    page = context.new_page()

    def shot(name: str) -> None:
        path = ARTIFACTS / f"{user}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")

    try:
        page.goto(f"{hub.url}services/gpuckpt/")
        expect(page).to_have_url(re.compile(r"/hub/login\?next="))  # not signed in: the hub's login
        page.locator("#username_input").fill(user)
        page.locator("#password_input").fill(PASSWORD)
        shot("01-login")
        page.locator("#login_submit").click()
        authorize = page.get_by_role("button", name="Authorize")  # the hub asks once per user and service
        expect(authorize).to_be_visible(timeout=30_000)
        shot("02-authorize")
        authorize.click()
        expect(page).to_have_url(f"{hub.url}services/gpuckpt/", timeout=30_000)
        expect(page.get_by_text(f"Signed in as {user}.")).to_be_visible()
        shot("03-kernels")
        yield page
    except Exception:
        shot("failure")
        raise
    finally:
        context.close()


def kernel_rows(page: Page) -> dict[str, tuple[str, str]]:
    """The kernels table: kernel id -> (its row's data-user, the user column's text)."""
    rows = page.locator("#kernels tr[data-kernel]")
    return {rows.nth(i).get_attribute("data-kernel") or "": (rows.nth(i).get_attribute("data-user") or "",
                                                              rows.nth(i).locator("td").first.inner_text())
            for i in range(rows.count())}


def test_admin_sees_everyones_kernels_and_alice_only_hers(setup: Setup) -> None:
    with chromium_browser() as browser:
        with signed_in(browser, setup.hub, ADMIN) as page:
            assert kernel_rows(page) == {kernel: (user, user) for user, kernel in setup.kernels.items()}
            users = page.locator("#users tr[data-user]")
            assert sorted(users.nth(i).get_attribute("data-user") or "" for i in range(users.count())) == sorted(USERS)
        with signed_in(browser, setup.hub, "alice") as page:
            assert kernel_rows(page) == {setup.kernels["alice"]: ("alice", "alice")}
            assert setup.kernels["bob"] not in page.content()
            users = page.locator("#users tr[data-user]")
            assert [users.nth(i).get_attribute("data-user") for i in range(users.count())] == ["alice"]


def test_jupyterlab_behind_the_hubs_proxy_suspends_and_resumes(setup: Setup) -> None:
    """Everything under ``/user/alice/`` through configurable-http-proxy, signed in by the hub:
    the toolbar's Suspend (REST), the status bar following the kernel (the event stream), and
    the next cell held by the kernel's websocket until the kernel is back, with its state."""
    from playwright.sync_api import expect

    hub = setup.hub
    with chromium_browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 850})

        def shot(name: str) -> None:
            page.screenshot(path=str(ARTIFACTS / f"lab-{name}.png"))

        try:
            page.goto(f"{hub.url}user/alice/lab")
            expect(page).to_have_url(re.compile(r"/hub/login\?next="))
            page.locator("#username_input").fill("alice")
            page.locator("#password_input").fill(PASSWORD)
            page.locator("#login_submit").click()
            expect(page).to_have_url(re.compile(rf"^{re.escape(hub.url)}user/alice/lab"), timeout=60_000)
            new_notebook(page)
            status = page.locator(STATUS)
            run_cell(page, 0, "x = 41")
            expect(page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first).to_contain_text("[1]", timeout=60_000)
            shot("01-running")

            toggle = page.locator(TOGGLE)
            expect(toggle).to_contain_text("Suspend", timeout=30_000)
            toggle.click()
            expect(status).to_have_attribute("data-state", "suspended", timeout=60_000)
            expect(toggle).to_contain_text("Resume")
            shot("02-suspended")
            kernels = hub.request("GET", "user/alice/api/gpuckpt/kernels", hub.token("alice")).json()
            assert [k["state"] for k in kernels if k["kernelspec"] == "python3-gpuckpt"].count("suspended") == 1

            output = run_cell(page, 1, "x + 1")
            expect(output.last).to_have_text("42", timeout=60_000)
            expect(status).to_have_attribute("data-state", "running", timeout=30_000)
            shot("03-resumed-42")
        except Exception:
            shot("failure")
            raise
