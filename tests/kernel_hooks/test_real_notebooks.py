"""Real notebooks, suspended and resumed through a real server, show what they show uninterrupted (issue 25).

Each notebook in tests/notebooks/ runs in two kernels of one server, over each kernel's websocket as a
browser runs it: straight through, and suspended after the cell tagged ``suspend-here``, the next cells then
run as a user would the next morning (the kernel resumes by itself). Every output of the cells after the
suspension point must be the same in both: stdout and stderr, each rich output (``image/png`` compared as
bytes), errors, execution counts, and widgets by their state, not by their model ids (a new comm may get a
new id; the fields every model of a class has alike, and unset ones, are left out). A cell whose metadata
has ``widget_input`` (``{"description": ..., "state": {...}}``) is preceded by the user changing that widget
in the last view the page shows of it, as dragging a slider does.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from paths import TESTS
from server_fixtures import api, run, start_kernel, ws_request

NOTEBOOKS = sorted((TESTS / "notebooks").glob("*.ipynb"))
SUSPEND_TAG = "suspend-here"
REPORT_PREFIX = "Resumed from checkpoint "
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MODEL_REF = re.compile(r"^IPY_MODEL_(.+)$")
DIFF_LINES = 40
"""Lines of diff shown per cell."""
MODEL_CLASS_FIELDS = {"_model_module", "_model_module_version", "_view_module", "_view_module_version",
                      "_view_name", "_view_count"}
"""Widget state fields that follow from ``_model_name`` and the library's version."""
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""bokeh's ``show`` puts a fresh uuid4 in each output's div and script: not the kernel's state."""


