"""The JupyterLab extension in a real browser against a real ``jupyter lab`` and kernel.

Debian's chromium (``apt-get install chromium``) driven by Playwright; no browser is
downloaded. Each step of a scenario leaves a screenshot in ``tests/artifacts/lab_browser/``
(git-ignored), named after the scenario, and the test prints their paths.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import live_server
import pytest
from browser import (  # noqa: F401 (chromium: autouse)
    CHROMIUM,
    CHROMIUM_ARGS,
    SKIP,
    STATUS,
    TOGGLE,
    KernelTraffic,
    chromium,
    new_notebook,
    run_cell,
)
from live_server import TOKEN, Server, running_server
from paths import ROOT, TESTS

if TYPE_CHECKING:
    from playwright.sync_api import Page

ARTIFACTS = TESTS / "artifacts" / "lab_browser"
DOC_IMAGES = ROOT / "docs" / "images"
CARD = ".jp-gpuckpt-panel .jp-gpuckpt-kernel"
# The server's GPUs, as NVML would name them (its test inventory): long names, so the
# screenshots show how GPU lines wrap in the narrow sidebar. The kernel takes the first.
GPUS = [{"uuid": f"GPU-8f3c2a1e-{i}", "name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * 2**30,
         "memory_used": (7 + 30 * i) * 2**29, "utilization": 12 * i} for i in range(2)]

# Every word the panel shows, with where it breaks across lines: a word is a run of
# characters between spaces, hyphens and slashes (where a line may break), and it breaks
# when its characters lie on more than one line. Also: the panel must not scroll sideways,
# and the notebook name and the state badge stay on one line.
MID_WORD_BREAKS_JS = """() => {
    const problems = [];
    const panel = document.querySelector('.jp-gpuckpt-panel');
    if (panel.scrollWidth > panel.clientWidth + 1) {
        problems.push(`the panel scrolls sideways: ${panel.scrollWidth} > ${panel.clientWidth}`);
    }
    const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
    let node;
    let words = 0;
    while ((node = walker.nextNode())) {
        const element = node.parentElement;
        if (!element || element.closest('[hidden]') || !element.getClientRects().length) {
            continue;
        }
        const word = /[^\\s\\-\\/]+/g;
        let m;
        while ((m = word.exec(node.textContent))) {
            const range = document.createRange();
            range.setStart(node, m.index);
            range.setEnd(node, m.index + m[0].length);
            const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                .map(r => Math.round(r.bottom)));
            words += 1;
            if (lines.size > 1) {
                problems.push(`"${m[0]}" breaks across ${lines.size} lines in .${element.className}`);
            }
        }
    }
    for (const el of panel.querySelectorAll('.jp-gpuckpt-state, .jp-gpuckpt-notebook')) {
        if (getComputedStyle(el).whiteSpace !== 'nowrap') {
            problems.push(`.${el.className} may wrap`);
        }
        const lines = new Set([...el.getClientRects()].map(r => Math.round(r.bottom)));
        if (lines.size > 1) {
            problems.push(`.${el.className} "${el.textContent}" takes ${lines.size} lines`);
        }
    }
    return {problems, words, width: panel.clientWidth};
}"""

pytestmark = pytest.mark.skipif(os.environ.get(SKIP) == "1", reason=f"{SKIP}=1: the browser tests are skipped on purpose")


@pytest.fixture
def lab_server_args() -> list[str]:
    """More command-line settings for the ``lab`` fixture's server (a test parametrizes it)."""
    return []


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lab_server_args: list[str]) -> Iterator[Server]:
    """``jupyter lab`` with the gpuckpt kernelspec, two test GPUs, no news or update pop-ups,
    and the app exposed as ``window.jupyterapp`` so the test can run JupyterLab commands."""
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps(GPUS))
    # running_server hands the server no JUPYTER* variable of this process: add the inventory
    server_env = live_server.jupyter_env
    monkeypatch.setattr(live_server, "jupyter_env",
                        lambda base: {**server_env(base), "JUPYTER_GPUCKPT_TEST_GPUS": str(inventory)})
    # the extension as `jlpm build` left it in this checkout, not a copy installed earlier:
    # JupyterLab takes the first one it finds, and the user data dir comes first
    built = ROOT / "jupyter_gpuckpt" / "labextension"
    if (built / "package.json").exists():
        (tmp_path / "data" / "labextensions").mkdir(parents=True)
        (tmp_path / "data" / "labextensions" / "jupyter-gpuckpt").symlink_to(built, target_is_directory=True)
    labconfig = tmp_path / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    with running_server(tmp_path, "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                        "--LabApp.expose_app_in_browser=True", *lab_server_args, app="jupyterlab") as server:
        installed = server.cli("install-kernelspec", "--user")
        assert installed.returncode == 0, installed.stderr
        yield server


@contextmanager
def browser_page(lab: Server, scenario: str) -> Iterator[tuple[Page, Callable[..., None]]]:
    """A page on ``lab`` and ``shot(name, locator=None, docs=None)``, which saves a screenshot
    as ``<scenario>-NN-<name>.png`` (of ``locator`` only, if given), and as the docs' picture
    ``docs/images/<docs>.png`` if ``docs`` names one (the docs show what these tests saw). On a
    failure it takes one more and prints the browser's last errors, its last kernel messages
    and the end of the server's log."""
    from playwright.sync_api import Locator, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob(f"{scenario}-*.png"):
        old.unlink()
    shots: list[Path] = []
    console: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 850})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning")
                    else None)
            traffic = KernelTraffic(page)

            def shot(name: str, locator: Locator | None = None, docs: str | None = None) -> None:
                path = ARTIFACTS / f"{scenario}-{len(shots) + 1:02d}-{name}.png"
                (locator or page).screenshot(path=str(path))
                shots.append(path)
                if docs is not None:
                    shutil.copyfile(path, DOC_IMAGES / f"{docs}.png")
                print(f"screenshot: {path}")

            try:
                page.goto(f"{lab.url}lab?token={TOKEN}")
                yield page, shot
            except Exception:
                shot("failure")
                print("\n".join(console[-30:]))
                print("kernel messages (s, > sent, < received):", *traffic.lines(), sep="\n  ")
                log = lab.root.parent / "server.log"
                print("server log:", *log.read_text(errors="replace").splitlines()[-60:], sep="\n  ")
                raise
        finally:
            browser.close()
    print("screenshots:", *map(str, shots), sep="\n  ")


