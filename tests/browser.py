"""What the browser tests share: Debian's chromium for Playwright (no browser is downloaded),
the extension's selectors, and the steps every scenario takes in JupyterLab."""

from __future__ import annotations

import json
import time
from collections import deque
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
    """The page's last kernel messages (sent and received over its kernel websockets), for a
    failing test to print: whether a cell's request reached the server and what came back (or
    did not) is what a screenshot cannot show. Frames are kept as they came and read only
    when printed, so a passing test pays nothing but the copy."""

    def __init__(self, page: Page, keep: int = 80) -> None:
        self._frames: deque[tuple[float, str, str | bytes | None]] = deque(maxlen=keep)
        self._start = time.monotonic()
        page.on("websocket", self._watch)

    def _watch(self, ws: WebSocket) -> None:
        if "/channels" in ws.url:
            ws.on("framesent", lambda payload: self._frames.append((time.monotonic(), ">", payload)))
            ws.on("framereceived", lambda payload: self._frames.append((time.monotonic(), "<", payload)))
            ws.on("close", lambda _: self._frames.append((time.monotonic(), "closed", None)))

    def lines(self) -> list[str]:
        """A line per frame: seconds since the page opened, direction, channel, type, the
        message's id and its parent's, and its state or code."""
        return [f"{at - self._start:7.2f} {direction} {self._describe(payload)}"
                for at, direction, payload in self._frames]

    @staticmethod
    def _describe(payload: str | bytes | None) -> str:
        from jupyter_server.services.kernels.connection.base import deserialize_msg_from_ws_v1

        if payload is None:
            return "websocket"
        try:
            if isinstance(payload, bytes):
                channel, parts = deserialize_msg_from_ws_v1(payload)
                header, parent, content = (json.loads(parts[i]) for i in (0, 1, 3))
            else:
                msg = json.loads(payload)
                channel, header, parent, content = (msg.get("channel"), *(msg[k] for k in (
                    "header", "parent_header", "content")))
        except (ValueError, KeyError, IndexError) as e:  # not a kernel message: say so, keep the rest
            return f"unreadable frame ({e})"
        detail = content.get("execution_state") or content.get("code") or ""
        return (f"{channel} {header.get('msg_type')} {header.get('msg_id', '')[:8]} "
                f"parent={(parent or {}).get('msg_id', '')[:8]} {str(detail)[:40]!r}")
