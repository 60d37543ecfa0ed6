"""A suspended kernel resumes by itself when a cell is run over its websocket."""

from __future__ import annotations

from server_fixtures import api, run, start_kernel, ws_execute

from jupyter_gpuckpt.websocket import SuspendAwareConnection


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
