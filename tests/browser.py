"""What the browser tests share: Debian's chromium for Playwright (no browser is downloaded),
the extension's selectors, and the steps every scenario takes in JupyterLab."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

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
