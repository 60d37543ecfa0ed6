"""Operations end in a safe state, say what they did, and lose nothing: shutdowns forget,
deletes refuse what a suspended kernel needs, failures and server stops restore the state."""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import KERNEL_NAME, api, run, start_kernel
from tornado.httpclient import HTTPClientError

import jupyter_gpuckpt.placement.local
from jupyter_gpuckpt.placement.gpus import GPUPool


def _app(serverapp: Any) -> Any:
    return serverapp.web_app.settings["gpuckpt_app"]


async def _error(request: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as raised:
        await request
    return raised.value.code, json.loads(raised.value.response.body)["message"]


async def test_a_shut_down_suspended_kernel_is_forgotten(jp_fetch, jp_serverapp):
    app = _app(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    ledger = Path(app.ledger_path)
    assert kernel_id in json.loads(ledger.read_text())
    assert kernel_id in app.parts.registry.watcher.watching()

    await jp_fetch("api", "kernels", kernel_id, method="DELETE")

    await app.parts.registry.records.saved()  # the shutdown's write, in the background
    assert kernel_id not in json.loads(ledger.read_text())  # not registered again after a restart
    assert app.parts.registry.records.get(kernel_id) is None
    assert kernel_id not in app.parts.registry.watcher.watching()  # its IOPub watcher is closed
    # its checkpoints stay until retention removes them: the staged one is still written to the
    # store, and its copy in host memory then goes
    await app.parts.write_behind.durable(model["last_checkpoint"]["id"])
    store = Path(app.store_root) / getpass.getuser() / "checkpoints"
    assert (store / model["last_checkpoint"]["id"] / "manifest.json").exists()
    assert app.parts.host_memory.ids() == []


async def test_a_checkpoint_a_suspended_kernel_needs_cannot_be_deleted(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 'here'")
    older = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    needed = (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1"))["last_checkpoint"]
    await _app(jp_serverapp).parts.write_behind.durable(needed["id"])  # till then, the older one is its fallback

    code, message = await _error(api(jp_fetch, "checkpoints", needed["id"], method="DELETE"))
    assert code == 409
    assert f"checkpoint {needed['id']} is the one suspended kernel {kernel_id}" in message
    await api(jp_fetch, "checkpoints", older["id"], method="DELETE")  # one it does not need: fine
    assert [c["id"] for c in await api(jp_fetch, "kernels", kernel_id, "checkpoints")] == [needed["id"]]

    await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert (await run(jp_serverapp, kernel_id, "print(kept)")).strip() == "here"
    await api(jp_fetch, "checkpoints", needed["id"], method="DELETE")  # running again: it may go
    assert (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"] is None

    assert (await _error(api(jp_fetch, "checkpoints", needed["id"], method="DELETE")))[0] == 404
    assert (await _error(api(jp_fetch, "checkpoints", "not-an-id", method="DELETE")))[0] == 400
    code, message = await _error(api(jp_fetch, "checkpoints", "２０２４０１０１-０００００００-deadbeef", method="DELETE"))
    assert code == 400  # non-ASCII digits are not a checkpoint id


async def test_a_failure_while_ending_the_process_leaves_a_safe_state(jp_fetch, jp_serverapp, jp_ws_fetch):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 41")

    async def broken(*args: Any, **kwargs: Any) -> list[str]:
        raise RuntimeError("the process table could not be read")

    # its own patch, undone alone (pytest-jupyter's environment stays patched)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jupyter_gpuckpt.placement.local, "end_kernel_tree", broken)
        code, message = await _error(api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1"))
        assert code == 500 and "RuntimeError: the process table could not be read" in message
        model = await api(jp_fetch, "kernels", kernel_id)
        assert model["state"] == "running"  # not "checkpointing" for good: the process still runs
        assert "the process table could not be read" in model["last_error"]
        assert (await run(jp_serverapp, kernel_id, "print(x + 1)")).strip() == "42"

    assert (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1"))["state"] == "suspended"


async def test_a_failure_after_the_process_ended_leaves_it_suspended_and_resumable(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 41")

    async def broken(self: Any, kernel_id: str) -> None:
        raise RuntimeError("the GPU pool could not be updated")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GPUPool, "release", broken)
        code, message = await _error(api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1"))
        assert code == 500 and "the GPU pool could not be updated" in message
        model = await api(jp_fetch, "kernels", kernel_id)
        # saved, and the process is gone: suspended, not "checkpointing" for good
        assert model["state"] == "suspended" and model["last_checkpoint"] is not None
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["state"] == "running"
    assert (await run(jp_serverapp, kernel_id, "print(x + 1)")).strip() == "42"


async def test_shutting_down_a_kernel_whose_resume_failed(jp_fetch, jp_serverapp):
    app = _app(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    checkpoint = (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1"))["last_checkpoint"]
    await app.parts.write_behind.durable(checkpoint["id"])
    for root in (Path(app.store_root), app.parts.host_memory.root):  # the checkpoint's data is gone
        shutil.rmtree(root / getpass.getuser() / "blobs")

    code, message = await _error(api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))
    assert code == 500 and "missing" in message
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "suspended" and model["last_checkpoint"]["id"] == checkpoint["id"]
    assert model["last_activity"] is not None

    response = await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    assert response.code == 204
    assert kernel_id not in jp_serverapp.kernel_manager


async def test_no_ops_say_what_happened_and_a_new_operation_clears_the_notice(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["outcome"] == \
        "already running"
    suspended = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert suspended["outcome"] == "done"
    again = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert again["outcome"] == "already suspended"
    assert again["last_checkpoint"]["id"] == suspended["last_checkpoint"]["id"]  # nothing new was saved

    record = _app(jp_serverapp).parts.registry.records.get(kernel_id)
    record.notice = "an old notice"
    resumed = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert resumed["outcome"] == "done" and resumed["notice"] is None


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_background_failures_are_logged_with_their_traceback(jp_fetch, jp_serverapp, monkeypatch):
    app = _app(jp_serverapp)
    logged = _Records()
    app.log.addHandler(logged)
    kernel_id = await start_kernel(jp_fetch)

    async def broken(*args: Any, **kwargs: Any) -> list[str]:
        raise RuntimeError("a bug in the suspend")

    monkeypatch.setattr(jupyter_gpuckpt.placement.local, "end_kernel_tree", broken)
    response = await jp_fetch("api", "gpuckpt", "kernels", kernel_id, "suspend", method="POST", body=b"")
    assert response.code == 202
    deadline = asyncio.get_running_loop().time() + 60
    while not any(r.exc_info for r in logged.records):
        assert asyncio.get_running_loop().time() < deadline, "the failure was not logged"
        await asyncio.sleep(0.1)
    app.log.removeHandler(logged)
    failure = next(r for r in logged.records if r.exc_info)
    assert f"suspend {kernel_id}" in failure.getMessage()
    assert failure.exc_info[0].__name__ == "OperationFailed" and failure.exc_info[2] is not None  # a traceback
    assert (await api(jp_fetch, "kernels", kernel_id))["last_error"].endswith("a bug in the suspend")


@pytest.fixture
def one_test_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps([{"uuid": "GPU-test-0", "name": "Test GPU", "memory_total": 2**34}]))
    monkeypatch.setenv("JUPYTER_GPUCKPT_TEST_GPUS", str(inventory))
    GPUPool.clear_instance()


async def test_a_server_stop_cancels_background_work_into_a_safe_state(one_test_gpu, jp_fetch, jp_serverapp):
    app = _app(jp_serverapp)
    waiting = await start_kernel(jp_fetch)
    await run(jp_serverapp, waiting, "kept = 7")
    checkpoint = (await api(jp_fetch, "kernels", waiting, "suspend", method="POST", wait="1"))["last_checkpoint"]
    await app.parts.write_behind.durable(checkpoint["id"])
    holder = await start_kernel(jp_fetch, KERNEL_NAME)  # takes the only GPU
    assert (await api(jp_fetch, "kernels", holder))["gpus"]

    response = await jp_fetch("api", "gpuckpt", "kernels", waiting, "resume", method="POST", body=b"")
    assert response.code == 202
    deadline = asyncio.get_running_loop().time() + 60
    while not (await api(jp_fetch, "kernels", waiting))["waiting_for_gpus"]:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    assert app.tasks.running() == ["policy loop", f"resume {waiting}"] or \
        app.tasks.running() == [f"resume {waiting}"]

    await app.stop_extension()

    assert app.tasks.running() == []
    record = app.parts.registry.records.get(waiting)
    assert record.state.value == "suspended" and record.last_error == "the server stopped during the operation"
    assert json.loads(Path(app.ledger_path).read_text())[waiting]["state"] == "suspended"
