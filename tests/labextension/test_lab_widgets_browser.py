"""An ipywidgets slider in a real JupyterLab across a suspend and a resume, as a user sees it.

The notebook shows a slider; the kernel is suspended from the toolbar and resumed by the next
cell, which sets the slider's value. The slider the notebook showed before the suspend must
show that value (the restored widget's comm keeps its old model id), a new display of it must
render, and moving either slider in the page must change the value in the kernel. The page
reloaded after that must show the slider from the kernel's widget, and move it. JupyterLab's
widget manager is ``@jupyter-widgets/jupyterlab-manager`` from ``jupyterlab_widgets``.
Browser, server and screenshots (``tests/artifacts/lab_browser/widgets-*.png``) as in
test_lab_browser.py.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from browser import SKIP, STATUS, TOGGLE, chromium, new_notebook, run_cell  # noqa: F401 (chromium: autouse)
from live_server import Server
from test_lab_browser import browser_page, lab, lab_server_args  # noqa: F401 (lab_server_args: lab's fixture)

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = pytest.mark.skipif(os.environ.get(SKIP) == "1", reason=f"{SKIP}=1: the browser tests are skipped on purpose")

# What the page's kernel connection goes through, for the failure message: its status changes
# other than busy and idle, and its comm and subshell messages and cells, in order (ids cut to 8).
WATCH_KERNEL_JS = """() => {
    const context = window.jupyterapp.shell.currentWidget.sessionContext;
    const seen = window.gpuckptSeen = {kernels: 0, traffic: []};
    const log = line => seen.traffic.push(line);
    const id = s => (s || '-').slice(0, 8);
    const watch = kernel => {
        seen.kernels += 1;
        kernel.statusChanged.connect((_, s) => ['busy', 'idle'].includes(s) || log(`status ${s}`));
        kernel.connectionStatusChanged.connect((_, s) => log(`connection ${s}`));
        kernel.anyMessage.connect((_, {msg, direction}) => {
            const type = msg.header.msg_type, c = msg.content, arrow = direction === 'send' ? '->' : '<-';
            if (type === 'execute_request') {
                log(`${arrow} execute ${c.code}`);
            } else if (type.startsWith('comm_')) {
                const data = c.data && c.data.method ? ` ${c.data.method} ${JSON.stringify(c.data.state)}` : '';
                log(`${arrow} ${type} ${id(c.comm_id)} ${c.target_name || ''}${data} subshell ${id(msg.header.subshell_id)}`);
            } else if (type.includes('subshell')) {
                log(`${arrow} ${type} ${id(c.subshell_id)}`);
            }
        });
    };
    watch(context.session.kernel);
    context.kernelChanged.connect((_, change) => change.newValue && watch(change.newValue));
}"""


def slider(page: Page, cell: int) -> Locator:
    """The slider view in cell ``cell``'s output."""
    return page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(".jp-OutputArea-output .widget-hslider")


def readout(view: Locator) -> str:
    return view.locator(".widget-readout").inner_text()


def shows(view: Locator, value: int, timeout: float = 10_000) -> bool:
    """Whether ``view``'s readout comes to show ``value`` within ``timeout`` ms."""
    from playwright.sync_api import expect

    try:
        expect(view.locator(".widget-readout")).to_have_text(str(value), timeout=timeout)
    except AssertionError:
        return False
    return True


def kernel_value(page: Page, cell: int) -> int:
    """``s.value`` in the kernel, printed by a new cell ``cell``."""
    from playwright.sync_api import expect

    printed = run_cell(page, cell, "print('value', s.value)").last
    expect(printed).to_contain_text("value ", timeout=30_000)
    return int(printed.inner_text().split()[1])


def press_right(page: Page, view: Locator) -> int:
    """Press the right arrow key on ``view``'s handle, as a user moving it would; its new value."""
    from playwright.sync_api import expect

    before = readout(view)
    view.locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    expect(view.locator(".widget-readout")).not_to_have_text(before, timeout=5_000)
    return int(readout(view))


