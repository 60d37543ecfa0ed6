"""A suspended kernel resumes by itself when a cell is run over its websocket."""

from __future__ import annotations

import asyncio

import pytest
from server_fixtures import api, run, start_kernel, ws_execute
from tornado.httpclient import HTTPClientError

from jupyter_gpuckpt.extension.websocket import SuspendAwareConnection


async def test_execute_over_websocket_resumes_a_suspended_kernel(jp_fetch, jp_ws_fetch, jp_serverapp):
    # the extension installs its websocket class itself (not through the test's config)
    assert jp_serverapp.web_app.settings["kernel_websocket_connection_class"] is SuspendAwareConnection
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "answer = 6 * 7")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")

    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        reply, iopub = await ws_execute(ws, "answer + 1")
    finally:
        ws.close()
    states = [m["content"]["execution_state"] for m in iopub if m["msg_type"] == "status"]
    assert states[0] == "busy"  # at once, while the kernel is restored; then the cell runs
    assert reply["content"]["status"] == "ok"
    results = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "execute_result"]
    assert results == ["43"]
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "running"


async def test_the_cell_that_resumes_shows_the_restore_report(jp_fetch, jp_ws_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 41\nrows = (i for i in range(3))")  # a generator is not saved
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")

    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        reply, iopub = await ws_execute(ws, "kept + 1")
        again, later = await ws_execute(ws, "kept + 2")
    finally:
        ws.close()
    assert reply["content"]["status"] == "ok" and again["content"]["status"] == "ok"
    shown = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "display_data"]
    assert len(shown) == 1, shown  # as output of that cell, before its own result
    report = shown[0]
    assert report.startswith("Resumed from checkpoint ")
    assert "Restored 1 variable " in report and "rows (generator)" in report
    assert "Run `%gpuckpt rebuild` to re-run cell(s) 1" in report
    assert not [m for m in later if m["msg_type"] == "display_data"]  # shown once


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "rebuild_skipped": "always"}])
async def test_a_resume_can_rebuild_by_itself(jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "rows = (i * i for i in range(3))")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["rebuild_skipped"] == "always"
    deadline = asyncio.get_running_loop().time() + 60
    while not (model["report"] or {}).get("rebuilt"):
        assert asyncio.get_running_loop().time() < deadline, "the resume did not rebuild"
        await asyncio.sleep(0.1)
        model = await api(jp_fetch, "kernels", kernel_id)
    assert model["report"]["rebuilt"]["cells"] == [1] and model["report"]["rebuilt"]["failed"] is None
    assert (await run(jp_serverapp, kernel_id, "print(next(rows))")).strip() == "0"


async def test_rebuild_through_the_api(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "rows = (i for i in range(3))")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    resumed = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert resumed["report"]["cells_to_rerun"] == [1] and "rebuilt" not in resumed["report"]
    model = await api(jp_fetch, "kernels", kernel_id, "rebuild", method="POST", wait="1")
    assert model["rebuilt"]["cells"] == [1] and model["rebuilt"]["names"] == ["rows"]
    assert model["report"]["rebuilt"] == model["rebuilt"]
    assert (await run(jp_serverapp, kernel_id, "print(next(rows))")).strip() == "0"


async def test_rebuild_through_the_api_keeps_restored_names_unless_asked(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "count = 1")
    await run(jp_serverapp, kernel_id, "count = 10\nrows = (i for i in range(3))")
    await run(jp_serverapp, kernel_id, "count += 1")
    with pytest.raises(HTTPClientError) as refused:
        await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1", keep="1")
    assert refused.value.code == 400
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    planned = await api(jp_fetch, "kernels", kernel_id, "rebuild", method="POST", wait="1", keep="1")
    assert planned["rebuilt"]["cells"] == [2] and planned["rebuilt"]["kept"] == {"count": 2}
    assert [cell["reassigns"] for cell in planned["report"]["rebuild_plan"]["cells"]] == [["count"]]
    assert (await run(jp_serverapp, kernel_id, "print(count, next(rows))")).split() == ["10", "0"]
