"""Lifecycle events on jupyter_server's event stream, and metrics on its ``/metrics``.

Real server, real kernels, and the browser's own path for events: jupyter_server's
``/api/events/subscribe`` websocket. jupyter_events validates each event against its
schema before handing it to the websocket's listener, so an event that arrives fits its
schema.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_fixtures import api, run, start_kernel
from tornado.httpclient import HTTPClientError

from jupyter_gpuckpt import events
from jupyter_gpuckpt.placement.gpus import GPUPool

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def one_test_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A host with one (described, not real) GPU, which the test kernel takes."""
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps([{"uuid": "GPU-test-0", "name": "Test GPU", "memory_total": 2**34}]))
    monkeypatch.setenv("JUPYTER_GPUCKPT_TEST_GPUS", str(inventory))
    GPUPool.clear_instance()
    yield
    GPUPool.clear_instance()


async def _metrics(jp_fetch: Any) -> Samples:
    response = await jp_fetch("metrics")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.body.decode())
            for s in family.samples if s.name.startswith("jupyter_gpuckpt_")}


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return _value(after, name, **labels) - _value(before, name, **labels)


async def _gpuckpt_events(ws: Any, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    """The next ``count`` gpuckpt events on an ``/api/events/subscribe`` socket."""
    found: list[dict[str, Any]] = []
    while len(found) < count:
        try:
            event = json.loads(await asyncio.wait_for(ws.read_message(), timeout))
        except TimeoutError:  # an event that does not fit its schema is logged, not sent
            raise AssertionError(f"expected {count} gpuckpt events, got {found}") from None
        if event["schema_id"].startswith(events.SCHEMA_URI):
            found.append(event)
    return found


def _check_fields(serverapp: Any, event: dict[str, Any]) -> None:
    """Each field the manager sends is one the event's schema describes."""
    schema = serverapp.event_logger.schemas.get(event["schema_id"])
    assert set(event) - {"schema_id"} <= set(schema.properties), event


async def test_operations_emit_versioned_events_and_update_metrics(
        one_test_gpu: None, jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any) -> None:
    ws = await jp_ws_fetch("api", "events", "subscribe")
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "weights = list(range(100_000))")
    before = await _metrics(jp_fetch)
    assert _value(before, "jupyter_gpuckpt_kernels", state="running") == 1
    assert _value(before, "jupyter_gpuckpt_released_gpus") == 0

    await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    started = time.time()
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    suspended = time.time()
    during = await _metrics(jp_fetch)
    await asyncio.sleep(0.5)
    resuming = time.time()
    await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    resumed = time.time()
    after = await _metrics(jp_fetch)

    seen: list[dict[str, Any]] = []
    while not {("resume", "done"), ("suspend", "durable")} <= {(e["schema_id"].split("/")[-2], e["phase"])
                                                                for e in seen}:
        seen += await _gpuckpt_events(ws, 1)
    ws.close()
    for event in seen:
        _check_fields(jp_serverapp, event)
    got = [e for e in seen if e["phase"] in ("started", "done")]
    assert [(e["schema_id"], e["phase"]) for e in got] == [
        (events.schema_id(name), phase)
        for name in ("checkpoint", "suspend", "resume") for phase in ("started", "done")]
    assert {e["kernel_id"] for e in seen} == {kernel_id}
    assert {e["reason"] for e in got} == {"request"}
    # the GPU is free ("released") before the suspend is done, and the state durable after
    suspend_phases = [e["phase"] for e in seen if e["schema_id"] == events.schema_id("suspend")]
    assert suspend_phases.index("released") < suspend_phases.index("done") < suspend_phases.index("durable")
    checkpoint, suspend, resume = got[1], got[3], got[5]
    assert checkpoint["bytes"] >= checkpoint["bytes_written"] > 0
    assert checkpoint["checkpoint_id"] != suspend["checkpoint_id"] == resume["checkpoint_id"]
    assert suspend["gpus_released"] == 1
    assert all(e["seconds"] > 0 for e in (checkpoint, suspend, resume))

    assert _value(during, "jupyter_gpuckpt_kernels", state="suspended") == 1
    assert _value(during, "jupyter_gpuckpt_kernels", state="running") == 0
    assert _value(during, "jupyter_gpuckpt_released_gpus") == 1
    assert {state: _value(after, "jupyter_gpuckpt_kernels", state=state)
            for state in ("running", "checkpointing", "suspended", "restoring", "failed")} == {
        "running": 1, "checkpointing": 0, "suspended": 0, "restoring": 0, "failed": 0}
    assert _value(after, "jupyter_gpuckpt_released_gpus") == 0
    # the checkpoint and the suspend's checkpoint
    histogram = "jupyter_gpuckpt_checkpoint_duration_seconds"
    assert _delta(before, after, f"{histogram}_count", operation="checkpoint") == 1
    assert _delta(before, after, f"{histogram}_count", operation="suspend") == 1
    assert _delta(before, after, f"{histogram}_sum", operation="checkpoint") == pytest.approx(checkpoint["seconds"])
    assert _delta(before, after, "jupyter_gpuckpt_checkpoint_size_bytes_sum", kind="total") >= checkpoint["bytes"]
    assert _delta(before, after, "jupyter_gpuckpt_checkpoint_size_bytes_count", kind="written") >= 1
    assert _delta(before, after, "jupyter_gpuckpt_restore_duration_seconds_count", operation="resume") == 1
    assert _delta(before, after, "jupyter_gpuckpt_operations_total", event="suspend", outcome="done") == 1
    # one GPU, given back from the suspend's end to the resume's start
    gpu_seconds = _delta(before, after, "jupyter_gpuckpt_released_gpu_seconds_total")
    assert resuming - suspended <= gpu_seconds <= resumed - started