def assert_no_mid_word_breaks(page: Page) -> None:
    result = page.evaluate(MID_WORD_BREAKS_JS)
    assert result["words"] > 10, result
    assert not result["problems"], result


def test_suspend_and_resume_by_running_a_cell(lab: Server) -> None:
    from playwright.sync_api import expect

    with browser_page(lab, "suspend") as (page, shot):
        new_notebook(page)
        status = page.locator(STATUS)

        # x = 41
        run_cell(page, 0, "x = 41")
        expect(page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first).to_contain_text("[1]", timeout=60_000)
        # the toolbar button comes from the settings schema (jupyter.lab.toolbars)
        toggle = page.locator(TOGGLE)
        expect(toggle).to_be_enabled(timeout=30_000)
        expect(toggle).to_contain_text("Suspend")
        shot("cell-ran-x-41", docs="toolbar")

        # the Kernel menu entries come from the settings schema too (jupyter.lab.menus)
        page.locator(".lm-MenuBar-item", has_text="Kernel").click()
        kernel_menu = page.locator(".lm-Menu")
        expect(kernel_menu.locator('[data-command="jupyter-gpuckpt:suspend"]')).to_contain_text(
            "Suspend kernel (release GPU)")
        expect(kernel_menu.locator('[data-command="jupyter-gpuckpt:park"]')).to_contain_text("Park GPU kernel")
        expect(kernel_menu.locator('[data-command="jupyter-gpuckpt:checkpoint"]')).to_be_visible()
        shot("kernel-menu")
        page.keyboard.press("Escape")

        # Suspend: the status bar says so, and the panel too
        toggle.click()
        expect(status).to_have_attribute("data-state", "suspended", timeout=60_000)
        expect(status).to_contain_text("suspended")
        expect(toggle).to_contain_text("Resume")
        shot("suspended-status-bar")
        shot("status-bar", page.locator("#jp-main-statusbar"), docs="status-bar")

        status.click()
        card = page.locator(CARD)
        expect(card).to_have_attribute("data-state", "suspended", timeout=10_000)
        expect(card.locator(".jp-gpuckpt-state")).to_have_text("suspended")
        expect(card.locator(".jp-gpuckpt-notebook")).to_have_text("Untitled.ipynb")
        expect(card.locator('button[aria-label="Resume kernel"]')).to_be_enabled()
        expect(card.locator('button[aria-label="Suspend kernel (release GPU)"]')).to_be_disabled()
        expect(card.locator('button[aria-label="Park GPU kernel"]')).to_be_disabled()
        assert_no_mid_word_breaks(page)
        shot("suspended-panel")
        shot("suspended-panel-only", page.locator(".jp-gpuckpt-panel"))

        # the card is updated in place from now on: the same element, never replaced
        page.evaluate("""() => {
            window.gpuckptCard = document.querySelector('.jp-gpuckpt-kernel');
            const seen = window.gpuckptStates = [];
            const node = document.querySelector('.jp-gpuckpt-status');
            new MutationObserver(() => seen.push(node.dataset.state))
                .observe(node, {attributes: true, attributeFilter: ['data-state']});
            const replaced = window.gpuckptReplaced = [];
            new MutationObserver(records => records.forEach(r => replaced.push(...r.removedNodes)))
                .observe(document.querySelector('.jp-gpuckpt-kernels'), {childList: true});
        }""")

        # x + 1 in the suspended notebook: it resumes by itself, then runs
        output = run_cell(page, 1, "x + 1")
        try:
            expect(status).to_have_attribute("data-state", "restoring", timeout=15_000)
            shot("restoring")
        except AssertionError:
            pass  # too quick to catch on screen; the recorded states below still tell
        expect(output.last).to_have_text("42", timeout=60_000)
        expect(status).to_have_attribute("data-state", "running", timeout=30_000)
        expect(card).to_have_attribute("data-state", "running", timeout=10_000)
        expect(card.locator(".jp-gpuckpt-state")).to_have_text("running")
        shot("resumed-output-42")
        seen = page.evaluate("window.gpuckptStates")
        assert "restoring" in seen, seen
        assert seen[-1] == "running", seen
        assert page.evaluate("document.querySelector('.jp-gpuckpt-kernel') === window.gpuckptCard"), \
            "the kernel's card was built again instead of updated"
        assert page.evaluate("window.gpuckptReplaced.length") == 0
        assert_no_mid_word_breaks(page)
        shot("running-panel-light", page.locator(".jp-gpuckpt-panel"), docs="panel")

        # resuming a running kernel (the palette would not offer it) says what happened
        page.evaluate("id => window.jupyterapp.commands.execute('jupyter-gpuckpt:resume', {kernelId: id})",
                      card.get_attribute("data-kernel-id"))
        expect(page.locator(".Toastify__toast", has_text="Untitled.ipynb is already running")).to_be_visible(
            timeout=30_000)
        expect(card).to_have_attribute("data-state", "running")

        # the dark theme: the same panel, with JupyterLab's dark variables
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
        page.wait_for_timeout(500)  # the theme's stylesheet applies after the attribute
        assert_no_mid_word_breaks(page)
        shot("running-dark")
        shot("running-panel-dark", page.locator(".jp-gpuckpt-panel"))
        toggle.click()
        expect(card).to_have_attribute("data-state", "suspended", timeout=60_000)
        assert_no_mid_word_breaks(page)
        shot("suspended-panel-dark", page.locator(".jp-gpuckpt-panel"))
        assert page.evaluate("document.querySelector('.jp-gpuckpt-kernel') === window.gpuckptCard")
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true", timeout=30_000)

        # Park, from the palette: the CUDA driver parks the kernel where it can; where it
        # cannot (no driver here), the kernel is suspended and its card says why
        toggle.click()
        expect(card).to_have_attribute("data-state", "running", timeout=60_000)
        expect(card.locator('button[aria-label="Park GPU kernel"]')).to_be_enabled()
        page.evaluate("window.jupyterapp.commands.execute('apputils:activate-command-palette')")
        palette = page.locator(".lm-CommandPalette")
        palette.locator(".lm-CommandPalette-input").fill("Park GPU")
        park = palette.locator('.lm-CommandPalette-item[data-command="jupyter-gpuckpt:park"]')
        expect(park).to_contain_text("Park GPU kernel")
        shot("palette-park")
        park.click()
        expect(card).to_have_attribute("data-state", re.compile("^(parked|suspended)$"), timeout=60_000)
        if card.get_attribute("data-state") == "suspended":
            expect(card.locator(".jp-gpuckpt-notice")).to_contain_text("could not be parked", timeout=10_000)
        expect(card.locator('button[aria-label="Resume kernel"]')).to_be_enabled()
        assert_no_mid_word_breaks(page)
        shot("parked-or-not-panel", page.locator(".jp-gpuckpt-panel"))
        # a suspend stages its checkpoint in host memory ("in host memory, writing" on the
        # card, "saving" in the status bar) until the write-behind makes it durable
        last = card.locator(".jp-gpuckpt-last")
        expect(last).to_contain_text("checkpoint")
        expect(last).not_to_contain_text("in host memory", timeout=60_000)
        expect(last).not_to_contain_text("write failed")
        expect(status).not_to_contain_text("saving")
        shot("durable-panel", page.locator(".jp-gpuckpt-panel"))


