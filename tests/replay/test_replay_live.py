"""``replay --live``: a short trace against a real server with real kernels agrees with the
simulator on the same trace, within :data:`jupyter_gpuckpt.replay.live.TOLERANCES`.

The server suspends after 2.5 s idle, with no warning (policy passes every 0.3 s), and has
three test GPUs, one per kernel. The trace runs at speed 60 (a trace minute is a real second):
gaps between cells are 1 real second (60 trace s) or 8 (480 trace s), far from the 2.5 s limit
on either side even with a suspend of a few seconds, so no cell is borderline; about 30 s in all.
The replay runs in a thread (it has its own event loop) while the test's loop serves the server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from live_server import JUPYTER
from server_fixtures import KERNEL_NAME

from jupyter_gpuckpt.placement.gpus import GPUPool
from jupyter_gpuckpt.replay.formats import write_trace
from jupyter_gpuckpt.replay.live import replay_live
from jupyter_gpuckpt.replay.report import comparison
from jupyter_gpuckpt.replay.trace import GB, Cell, Session, Trace

SPEED = 60.0
SHORT, LONG = 60.0, 480.0
"""Trace seconds between a cell's end and the next submit: 1 and 8 real seconds."""


def _session(name: str, start: float, gaps: list[float], last_gap: float) -> Session:
    """Cells of 30 trace seconds and 1 GiB (1 MiB live), the first 30 s after the start."""
    cells, at = [], start + 30
    for gap in [*gaps, None]:
        cells.append(Cell(at, 30.0, gpus=1, vram_bytes=GB // 2, memory_bytes=GB // 2))
        at += 30 + (gap or 0)
    return Session(name, start, cells[-1].start + 30 + last_gap, cells)


TRACE = Trace([
    _session("a", 0, [SHORT, LONG, SHORT, LONG], SHORT),  # two restores
    _session("b", 120, [SHORT, SHORT, LONG, SHORT], LONG),  # one restore, suspended when it stops
    _session("c", 240, [LONG, SHORT, SHORT], SHORT),  # one restore
], "live-test")
COMPARED = ("gpu_hours_reserved", "gpu_hours_busy", "gpu_hours_idle", "gpu_hours_idle_returned", "resume_wait_median_s",
            "resume_wait_p95_s", "cells_total", "cells_waited", "sessions_lost", "suspends", "suspends_without_demand")


@pytest.fixture
def gpuckpt_config() -> dict[str, object]:
    return {"idle_timeout": 2.5, "policy_interval": 0.3, "release_mode": "suspend", "warn_before": 0.0}


@pytest.fixture
def three_test_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps([{"uuid": f"GPU-test-{i}", "name": "Test GPU", "memory_total": 80 << 30}
                                     for i in range(3)]))
    monkeypatch.setenv("JUPYTER_GPUCKPT_TEST_GPUS", str(inventory))


@pytest.fixture
def server(three_test_gpus: None, jp_fetch, jp_serverapp, jp_http_port, jp_base_url) -> tuple[Any, str, str]:
    """The server, its URL and its token (jp_fetch makes it listen on jp_http_port; the replay
    is a client of its own)."""
    return jp_serverapp, f"http://localhost:{jp_http_port}{jp_base_url}", jp_serverapp.identity_provider.token


@pytest.fixture
def gpu_server(jp_fetch, jp_serverapp, jp_http_port, jp_base_url) -> tuple[Any, str, str]:
    """The server with the machine's own GPUs (NVML's), its URL and its token."""
    GPUPool.clear_instance()
    return jp_serverapp, f"http://localhost:{jp_http_port}{jp_base_url}", jp_serverapp.identity_provider.token


async def _started(server: tuple[Any, str, str]) -> tuple[str, str]:
    """Start the server's policy loop (pytest-jupyter does not); its URL and token."""
    app, url, token = server
    await app.extension_manager.start_all_extensions()
    return url, token


async def test_live_replay_agrees_with_the_simulator(server: tuple[Any, str, str]) -> None:
    url, token = await _started(server)
    found = await asyncio.to_thread(replay_live, url, token, TRACE, SPEED, KERNEL_NAME)
    print(comparison(found))  # for the record: pytest -s shows it
    rows = {row["source"]: row for row in found}
    measured, within = rows["measured"], rows["within"]
    report = json.dumps(rows, indent=1)
    assert (measured["cells_total"], measured["cells_waited"]) == (14, 4), report
    assert (measured["suspends"], measured["sessions_lost"]) == (5, 0), report
    assert all(within[key] for key in COMPARED), report


async def test_the_cli_replays_live_and_writes_the_rows(server: tuple[Any, str, str], tmp_path: Path) -> None:
    """``jupyter gpuckpt replay TRACE --live URL``: one session, one restore (about 13 s)."""
    url, token = await _started(server)
    trace = tmp_path / "trace.csv"
    write_trace(Trace([_session("only", 0, [LONG], SHORT)], "one"), trace)
    process = await asyncio.create_subprocess_exec(
        JUPYTER, "gpuckpt", "replay", str(trace), "--live", url, "--token", token, "--speed", str(SPEED),
        "--json", str(tmp_path / "rows.json"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    header = out.decode().splitlines()[2].split()  # the comparison table, after the title line
    assert header == ["FIGURE", "MEASURED", "SIMULATED", "DIFFERENCE", "TOLERANCE", "WITHIN"], out.decode()
    rows = {row["source"]: row for row in json.loads((tmp_path / "rows.json").read_text())}
    assert (rows["measured"]["cells_waited"], rows["measured"]["suspends"]) == (1, 1), rows
    assert all(rows["within"][key] for key in COMPARED), rows


@pytest.mark.gpu
async def test_live_replay_on_a_real_gpu_agrees_with_the_simulator(gpu_server: tuple[Any, str, str]) -> None:
    """The same with CUDA memory: the cells hold their state in torch tensors on the GPU, which
    each suspend writes and frees and each restore puts back (one session, two restores)."""
    import torch

    assert torch.cuda.is_available(), "the kernels' cells would hold numpy arrays, not CUDA memory"
    gpus = (await GPUPool.instance().readings()).gpus
    assert gpus and not gpus[0].uuid.startswith("GPU-test"), gpus
    url, token = await _started(gpu_server)
    one = Trace([_session("a", 0, [SHORT, LONG, SHORT, LONG], SHORT)], "live-gpu")
    found = await asyncio.to_thread(replay_live, url, token, one, SPEED, KERNEL_NAME)
    print(comparison(found))
    rows = {row["source"]: row for row in found}
    report = json.dumps(rows, indent=1)
    assert (rows["measured"]["cells_total"], rows["measured"]["cells_waited"]) == (5, 2), report
    assert rows["measured"]["sessions_lost"] == 0, report
    assert all(rows["within"][key] for key in COMPARED), report
