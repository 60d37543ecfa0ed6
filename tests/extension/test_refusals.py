"""What cannot succeed is refused at once, with its reason, and logged as one line: a request
on a kernel that is not checkpointable or in the wrong state, a checkpoint folder that is a
symbolic link. Answers stay within the OpenAPI file; untrusted checkpoints stay listed.
Real server, real kernels."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from server_fixtures import api, run, start_kernel
from tornado.httpclient import HTTPClientError

from gpuckpt_store import CheckpointStore
from jupyter_gpuckpt.kernels.lifecycle import State

SPEC = Path(__file__).resolve().parents[2] / "docs" / "developers" / "rest-api.yaml"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def errors(self) -> list[str]:
        """What was logged as an error, or with a traceback."""
        return [r.getMessage() for r in self.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.fixture
def logged(jp_serverapp: Any) -> Iterator[_Records]:
    """Everything the server and the extension log during the test."""
    handler = _Records()
    loggers = {jp_serverapp.log, _app(jp_serverapp).log, logging.getLogger("tornado")}
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


def _app(serverapp: Any) -> Any:
    return serverapp.web_app.settings["gpuckpt_app"]


async def _refused(request: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as raised:
        await request
    return raised.value.code, json.loads(raised.value.response.body)["message"]


async def _until(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _outcomes(schema: str) -> list[str]:
    """The ``outcome`` values the OpenAPI file allows in ``schema``'s answers."""
    spec = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    parts = spec["components"]["schemas"][schema]["allOf"]
    return list(next(p for p in parts if "properties" in p)["properties"]["outcome"]["enum"])


@pytest.mark.parametrize("wait", [None, "1"])
async def test_suspend_and_park_of_a_kernel_that_is_not_checkpointable_are_refused_at_once(
        jp_fetch, jp_serverapp, logged, wait):
    plain = await start_kernel(jp_fetch, "python3")  # ipykernel's own kernelspec, not the gpuckpt provisioner
    for mode in (None, "park", "suspend"):
        params = {k: v for k, v in (("wait", wait), ("mode", mode)) if v is not None}
        code, message = await _refused(api(jp_fetch, "kernels", plain, "suspend", method="POST", **params))
        assert (code, message) == (409, f"kernel {plain} was not started with a gpuckpt kernelspec; it can be "
                                         "checkpointed but not suspended"), mode
    assert f"suspend {plain}" not in _app(jp_serverapp).tasks.running()  # nothing started
    model = await api(jp_fetch, "kernels", plain)
    assert (model["state"], model["suspendable"], model["last_error"]) == ("running", False, None)
    assert logged.errors() == []