def test_coming_back_resumes_the_kernel_before_the_cell_is_run(lab: Server) -> None:
    """Resume before the user asks: a suspended kernel's notebook is focused and the user types
    in it for 5 s, then runs the cell; JupyterLab told the server as they came back, so the
    cell's execution starts within 1 s of the run instead of after a restore."""
    from playwright.sync_api import expect

    with browser_page(lab, "return") as (page, shot):
        new_notebook(page)
        status, toggle = page.locator(STATUS), page.locator(TOGGLE).first
        expect(run_cell(page, 0, "x = 41").first).to_have_count(0)  # no output; wait until it ran
        expect(page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-InputPrompt")).to_have_text("[1]:",
                                                                                                  timeout=30_000)
        toggle.click()
        expect(status).to_have_attribute("data-state", "suspended", timeout=60_000)
        page.evaluate("""() => {
            const seen = window.gpuckptStates = [];
            const node = document.querySelector('.jp-gpuckpt-status');
            new MutationObserver(() => seen.push([Date.now(), node.dataset.state]))
                .observe(node, {attributes: true, attributeFilter: ['data-state']});
        }""")
        page.evaluate("window.dispatchEvent(new Event('focus'))")  # the window comes back into focus
        page.locator(".jp-Notebook .jp-Cell .cm-content").nth(1).click()
        code = "import time; print(repr(time.time() - x))"
        page.keyboard.type(code, delay=5000 / len(code))  # about 5 s of typing
        shot("typed")
        run_at = page.evaluate("Date.now()") / 1000
        page.keyboard.press("Shift+Enter")
        # the cell's print, not the resume's report, which the page may show a moment before it
        output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]')
        expect(output).to_have_count(1, timeout=60_000)
        started = float(output.inner_text().strip()) + 41  # time.time() as the cell began
        shot("ran")
        seen = page.evaluate("window.gpuckptStates")
        restoring = [t / 1000 for t, state in seen if state == "restoring"]
        assert restoring and restoring[0] < run_at, f"the resume did not start before the run: {seen}"
        lag = started - run_at
        print(f"resume started {run_at - restoring[0]:.1f} s before the run; the cell began {lag:.2f} s after it")
        assert lag < 1.0, f"the cell waited {lag:.1f} s for the restore"