async def test_failed_checkpoint_emits_failed_with_the_error(jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any,
                                                             jp_data_dir: Path) -> None:
    # A signing key others can read: the kernel refuses to sign with it, so the save fails
    # inside the kernel (the store itself is writable, so the server lets it start).
    key = jp_data_dir / "gpuckpt" / "signing.key"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("00" * 32)
    key.chmod(0o644)
    ws = await jp_ws_fetch("api", "events", "subscribe")
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    before = await _metrics(jp_fetch)

    with pytest.raises(HTTPClientError) as failure:
        await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    assert failure.value.code == 500

    started, failed = await _gpuckpt_events(ws, 2)
    ws.close()
    assert (started["schema_id"], started["phase"]) == (events.schema_id("checkpoint"), "started")
    assert (failed["schema_id"], failed["phase"], failed["kernel_id"]) == (started["schema_id"], "failed", kernel_id)
    assert "checkpoint_id" not in failed
    assert "is readable by others" in failed["error"], failed["error"]
    _check_fields(jp_serverapp, failed)

    after = await _metrics(jp_fetch)
    assert _value(after, "jupyter_gpuckpt_kernels", state="running") == 1  # a failed checkpoint never ends it
    assert _delta(before, after, "jupyter_gpuckpt_operations_total", event="checkpoint", outcome="failed") == 1
    assert _delta(before, after, "jupyter_gpuckpt_checkpoint_duration_seconds_count", operation="checkpoint") == 0


SLOW_TO_SAVE = """
import time
import numpy as np

class Slow:
    def __reduce__(self):  # a second to pickle, as a big graph of objects takes
        time.sleep(1.0)
        return (Slow, ())

big = [Slow(), *(np.arange(2**23, dtype=np.float64) + i for i in range(6))]
"""
"""400 MB of arrays (which do not deduplicate) pickled after a second of pickling: a save that
takes longer than a progress interval (0.5 s) however fast the machine writes."""


async def test_long_operations_report_progress(jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any) -> None:
    ws = await jp_ws_fetch("api", "events", "subscribe")
    try:
        kernel_id = await start_kernel(jp_fetch)
        await run(jp_serverapp, kernel_id, SLOW_TO_SAVE)
        await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
        seen = []
        while not seen or seen[-1]["phase"] != "done":
            seen += await _gpuckpt_events(ws, 1, timeout=60)
    finally:
        ws.close()
    progress = [e for e in seen if e["phase"] == "progress"]
    assert progress and all(e["schema_id"] == events.schema_id("suspend") for e in progress)
    done = [e["bytes_done"] for e in progress]
    assert done == sorted(done) and 0 < done[-1] <= progress[-1]["bytes_total"]
    assert progress[-1]["bytes_total"] >= 400_000_000


async def test_a_stopped_server_counts_its_released_gpus_until_it_stops_and_no_longer(
        jp_fetch: Any, jp_serverapp: Any, one_test_gpu: None) -> None:
    from prometheus_client import REGISTRY

    from jupyter_gpuckpt import metrics

    kernel_id = await start_kernel(jp_fetch)
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    app = next(iter(jp_serverapp.extension_manager.extension_apps["jupyter_gpuckpt"]))
    before = REGISTRY.get_sample_value("jupyter_gpuckpt_released_gpu_seconds_total")
    await asyncio.sleep(0.3)
    await app.stop_extension()
    stopped = REGISTRY.get_sample_value("jupyter_gpuckpt_released_gpu_seconds_total")
    assert stopped - before >= 0.3  # the suspension's GPU-seconds, up to the stop
    assert app.metrics not in metrics.COLLECTOR.servers
    await asyncio.sleep(0.3)
    list(REGISTRY.collect())  # a scrape
    assert REGISTRY.get_sample_value("jupyter_gpuckpt_released_gpu_seconds_total") == stopped