class NotebookPage:
    """A notebook's websocket to its kernel, and the widget models the page was sent over it."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.models: dict[str, dict[str, Any]] = {}
        self.views: list[str] = []
        """The models of the widget views shown, in order."""

    async def run_cell(self, code: str) -> dict[str, Any]:
        """Run a cell; what the page shows for it."""
        return await self._request("execute_request", {"code": code, "silent": False, "store_history": True,
                                                      "user_expressions": {}, "allow_stdin": False})

    async def set_widget(self, description: str, state: dict[str, Any]) -> dict[str, Any]:
        """Change the widget with this description in the last view that shows one, as a user does."""
        for view in reversed(self.views):
            comm_id = self._find(view, description)
            if comm_id is not None:
                shown = await self._request("comm_msg", {"comm_id": comm_id, "data": {
                    "method": "update", "state": state, "buffer_paths": []}})
                return {"widget input": f"{description} <- {state}", **shown}
        raise AssertionError(f"the page shows no widget {description!r}")

    async def _request(self, msg_type: str, content: dict[str, Any], timeout: float = 180) -> dict[str, Any]:
        text, msg_id = ws_request(msg_type, content)
        await self.ws.write_message(text)
        shown: dict[str, Any] = {"stdout": "", "stderr": "", "outputs": []}
        replied = msg_type != "execute_request"  # only an execute request has a reply to wait for
        idle = False
        while not (replied and idle):
            raw = await asyncio.wait_for(self.ws.read_message(), timeout)
            assert isinstance(raw, str), f"the websocket closed or sent binary: {raw!r:.200}"
            msg = json.loads(raw)
            ours = msg["parent_header"].get("msg_id") == msg_id
            kind, body = msg["msg_type"], msg["content"]
            if kind in ("comm_open", "comm_msg", "comm_close"):
                self._track(kind, body)  # the page keeps every widget model it is sent, from any request
            if not ours:
                continue
            if msg["channel"] == "shell":
                replied = True
                shown["status"] = body["status"]
                shown["execution_count"] = body.get("execution_count")
            elif kind == "status":
                idle = body["execution_state"] == "idle"
            elif kind == "stream":
                shown[body["name"]] += body["text"]
            elif kind in ("display_data", "execute_result"):
                shown["outputs"].append(self._bundle(body["data"]))
            elif kind == "error":
                shown["outputs"].append({"error": f"{body['ename']}: {body['evalue']}",
                                         "traceback": _strip_ansi("\n".join(body["traceback"]))})
            elif kind == "comm_msg":
                shown["outputs"].append({"widget update": self._name(body["comm_id"]),
                                         "state": self._resolve(body["data"].get("state", {}))})
        return shown

    def _track(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "comm_open" and body.get("target_name") == "jupyter.widget":
            self.models[body["comm_id"]] = dict(body["data"]["state"])
        elif kind == "comm_msg" and body["comm_id"] in self.models:
            self.models[body["comm_id"]].update(body["data"].get("state", {}))
        elif kind == "comm_close":
            self.models.pop(body["comm_id"], None)

    def _name(self, comm_id: str) -> str:
        state = self.models.get(comm_id)
        if state is None:
            return "a model the page was never sent"
        return f"{state.get('_model_name')}({state.get('description', '')!r})"

    def _find(self, model_id: str, description: str, depth: int = 0) -> str | None:
        """The model in the view tree of ``model_id`` with this description."""
        state = self.models.get(model_id, {})
        if state.get("description") == description:
            return model_id
        for child in state.get("children", []) if depth < 10 else []:
            found = self._find(child.removeprefix("IPY_MODEL_"), description, depth + 1)
            if found is not None:
                return found
        return None

    def _resolve(self, value: Any, depth: int = 0) -> Any:
        """``value`` with each ``IPY_MODEL_<id>`` reference replaced by the state of that model."""
        if isinstance(value, dict):
            return {k: self._resolve(v, depth) for k, v in sorted(value.items())
                    if v is not None and k not in MODEL_CLASS_FIELDS}
        if isinstance(value, list):
            return [self._resolve(v, depth) for v in value]
        match = MODEL_REF.match(value) if isinstance(value, str) else None
        if match is None:
            return value
        state = self.models.get(match.group(1))
        if state is None or depth > 10:
            return "IPY_MODEL of a model the page was never sent"
        return self._resolve(state, depth + 1)

    def _bundle(self, data: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        for mime, value in sorted(data.items()):
            if mime == WIDGET_VIEW:
                self.views.append(value["model_id"])
                shown[mime] = self._resolve(f"IPY_MODEL_{value['model_id']}")
            elif mime == "image/png":
                png = base64.b64decode(value)
                shown[mime] = f"{len(png)} bytes, sha256 {hashlib.sha256(png).hexdigest()}"
            elif isinstance(value, str):
                shown[mime] = _numbered_uuids(value)
            else:
                shown[mime] = value
        return shown


def _numbered_uuids(text: str) -> str:
    seen: dict[str, str] = {}
    return UUID.sub(lambda m: seen.setdefault(m.group(0), f"<uuid {len(seen) + 1}>"), text)


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _cells(path: Path) -> tuple[list[Any], int]:
    """The notebook's code cells, and how many of them run before the suspension."""
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    marked = [i for i, c in enumerate(cells) if SUSPEND_TAG in c.metadata.get("tags", [])]
    assert len(marked) == 1, f"{path.name} must tag exactly one cell {SUSPEND_TAG!r}"
    return cells, marked[0] + 1


async def _step(page: NotebookPage, cell: Any) -> list[dict[str, Any]]:
    """What the page shows for one cell: the user's widget input before it, if any, then the cell."""
    shown = []
    if "widget_input" in cell.metadata:
        shown.append(await page.set_widget(**cell.metadata["widget_input"]))
    shown.append(await page.run_cell(cell.source))
    return shown


@dataclass
class Server:
    """The test server's fixtures a page needs."""

    fetch: Any
    ws_fetch: Any
    app: Any


