"""What the browser tests share: Debian's chromium for Playwright (no browser is downloaded),
the extension's selectors, and the steps every scenario takes in JupyterLab."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page, WebSocket

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
TOGGLE = '[data-command="jupyter-gpuckpt:suspend-or-resume"]'
STATUS = ".jp-gpuckpt-status"
SKIP = "JUPYTER_GPUCKPT_SKIP_BROWSER"


@pytest.fixture(autouse=True)
def chromium() -> None:
    """A missing browser fails the test, loudly: a skipped browser test is too easy to miss."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (or set {SKIP}=1 to skip the browser "
                    "tests on purpose)", pytrace=False)


def new_notebook(page: Page) -> None:
    """A new notebook with the gpuckpt kernel, from the launcher; waits until it runs."""
    from playwright.sync_api import expect

    card = page.locator('.jp-LauncherCard[data-category="Notebook"]', has_text="Python 3 (GPU checkpoint)")
    card.click(timeout=60_000)
    expect(page.locator(STATUS)).to_have_attribute("data-state", "running", timeout=60_000)


def run_cell(page: Page, index: int, code: str) -> Any:
    """Type ``code`` into cell ``index`` and run it; the cell's output locator."""
    page.locator(".jp-Notebook .jp-Cell .cm-content").nth(index).click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea-output")


class KernelTraffic:
    """A line for each kernel message the page sent or got over its kernel websockets, for a
    failing test to print: whether a cell's request reached the server and what came back (or
    did not) is what a screenshot cannot show."""

    def __init__(self, page: Page) -> None:
        self.lines: list[str] = []
        self._start = time.monotonic()
        page.on("websocket", self._watch)

    def _watch(self, ws: WebSocket) -> None:
        if "/channels" in ws.url:
            ws.on("framesent", lambda payload: self._note(">", payload))
            ws.on("framereceived", lambda payload: self._note("<", payload))
            ws.on("close", lambda _: self.lines.append(f"{self._now()} websocket closed"))

    def _now(self) -> str:
        return f"{time.monotonic() - self._start:7.2f}"

    def _note(self, direction: str, payload: str | bytes) -> None:
        from jupyter_server.services.kernels.connection.base import deserialize_msg_from_ws_v1

        try:
            if isinstance(payload, bytes):
                channel, parts = deserialize_msg_from_ws_v1(payload)
                header, parent, content = (json.loads(parts[i]) for i in (0, 1, 3))
            else:
                msg = json.loads(payload)
                channel, header, parent, content = msg.get("channel"), msg["header"], msg["parent_header"], \
                    msg["content"]
        except (ValueError, KeyError, IndexError) as e:  # not a kernel message: say so, keep the rest
            self.lines.append(f"{self._now()} {direction} unreadable frame ({e})")
            return
        detail = content.get("execution_state") or content.get("code") or ""
        self.lines.append(f"{self._now()} {direction} {channel} {header.get('msg_type')} "
                          f"{header.get('msg_id', '')[:8]} parent={(parent or {}).get('msg_id', '')[:8]} "
                          f"{str(detail)[:40]!r}")
