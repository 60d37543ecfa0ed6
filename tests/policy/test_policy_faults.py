"""The policy outlives its faults, and a slow GPU reading stalls no request.

Real server, real kernels, real faults: the GPU inventory (``$JUPYTER_GPUCKPT_TEST_GPUS``,
read at every reading as NVML would be) made invalid, or pointed at a FIFO nobody writes to,
so that reading it hangs as a stuck NVML does; a kernel whose process is stopped, so that it
answers nothing; a kernel whose last checkpoint was deleted. One stand-in: a store that takes
seconds to answer whether it can be written (a hung network file system, which this machine
cannot mount) is its check made to wait.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_fixtures import api, loop_stalls, run, start_kernel

from gpuckpt_store import writable_problem
from jupyter_gpuckpt.extension import app as gpuckpt_app
from jupyter_gpuckpt.placement.gpus import TEST_GPUS, GPUPool
from jupyter_gpuckpt.staging import retention

GPU = {"uuid": "GPU-test-a", "name": "Test GPU", "memory_total": 80 << 30}


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One described GPU, which the test's kernel takes."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([GPU]))
    monkeypatch.setenv(TEST_GPUS, str(path))
    return path


@pytest.fixture
def logged(jp_serverapp: Any, caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """What the extension logs (its logger does not propagate to the root one)."""
    log = _app(jp_serverapp).log
    log.addHandler(caplog.handler)
    caplog.handler.setLevel(logging.DEBUG)
    yield caplog
    log.removeHandler(caplog.handler)


def _app(serverapp: Any) -> Any:
    return serverapp.web_app.settings["gpuckpt_app"]


async def _until(condition: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.1)


async def _errors(jp_fetch: Any) -> dict[str, float]:
    """``jupyter_gpuckpt_policy_errors_total`` from the server's ``/metrics``, by source."""
    text = (await jp_fetch("metrics")).body.decode()
    return {s.labels["source"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "jupyter_gpuckpt_policy_errors_total"}


def _write(path: Path, text: str) -> None:
    """Change the inventory at once: a reading never sees it half written (another cause)."""
    path.with_suffix(".new").write_text(text)
    path.with_suffix(".new").replace(path)


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == level and text in r.getMessage()]


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 1.0, "policy_interval": 0.3, "warn_before": 0.0}])
async def test_the_policy_outlives_bad_gpu_readings_and_suspends_on_good_ones(
        inventory: Path, logged: pytest.LogCaptureFixture, jp_fetch: Any, jp_serverapp: Any,
        gpuckpt_config: dict[str, Any]) -> None:
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    _write(inventory, "[{not json")  # NVML answers garbage from now on
    before = await _errors(jp_fetch)  # the counters are the process's, across tests
    await jp_serverapp.extension_manager.start_all_extensions()  # the policy loop (pytest-jupyter starts none)

    async def failed_passes() -> bool:
        return (await _errors(jp_fetch)).get("gpus", 0) - before.get("gpus", 0) >= 5

    await _until(failed_passes, "five passes counted their failed GPU reading", timeout=30)
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["idle_seconds"] > 1.0 and model["state"] == "running"  # idle, but its GPU's use is unknown
    assert model["policy"]["action"] is None and "GPU use is unknown" in model["policy"]["reason"], model["policy"]
    assert "JSONDecodeError" in model["policy"]["reason"]
    errors = _lines(logged, logging.ERROR, "GPU reading")
    assert len(errors) == 1 and errors[0].exc_info is not None, [r.getMessage() for r in errors]
    assert len(_lines(logged, logging.DEBUG, "GPU reading")) >= 3  # the later ones: one debug line each

    # NVML answers, but no longer reports the kernel's GPU (as after a failed nvmlInit): no fresh figures
    counted = (await _errors(jp_fetch))["gpus"]
    _write(inventory, "[]")

    async def another_cause() -> bool:
        return len(_lines(logged, logging.ERROR, "GPU reading")) == 2

    await _until(another_cause, "the new cause is logged", timeout=30)
    assert "no longer reports GPU-test-a" in _lines(logged, logging.ERROR, "GPU reading")[1].getMessage()

    async def more_passes() -> bool:
        return (await _errors(jp_fetch))["gpus"] - counted >= 3

    await _until(more_passes, "three more passes counted it", timeout=30)
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "running" and "no longer reports GPU-test-a" in model["policy"]["reason"], model

    _write(inventory, json.dumps([GPU]))  # NVML is back

    async def suspended() -> bool:
        return bool((await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended")

    await _until(suspended, "the next passes suspend the idle kernel", timeout=60)
    assert len(_lines(logged, logging.INFO, "GPU reading works again")) == 1
    assert len(_lines(logged, logging.ERROR, "GPU reading")) == 2


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 0.5, "policy_interval": 3600.0}])
async def test_a_kernel_the_policy_cannot_suspend_does_not_keep_the_others(
        logged: pytest.LogCaptureFixture, jp_fetch: Any, jp_serverapp: Any, gpuckpt_config: dict[str, Any]) -> None:
    """``stuck``'s process is stopped (SIGSTOP), so it answers nothing and each of its suspends
    fails; ``pruned``'s last checkpoint was deleted, so it falls back to its first one, whose
    time is when that one was taken. Each pass decides and acts on both; ``stuck``'s failure is
    logged once and counted at every pass."""
    app = _app(jp_serverapp)
    stuck = await start_kernel(jp_fetch)
    pruned = await start_kernel(jp_fetch)
    await run(jp_serverapp, stuck, "x = 1")
    await run(jp_serverapp, pruned, "kept = 41")
    first = (await api(jp_fetch, "kernels", pruned, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    latest = (await api(jp_fetch, "kernels", pruned, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    await api(jp_fetch, "checkpoints", latest["id"], method="DELETE")  # it falls back to the first
    fallback = (await api(jp_fetch, "kernels", pruned))["last_checkpoint"]
    assert fallback["id"] == first["id"] and fallback["bytes_total"] == first["bytes_total"]
    assert 0 <= first["time"] - fallback["time"] < 2  # its manifest's creation time, to the second
    await asyncio.sleep(0.6)
    before = await _errors(jp_fetch)
    pid = jp_serverapp.kernel_manager.get_kernel(stuck).provisioner.pid
    app.parts.registry.settings.ready_timeout = 2.0  # how long the stopped kernel's suspends wait for an answer
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(3):
            await app.policy_loop.run_pass()
    finally:
        os.kill(pid, signal.SIGCONT)
        app.parts.registry.settings.ready_timeout = 60.0
    assert (await api(jp_fetch, "kernels", pruned))["state"] == "suspended"
    model = await api(jp_fetch, "kernels", stuck)
    assert model["state"] == "running" and model["last_error"], model
    after = await _errors(jp_fetch)
    assert after["action"] - before.get("action", 0) == 3 and after["kernel"] == before.get("kernel", 0)
    errors = _lines(logged, logging.ERROR, f"suspend of kernel {stuck}")
    assert len(errors) == 1 and errors[0].exc_info is not None, [r.getMessage() for r in logged.records]
    await api(jp_fetch, "kernels", pruned, "resume", method="POST", wait="1")
    assert (await run(jp_serverapp, pruned, "print(kept + 1)")).strip() == "42"
    assert (await run(jp_serverapp, stuck, "print(x + 1)")).strip() == "2"  # it runs on as it was


class _Fifo:
    """A GPU inventory that hangs whoever reads it until :meth:`release` writes it (or a
    watchdog does, so that a reading that blocks the event loop ends the test, not the run)."""

    def __init__(self, path: Path, content: str, watchdog: float) -> None:
        os.mkfifo(path)
        self.path, self.content = path, content
        self._released = threading.Lock()
        self._watchdog = threading.Timer(watchdog, self.release)
        self._watchdog.start()

    def release(self, block: bool = True) -> None:
        """Answer the reader that waits (``block``: wait for one to come)."""
        if not self._released.acquire(blocking=False):
            return
        self._watchdog.cancel()
        try:
            fd = os.open(self.path, os.O_WRONLY | (0 if block else os.O_NONBLOCK))
        except OSError as e:
            if e.errno != errno.ENXIO:  # nobody reads it: nothing to release
                raise
            return
        with os.fdopen(fd, "w") as f:
            f.write(self.content)


@pytest.mark.parametrize("gpuckpt_config", [{"idle_timeout": 0.5, "policy_interval": 3600.0}])
async def test_a_hung_gpu_reading_stalls_no_request_and_suspends_nothing(
        inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jp_fetch: Any, jp_serverapp: Any,
        gpuckpt_config: dict[str, Any]) -> None:
    app = _app(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    GPUPool.instance().read_timeout = 2.0
    loop = asyncio.get_running_loop()
    hung = _Fifo(tmp_path / "hung", json.dumps([GPU]), watchdog=15)
    monkeypatch.setenv(TEST_GPUS, str(hung.path))  # NVML stops answering
    try:
        started = loop.time()
        listing = asyncio.ensure_future(api(jp_fetch, "gpus"))
        await asyncio.sleep(0.3)  # its reading has started, and hangs
        await jp_fetch("api", "status")
        assert loop.time() - started < 2.0, "the server answered nothing while the GPU reading hung"

        gpus = await asyncio.wait_for(listing, 10)  # answered after read_timeout, from the last reading
        assert "did not answer within 2 s" in gpus["reading_problem"], gpus
        assert [(g["uuid"], g["kernel_id"]) for g in gpus["gpus"]] == [(GPU["uuid"], kernel_id)]
        asked = loop.time()  # the same reading still hangs: later requests do not wait for it again
        model = await api(jp_fetch, "kernels", kernel_id)
        assert loop.time() - asked < 1.0 and [g["uuid"] for g in model["gpus"]] == [GPU["uuid"]]

        await asyncio.sleep(0.5)
        await asyncio.wait_for(app.policy_loop.run_pass(), 5)  # idle past its timeout, on figures that are not fresh
        model = await api(jp_fetch, "kernels", kernel_id)
        assert model["state"] == "running" and "GPU use is unknown" in model["policy"]["reason"], model["policy"]

        monkeypatch.setenv(TEST_GPUS, str(inventory))
        await asyncio.to_thread(hung.release)  # NVML answers the reading it hung

        async def answered() -> bool:
            return (await api(jp_fetch, "gpus"))["reading_problem"] is None

        await _until(answered, "the GPUs are read again", timeout=10)
        assert (await api(jp_fetch, "gpus"))["read_at"] > gpus["read_at"]
        await app.policy_loop.run_pass()
        assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended"
    finally:
        monkeypatch.setenv(TEST_GPUS, str(inventory))
        hung.release(block=False)


async def test_a_store_slow_to_answer_stalls_no_request(
        jp_fetch: Any, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's check waits up to 5 s (as a stat on a hung network file system does) while
    the policy is asked for and a kernel is checkpointed: the event loop goes on meanwhile,
    and both answer once the store does."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    answer = threading.Event()

    def slow_to_answer(root: Path) -> str | None:
        answer.wait(5)
        return writable_problem(root)

    monkeypatch.setattr(retention, "writable_problem", slow_to_answer)
    monkeypatch.setattr(gpuckpt_app, "writable_problem", slow_to_answer)
    async with loop_stalls() as gaps:
        try:
            asked = asyncio.ensure_future(api(jp_fetch, "policy"))
            checkpoint = asyncio.ensure_future(api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST",
                                                   wait="1"))
            await asyncio.sleep(1.0)  # both wait for the store
            assert not asked.done() and not checkpoint.done()
            answer.set()
            assert (await asked)["store_problem"] is None
            assert (await checkpoint)["last_checkpoint"]["durability"] == "durable"
        finally:
            answer.set()
    assert max(gaps) < 1.0, f"the event loop stalled for {max(gaps):.1f} s"