def test_slider_shown_before_a_suspend_works_after_the_resume(lab: Server) -> None:  # noqa: F811 (the fixture)
    from playwright.sync_api import expect

    wrong: list[str] = []  # what the page gets wrong after the resume, all asserted at the end
    with browser_page(lab, "widgets") as (page, shot):
        new_notebook(page)
        page.evaluate(WATCH_KERNEL_JS)
        status = page.locator(STATUS)
        run_cell(page, 0, 'import ipywidgets as widgets; s = widgets.IntSlider(value=7, description="speed"); s')
        old = slider(page, 0)
        expect(old.locator(".widget-label")).to_have_text("speed", timeout=60_000)
        expect(old.locator(".widget-readout")).to_have_text("7")
        shot("slider-7")

        run_cell(page, 1, "s.value = 9")
        expect(old.locator(".widget-readout")).to_have_text("9", timeout=30_000)
        shot("slider-9")

        toggle = page.locator(TOGGLE)
        expect(toggle).to_be_enabled(timeout=30_000)
        toggle.click()
        expect(status).to_have_attribute("data-state", "suspended", timeout=60_000)
        expect(old.locator(".widget-readout")).to_have_text("9")  # the page keeps its view meanwhile
        shot("suspended")

        # the cell resumes the kernel, then runs against the restored slider
        run_cell(page, 2, "s.value = 42")
        expect(page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").nth(2)).to_contain_text("[3]", timeout=90_000)
        expect(status).to_have_attribute("data-state", "running", timeout=30_000)
        if not shows(old, 42):
            wrong.append(f"s.value = 42: the slider shown before the suspend shows {readout(old)}")
        shot("resumed-value-42")

        # a new display of the restored slider renders, with its value
        run_cell(page, 3, "s")
        new = slider(page, 3)
        expect(new.locator(".widget-label")).to_have_text("speed", timeout=30_000)
        expect(new.locator(".widget-readout")).to_have_text("42", timeout=10_000)
        shot("new-display-42")

        # typing a value into the new slider's readout sets it in the kernel, and both sliders show it
        new.locator(".widget-readout").click()
        page.keyboard.press("Control+A")
        page.keyboard.type("55")
        page.keyboard.press("Enter")
        if (value := kernel_value(page, 4)) != 55:
            wrong.append(f"55 typed into the new slider: the kernel has {value}")
        if not shows(old, 55, timeout=3_000):
            wrong.append(f"55 typed into the new slider: the slider shown before the suspend shows {readout(old)}")
        shot("new-slider-typed-55")

        # the arrow key on the new slider's handle, then on the old one's: the kernel follows each
        for name, view, other, cell in (("new", new, old, 5), ("old", old, new, 6)):
            moved_to = press_right(page, view)
            if (value := kernel_value(page, cell)) != moved_to:
                wrong.append(f"the {name} slider moved to {moved_to}: the kernel has {value}")
            if not shows(other, moved_to, timeout=3_000):
                wrong.append(f"the {name} slider moved to {moved_to}: the other shows {readout(other)}")
            shot(f"{name}-slider-arrow-right")
        seen = page.evaluate("window.gpuckptSeen")

        # a page loaded after the resume asks the kernel for its widgets: the slider the saved
        # notebook shows renders from the restored one, and moves it
        page.evaluate("window.jupyterapp.shell.currentWidget.context.save()")
        page.reload()
        reloaded = slider(page, 0)
        if not shows(reloaded, moved_to, timeout=60_000):
            wrong.append(f"the page reloaded: the slider shows {readout(reloaded) if reloaded.count() else 'nothing'}")
        else:
            moved_to = press_right(page, reloaded)
            if (value := kernel_value(page, 7)) != moved_to:
                wrong.append(f"the page reloaded, its slider moved to {moved_to}: the kernel has {value}")
        shot("reloaded-arrow-right")
    # the page never sees the kernel restart (the gpuckpt websocket holds the cell instead)
    assert seen["kernels"] == 1, seen
    assert not [line for line in seen["traffic"] if line.startswith(("status restarting", "status dead"))], seen
    kernel_log = [line for line in (lab.root.parent / "server.log").read_text().splitlines() if "Cannot handle" in line]
    traffic = "\n  ".join(seen["traffic"])
    assert not wrong, "\n".join(["after the resume:", *wrong, "the kernel said:", *kernel_log,
                                  f"the page's kernel connection saw:\n  {traffic}"])