async def test_an_action_the_kernels_state_refuses_is_refused_at_once(jp_fetch, jp_serverapp, logged):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 42")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    for action in ("checkpoint", "rebuild"):
        for wait in ({}, {"wait": "1"}):
            code, message = await _refused(api(jp_fetch, "kernels", kernel_id, action, method="POST", **wait))
            assert (code, message) == (409, f"kernel {kernel_id} is suspended, not running"), (action, wait)
    started = {f"checkpoint {kernel_id}", f"rebuild {kernel_id}"}
    assert not started & set(_app(jp_serverapp).tasks.running())  # nothing started
    # what the state allows still starts in the background
    assert (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST"))["outcome"] == "started"
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST"))["outcome"] == "started"
    await _until(lambda: f"resume {kernel_id}" not in _app(jp_serverapp).tasks.running(), "the resume")
    assert (await run(jp_serverapp, kernel_id, "print(kept)")).strip() == "42"
    assert logged.errors() == []


async def test_a_refusal_met_in_the_background_is_one_info_line(jp_fetch, jp_serverapp, logged):
    """A rebuild asked while a suspend runs cannot be judged before it starts (the suspend may
    fail, and the kernel run on): it starts, waits for the suspend, and is refused then."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 42")
    assert (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST"))["outcome"] == "started"
    assert (await api(jp_fetch, "kernels", kernel_id, "rebuild", method="POST"))["outcome"] == "started"
    await _until(lambda: f"rebuild {kernel_id}" not in _app(jp_serverapp).tasks.running(), "the rebuild")

    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "suspended"
    assert model["last_error"] == f"kernel {kernel_id} is suspended, not running"
    refusals = [r for r in logged.records if r.getMessage().startswith("gpuckpt: ") and "refused" in r.getMessage()]
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in refusals] == [
        (logging.INFO, f"gpuckpt: rebuild of {kernel_id} (request) refused: kernel {kernel_id} is suspended, "
                       "not running", None)]
    assert logged.errors() == []


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "keep_checkpoints": 1}])
async def test_a_checkpoint_folder_that_is_a_symbolic_link_is_neither_followed_nor_removed(
        jp_fetch, jp_serverapp, logged, tmp_path, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 42")
    linked = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    store = CheckpointStore(_app(jp_serverapp).store_root)
    folder = store.checkpoints / linked["id"]
    elsewhere = tmp_path / "elsewhere"
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    target = sorted(p.name for p in elsewhere.iterdir())

    code, message = await _refused(api(jp_fetch, "checkpoints", linked["id"], method="DELETE"))
    assert code == 409
    assert message == (f"checkpoint {linked['id']} is a symbolic link in the store ({folder}), which the server "
                       "neither follows nor removes; remove the link yourself if it is not wanted")
    # keep_checkpoints = 1: the next checkpoint prunes the older one, and leaves the link alone
    newer = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    assert newer["id"] != linked["id"]
    assert folder.is_symlink() and sorted(p.name for p in elsewhere.iterdir()) == target
    store.read_manifest(linked["id"])  # whole, through the link
    assert logged.errors() == []


async def test_a_checkpoint_whose_manifest_cannot_be_trusted_is_listed_with_its_problem(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "kept = 42")
    tampered = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    trusted = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    store = CheckpointStore(_app(jp_serverapp).store_root)
    path = store.manifest_path(tampered["id"])
    manifest = json.loads(path.read_text())
    manifest["notebook"] = "changed after it was signed.ipynb"
    path.chmod(0o600)
    path.write_text(json.dumps(manifest))

    listed = {c["id"]: c for c in await api(jp_fetch, "kernels", kernel_id, "checkpoints")}
    assert set(listed) == {tampered["id"], trusted["id"]}
    assert listed[trusted["id"]]["problem"] is None
    shown = listed[tampered["id"]]
    assert "has a bad signature" in shown["problem"] and "refusing to load it" in shown["problem"]
    assert shown["notebook"] is None and shown["durability"] == "durable"  # nothing of it is taken as true
    other = await start_kernel(jp_fetch)
    assert await api(jp_fetch, "kernels", other, "checkpoints") == []  # listed under the kernel it names only


async def test_returned_answers_outcomes_the_openapi_file_allows(jp_fetch, jp_serverapp):
    allowed = _outcomes("ReturnedResult")
    # the outcome for each state a kernel can be in and not be away
    for state in set(State) - {State.SUSPENDED, State.PARKED}:
        assert f"nothing to resume: the kernel is {state.value}" in allowed, state
    kernel_id = await start_kernel(jp_fetch)
    response = await jp_fetch("api", "gpuckpt", "kernels", kernel_id, "returned", method="POST", body=b"")
    assert (response.code, json.loads(response.body)["outcome"]) == (200, "nothing to resume: the kernel is running")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    response = await jp_fetch("api", "gpuckpt", "kernels", kernel_id, "returned", method="POST", body=b"")
    assert (response.code, json.loads(response.body)["outcome"]) == (202, "started")
    assert "started" in allowed
    await _until(lambda: f"resume {kernel_id}" not in _app(jp_serverapp).tasks.running(), "the resume")


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "resume_on_return": False}])
async def test_returned_with_resume_on_return_off_answers_an_outcome_the_openapi_file_allows(
        jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    response = await jp_fetch("api", "gpuckpt", "kernels", kernel_id, "returned", method="POST", body=b"")
    outcome = json.loads(response.body)["outcome"]
    assert (response.code, outcome) == (200, "nothing started: resume_on_return is off")
    assert outcome in _outcomes("ReturnedResult")