def test_restore_report_and_rebuild(lab: Server) -> None:
    """A generator cannot be saved: after a suspend and a resume the panel says so and
    offers Rebuild, which re-runs the cell that made it."""
    from playwright.sync_api import expect

    with browser_page(lab, "rebuild") as (page, shot):
        new_notebook(page)
        status = page.locator(STATUS)
        run_cell(page, 0, "g = (i for i in range(3))")
        expect(page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first).to_contain_text("[1]", timeout=60_000)
        toggle = page.locator(TOGGLE)
        expect(toggle).to_be_enabled(timeout=30_000)
        toggle.click()
        expect(status).to_have_attribute("data-state", "suspended", timeout=60_000)

        output = run_cell(page, 1, "40 + 2")
        expect(output.last).to_contain_text("42", timeout=60_000)
        expect(status).to_have_attribute("data-state", "running", timeout=30_000)

        status.click()
        card = page.locator(CARD)
        report = card.locator(".jp-gpuckpt-report")
        expect(report).to_be_visible(timeout=15_000)
        expect(report).to_have_attribute("data-kind", "offer")
        expect(report).to_contain_text("g (")
        rebuild = report.get_by_role("button", name="Re-run the cells that rebuild what was not restored")
        expect(rebuild).to_be_enabled()
        expect(rebuild).to_contain_text("Rebuild")
        assert_no_mid_word_breaks(page)
        shot("report-offers-rebuild", docs="restore-report")
        shot("report-panel", page.locator(".jp-gpuckpt-panel"))

        rebuild.click()
        expect(report).to_have_attribute("data-kind", "rebuilt", timeout=60_000)
        expect(rebuild).to_be_hidden()
        assert_no_mid_word_breaks(page)
        shot("rebuilt-panel", page.locator(".jp-gpuckpt-panel"))

        output = run_cell(page, 2, 'print("next", next(g))')
        expect(output.last).to_contain_text("next 0", timeout=60_000)
        shot("next-g-is-0")