async def _open_page(server: Server) -> tuple[str, NotebookPage]:
    kernel_id = await start_kernel(server.fetch)
    await run(server.app, kernel_id, "")  # waits until the kernel answers; an empty cell is not counted
    ws = await server.ws_fetch("api", "kernels", kernel_id, "channels", params={"session_id": uuid.uuid4().hex})
    return kernel_id, NotebookPage(ws)


async def _straight(server: Server, cells: list[Any], cut: int) -> list[list[dict[str, Any]]]:
    """Run every cell; what the page showed for those after the suspension point."""
    _, page = await _open_page(server)
    try:
        shown = [await _step(page, cell) for cell in cells]
    finally:
        page.ws.close()
    for cell, steps in zip(cells, shown, strict=True):
        assert steps[-1]["status"] == "ok", (f"the notebook fails even uninterrupted, in:\n{cell.source}\n"
                                             + "\n".join(_lines(steps)))
    return shown[cut:]


async def _resumed(server: Server, cells: list[Any], cut: int) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """Run to the suspension point, suspend, and continue; what the page showed after it, and the
    kernel's model at the end."""
    kernel_id, page = await _open_page(server)
    try:
        for cell in cells[:cut]:
            await _step(page, cell)
        model = await api(server.fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="suspend")
        assert model["state"] == "suspended", f"the suspend failed: {model['last_error']}"
        shown = [await _step(page, cell) for cell in cells[cut:]]
    finally:
        page.ws.close()
    first = shown[0][-1]["outputs"]
    reports = [o for o in first if o.get("text/plain", "").startswith(REPORT_PREFIX)]
    assert len(reports) == 1, f"the first cell after the suspend did not show one restore report: {first}"
    first.remove(reports[0])
    resumed = await api(server.fetch, "kernels", kernel_id)
    assert resumed["state"] == "running"
    assert resumed["report"]["id"] == model["last_checkpoint"]["id"], "it did not resume from its suspension"
    return shown, resumed["report"]


def _lines(shown: list[dict[str, Any]]) -> list[str]:
    """What the page shows for a cell, a line per line of text, for a diff to read."""
    lines = []
    for step in shown:
        if "widget input" in step:
            lines.append(f"the user sets {step['widget input']}")
        else:
            lines.append(f"status {step['status']}, execution count {step['execution_count']}")
        lines += [f"{name}| {line}" for name in ("stdout", "stderr") for line in step[name].splitlines()]
        for i, output in enumerate(step["outputs"]):
            for mime, value in output.items():
                text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True)
                lines += [f"output {i} {mime}| {line}" for line in text.splitlines()]
    return lines


def _differences(cells: list[Any], straight: list[list[dict[str, Any]]],
                 resumed: list[list[dict[str, Any]]]) -> list[str]:
    """A readable diff for each cell whose outputs differ."""
    found = []
    for cell, before, after in zip(cells, straight, resumed, strict=True):
        if before != after:
            diff = list(difflib.unified_diff(_lines(before), _lines(after), "uninterrupted", "resumed",
                                             lineterm="", n=1))
            more = f"\n(and {len(diff) - DIFF_LINES} more lines)" if len(diff) > DIFF_LINES else ""
            found.append(f"--- cell:\n{cell.source}\n" + "\n".join(diff[:DIFF_LINES]) + more)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
async def test_a_resumed_notebook_shows_what_it_shows_uninterrupted(path, jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                    monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the kernels inherit it: nothing may come from the hub
    cells, cut = _cells(path)
    server = Server(jp_fetch, jp_ws_fetch, jp_serverapp)
    # both at once: the two kernels share the machine, not any state
    straight, (resumed, report) = await asyncio.gather(_straight(server, cells, cut), _resumed(server, cells, cut))
    problems = _differences(cells[cut:], straight, resumed)
    if report["skipped"] or report["lost"]:
        problems.insert(0, f"the restore left variables out:\n{report['text']}")
    if problems:
        pytest.fail(f"{path.name}, suspended after code cell {cut}:\n" + "\n\n".join(problems), pytrace=False)