# The policy warns an open notebook's idle kernel WARN_BEFORE seconds before it suspends it,
# IDLE_TIMEOUT seconds idle; a pass every second. The gap between the warning and the next
# one after a "Keep running" (IDLE_TIMEOUT - WARN_BEFORE) is longer than the warning, so
# the test can wait past the suspend that was due without being warned again.
IDLE_TIMEOUT, WARN_BEFORE = 36, 12
WARNING = ".Toastify__toast"


@pytest.mark.parametrize("lab_server_args", [[
    f"--GPUCheckpointApp.idle_timeout={IDLE_TIMEOUT}", f"--GPUCheckpointApp.warn_before={WARN_BEFORE}",
    "--GPUCheckpointApp.policy_interval=1"]])
def test_policy_warning_keep_running(lab: Server) -> None:
    """An idle kernel whose notebook is open: a warning with "Keep running" before the
    policy suspends it; a click keeps it running, past the time its suspend was due."""
    import time

    from playwright.sync_api import expect

    with browser_page(lab, "policy-warning") as (page, shot):
        new_notebook(page)
        status = page.locator(STATUS)
        run_cell(page, 0, "x = 41")
        expect(page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first).to_contain_text("[1]", timeout=60_000)
        status.click()
        card = page.locator(CARD)
        expect(card).to_have_attribute("data-state", "running", timeout=10_000)
        kernel_id = card.get_attribute("data-kernel-id")

        # idle IDLE_TIMEOUT - WARN_BEFORE seconds: the warning, with when and why
        warning = page.locator(WARNING, has_text="the kernel will be suspended in")
        expect(warning).to_be_visible(timeout=60_000)
        warned_at = time.monotonic()
        expect(warning).to_contain_text("Untitled.ipynb: the kernel will be suspended in")
        expect(warning).to_contain_text(f"timeout {IDLE_TIMEOUT} s")
        keep = warning.locator("button", has_text="Keep running")
        expect(keep).to_be_visible()
        # the card and the status bar say so too, and offer the same
        card_warning = card.locator(".jp-gpuckpt-warning")
        expect(card_warning).to_be_visible()
        expect(card_warning).to_contain_text("Suspends in")
        expect(card_warning.get_by_role("button", name="Keep kernel running")).to_be_enabled()
        expect(status).to_contain_text("suspends in")
        assert "Suspends in" in (status.get_attribute("title") or "")
        assert_no_mid_word_breaks(page)
        page.wait_for_timeout(500)  # the toast slides in
        shot("warned", docs="policy-warning")
        shot("warned-panel", page.locator(".jp-gpuckpt-panel"))

        page.evaluate("""() => {
            const seen = window.gpuckptStates = [];
            const node = document.querySelector('.jp-gpuckpt-status');
            new MutationObserver(() => seen.push(node.dataset.state))
                .observe(node, {attributes: true, attributeFilter: ['data-state']});
        }""")
        keep.click()
        page.mouse.move(700, 400)  # a toast under the mouse does not close by itself
        # the warning goes (it says "keeping the kernel running…" while the server answers), a
        # short success says what happened, and the card's warning goes too
        expect(page.locator(WARNING, has_text="Untitled.ipynb: kept running.")).to_be_visible(timeout=15_000)
        expect(page.locator(WARNING, has_text="the kernel will be suspended")).to_have_count(0, timeout=15_000)
        expect(page.locator(WARNING, has_text="keeping the kernel running")).to_have_count(0, timeout=15_000)
        expect(card_warning).to_be_hidden()
        expect(card.locator(".jp-gpuckpt-policy")).to_contain_text("kept")
        expect(status).not_to_contain_text("suspends in")
        page.wait_for_timeout(500)  # the toasts slide in and out
        shot("kept")

        # past the time the suspend was due: still running, never suspended or parked
        page.wait_for_timeout(max(0.0, warned_at + WARN_BEFORE + 4 - time.monotonic()) * 1000)
        assert lab.api("GET", f"api/gpuckpt/kernels/{kernel_id}")["state"] == "running"
        expect(status).to_have_attribute("data-state", "running")
        expect(card).to_have_attribute("data-state", "running")
        seen = page.evaluate("window.gpuckptStates")
        assert not {"checkpointing", "suspended", "parked", "restoring"} & set(seen), seen
        output = run_cell(page, 1, "x + 1")
        expect(output.last).to_have_text("42", timeout=30_000)
        shot("still-running")

        # the same from the command palette, for the current notebook's kernel
        expect(page.locator(WARNING, has_text="kept running")).to_have_count(0, timeout=15_000)
        page.evaluate("window.jupyterapp.commands.execute('apputils:activate-command-palette')")
        palette = page.locator(".lm-CommandPalette")
        palette.locator(".lm-CommandPalette-input").fill("Keep kernel")
        command = palette.locator('.lm-CommandPalette-item[data-command="jupyter-gpuckpt:keep-running"]')
        expect(command).to_contain_text("Keep kernel running")
        command.click()
        expect(page.locator(WARNING, has_text="Untitled.ipynb: kept running.")).to_be_visible(timeout=15_000)
