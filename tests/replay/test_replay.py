"""The trace replay (``jupyter gpuckpt replay``): its accounting on traces small enough to
work out by hand, the baselines, on-demand reclaim, the trace formats, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_gpuckpt.policy.decisions import Policy
from jupyter_gpuckpt.replay import (
    Cell,
    CostModel,
    Session,
    Setting,
    Trace,
    default_settings,
    generate,
    read_trace,
    simulate,
    write_trace,
)

COSTS = CostModel()  # 0.4 GB/s write + 0.45 s, 0.8 GB/s read + 1.64 s, 1.07 s kernel start
HOUR = 3600.0


def _two_cells() -> Trace:
    """One 1-GPU session: a 10-min cell, a 40-min pause, another 10-min cell; 0.4 GB of state."""
    cells = [Cell(0.0, 600.0, 1, 400_000_000), Cell(3000.0, 600.0, 1, 400_000_000)]
    return Trace([Session("a", 0.0, 3600.0, cells, "ann", "vision")])


def test_idle_timeout_accounting_by_hand():
    f = simulate(_two_cells(), Setting("idle 30m", Policy(idle_timeout=1800)), 1, COSTS)
    suspend, restore = 0.45 + 0.4 / 0.4, 1.64 + 0.4 / 0.8  # 1.45 s, 2.14 s
    # held from 0 until the suspend ends (2400 + 1.45), then from the cell at 3000 through the
    # restore and the 600-s cell; the stop moves back by the wait
    assert f.gpu_hours_reserved == pytest.approx((2400 + suspend + restore + 600) / HOUR)
    assert f.gpu_hours_busy == pytest.approx(1200 / HOUR)
    assert f.gpu_hours_idle == pytest.approx(2400 / HOUR)
    assert f.gpu_hours_idle_returned == pytest.approx((3000 - 2400 - suspend) / HOUR)
    assert (f.cells_total, f.cells_waited, f.suspends, f.suspends_without_demand) == (2, 1, 1, 1)
    assert f.resume_wait_median_s == pytest.approx(restore)
    assert f.resume_wait_median_small_s == pytest.approx(restore)
    assert f.suspend_max_s == pytest.approx(suspend)
    assert f.sessions_lost == 0


def test_a_return_ahead_of_the_cell_resumes_it_in_time_unless_the_signal_is_off():
    """The user comes back 60 s before the second cell (the trace records it): the return
    signal resumes the suspended kernel then, so the cell does not wait; without it, it does."""
    trace = _two_cells()
    trace.sessions[0].returns.append(2940.0)
    signal = simulate(trace, Setting("idle 30m", Policy(idle_timeout=1800)), 1, COSTS)
    off = simulate(trace, Setting("idle 30m, off", Policy(idle_timeout=1800, resume_on_return=False)), 1, COSTS)
    assert (signal.cells_waited, off.cells_waited) == (0, 1)
    assert off.resume_wait_median_s == pytest.approx(1.64 + 0.4 / 0.8)
    assert signal.gpu_hours_idle_returned < off.gpu_hours_idle_returned  # held from the return on
    names = [row.name for row in default_settings(trace, COSTS)]
    assert "rhythm, no return signal" in names and names[-1] == "oracle"
    assert "rhythm, no return signal" not in [row.name for row in default_settings(_two_cells(), COSTS)]


def test_no_policy_holds_everything():
    f = simulate(_two_cells(), Setting("none", baseline="none"), 1, COSTS)
    assert f.gpu_hours_reserved == pytest.approx(1.0)
    assert (f.gpu_hours_idle_returned, f.cells_waited, f.suspends) == (0, 0, 0)


def test_culling_loses_the_state_and_counts_the_rerun():
    f = simulate(_two_cells(), Setting("cull 30m", baseline="cull", cull_after=1800), 1, COSTS)
    wait = 1.07 + 600  # a new kernel, then the 600-s cell run so far again
    assert f.sessions_lost == 1
    assert f.rerun_gpu_hours == pytest.approx(600 / HOUR)
    assert f.resume_wait_median_s == pytest.approx(wait)
    assert f.gpu_hours_idle_returned == pytest.approx(600 / HOUR)
    assert f.gpu_hours_reserved == pytest.approx((2400 + wait + 600) / HOUR)
    assert f.suspends == 0


def _contended(floor: tuple[tuple[str, int], ...] = ()) -> tuple[Trace, Setting]:
    """Three GPUs: A (1 GB) and B (0.2 GB) idle since the first minute, C busy; D arrives at 600 s."""
    sessions = [Session("A", 0, 10_000, [Cell(0, 60, 1, 1_000_000_000)], "ann", "g2"),
                Session("B", 0, 10_000, [Cell(0, 60, 1, 200_000_000)], "bob", "g1"),
                Session("C", 0, 10_000, [Cell(0, 5000, 1, 200_000_000)], "cy", "g1"),
                Session("D", 600, 1000, [Cell(700, 10, 1, 0)], "dee", "g3")]
    return Trace(sessions), Setting("on_demand", Policy(reclaim="on_demand"), floors=floor)


def test_on_demand_suspends_nothing_while_nobody_waits():
    f = simulate(_two_cells(), Setting("on_demand", Policy(reclaim="on_demand")), 1, COSTS)
    assert (f.suspends, f.gpu_hours_idle_returned, f.cells_waited) == (0, 0, 0)


def test_on_demand_suspends_the_cheapest_kernel_once():
    trace, setting = _contended()
    f = simulate(trace, setting, 3, COSTS)
    b_suspend = 0.45 + 0.2 / 0.4  # B: as idle as A, less state
    assert (f.suspends, f.suspends_without_demand, f.gpu_waits) == (1, 0, 1)
    assert f.gpu_wait_max_s == pytest.approx(b_suspend)
    assert f.suspend_max_s == pytest.approx(b_suspend)


def test_on_demand_respects_floors():
    trace, setting = _contended(floor=(("g1", 2),))  # g1 (B and C) keeps its 2 GPUs: A goes
    f = simulate(trace, setting, 3, COSTS)
    a_suspend = 0.45 + 1.0 / 0.4
    assert (f.suspends, f.suspends_without_demand) == (1, 0)
    assert f.gpu_wait_max_s == pytest.approx(a_suspend)


def test_a_session_needing_more_gpus_than_the_cluster_is_refused():
    with pytest.raises(ValueError, match="needs 1 GPUs"):
        simulate(_two_cells(), Setting("none", baseline="none"), 0, COSTS)


NOTEBOOKOS = {"sessions": [
    {"id": "s1", "user": "ann", "group": "vision", "start_tick": 0, "stop_tick": 10,
     "trainings": [{"start_tick": 1, "duration_in_ticks": 2, "gpus": 2, "vram": 1.5, "memory": 512},
                   {"start_tick": 6, "duration_in_ticks": 1, "gpus": 2, "vram": 1.5, "memory": 512}]},
    {"id": "s2", "start_tick": 3, "stop_tick": 4, "trainings": []}]}
CSV = """session_id,user,group,session_start,session_stop,cell_start,cell_duration,gpus,vram_gb,memory_gb,user_returned
s1,ann,vision,0,600,60,120,2,1.5,0.5,
s1,ann,vision,0,600,360,60,2,1.5,0.5,300
s2,,,180,240,,,,,,
"""


@pytest.mark.parametrize(("name", "text"), [("t.json", json.dumps(NOTEBOOKOS)), ("t.csv", CSV)])
def test_both_formats_read_the_same_trace(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    trace = read_trace(path, tick_seconds=60)
    s1, s2 = trace.sessions
    assert (s1.session_id, s1.user, s1.group, s1.start, s1.stop, s1.gpus) == ("s1", "ann", "vision", 0, 600, 2)
    assert [(c.start, c.duration) for c in s1.cells] == [(60, 120), (360, 60)]
    assert s1.state_bytes == 2 * (1 << 30)
    assert (s2.start, s2.stop, s2.cells, s2.gpus) == (180, 240, [], 0)
    assert s1.returns == ([300.0] if name.endswith(".csv") else [])


# A NotebookOS workload template in the shape its dashboard writes them (workload_templates/*.json):
# trainings as TrainingEvents (num_gpus and one gpu_utilizations entry per GPU, mem_usage_mb in MB,
# vram or vram_usage_gb in GB, millicpus, a DefaultTrainingEventField), and a session whose trainings
# take their resources from its resource_request (a Float64Spec: cpus, memory in MB, gpus, vram in GB).
TEMPLATE = {
    "workloadTitle": "a3e0c6d2-5b1f-4f7e-9d2a-0c4b8e1f2a11", "workloadSeed": 0, "timescaleAdjustmentFactor": 0.1,
    "numberOfSessions": 2, "debugLoggingEnabled": True,
    "remoteStorageDefinition": {"name": "AWS S3", "downloadRate": 200000000, "uploadRate": 125000000},
    "sessions": [
        {"id": "c1d2", "start_tick": 1, "stop_tick": 30, "num_training_events": 2, "selected_training_event": "1",
         "trainings": [
             {"start_tick": 2, "duration_in_ticks": 3, "millicpus": 100, "mem_usage_mb": 4096, "vram": 12.5,
              "num_gpus": 8, "gpu_utilizations": [{"utilization": 50}] * 8},
             {"DefaultTrainingEventField": {"start_tick": 2, "duration_in_ticks": 2, "millicpus": 100,
                                            "mem_usage_mb": 0.25, "num_gpus": 1,
                                            "gpu_utilizations": [{"utilization": 50}]},
              "start_tick": 20, "duration_in_ticks": 2, "millicpus": 100, "mem_usage_mb": 477000,
              "vram_usage_gb": 40, "gpu_utilizations": [{"utilization": 50}, {"utilization": 50}]}]},
        {"id": "e5f6", "start_tick": 4, "stop_tick": 9, "resource_request": {"cpus": 4000, "memory": 2048,
                                                                            "gpus": 2, "vram": 16},
         "trainings": [{"start_tick": 5, "duration_in_ticks": 1}]}]}


def test_a_notebookos_template_is_read_in_its_own_units(tmp_path):
    path = tmp_path / "template.json"
    path.write_text(json.dumps(TEMPLATE))
    first, second = read_trace(path, tick_seconds=60).sessions
    big, late = first.cells
    assert (big.start, big.duration, big.gpus) == (120, 180, 8)
    assert (big.memory_bytes, big.vram_bytes) == (4096 * 2**20, int(12.5 * 2**30))  # MB, GB
    assert (late.gpus, late.vram_bytes) == (2, 40 * 2**30)  # GPUs counted from gpu_utilizations
    assert late.memory_bytes == 477000 * 2**20 and late.memory_bytes < 466 * 2**30  # MB: not 477 GB
    [only] = second.cells
    assert (only.gpus, only.memory_bytes, only.vram_bytes) == (2, 2048 * 2**20, 16 * 2**30)  # its spec's


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_generated_traces_round_trip(tmp_path, suffix):
    trace = generate(30, seed=3)
    write_trace(trace, tmp_path / f"t{suffix}", tick_seconds=1.0)
    back = read_trace(tmp_path / f"t{suffix}", tick_seconds=1.0)
    assert [s.session_id for s in back.sessions] == [s.session_id for s in trace.sessions]
    for a, b in zip(trace.sessions, back.sessions, strict=True):
        assert (a.user, a.group, a.gpus, len(a.cells)) == (b.user, b.group, b.gpus, len(b.cells))
        assert b.start == pytest.approx(a.start, abs=1e-3) and b.stop == pytest.approx(a.stop, abs=1e-3)
        assert b.state_bytes == pytest.approx(a.state_bytes, rel=1e-6)


def test_generator_is_seeded():
    assert generate(20, seed=5) == generate(20, seed=5)
    assert generate(20, seed=5) != generate(20, seed=6)


CONTRACT = {"policy", "gpu_hours_reserved", "gpu_hours_busy", "gpu_hours_idle", "gpu_hours_idle_returned",
            "resume_wait_median_s", "resume_wait_p95_s", "resume_wait_median_small_s", "cells_total",
            "cells_waited", "sessions_lost", "suspends_without_demand"}


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jupyter_gpuckpt.cli.main", "replay", *args], capture_output=True,
                          text=True, timeout=120, check=True)


def test_cli_writes_json_and_plot(tmp_path):
    trace = tmp_path / "t.csv"
    _replay("--generate", "60", "--out", str(trace))
    _replay(str(trace), "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"),
            "--floor", "group0=1", "--jobs", "1")
    rows = json.loads((tmp_path / "r.json").read_text())
    assert all(CONTRACT <= set(row) for row in rows)
    names = [row["policy"] for row in rows]
    assert {"none", "cull 30m", "cull 90m", "idle 30m", "rhythm", "on_demand", "both", "rhythm +floors",
            "oracle"} <= set(names)
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_admins_own_config_is_a_row_of_its_own(tmp_path):
    """``--config jupyter_server_config.py`` replays the policy that server runs: here a 10 min idle
    limit without a warning, so its row matches the standard ``idle 10m`` figure for figure; the
    same from ``--GPUCheckpointApp.name=value``, which beats the file."""
    config = tmp_path / "jupyter_server_config.py"
    config.write_text("c.GPUCheckpointApp.idle_timeout = 600.0\nc.GPUCheckpointApp.warn_before = 0.0\n")
    out = _replay("--generate", "80", "--config", str(config), "--json", str(tmp_path / "r.json"),
                  "--plot", str(tmp_path / "r.png"), "--jobs", "1").stdout
    rows = {row["policy"]: row for row in json.loads((tmp_path / "r.json").read_text())}
    mine, standard = rows["your config"], rows["idle 10m"]
    assert mine["configured"] and not standard["configured"] and "your config <" in out
    assert {k: v for k, v in mine.items() if k not in ("policy", "configured")} == \
        {k: v for k, v in standard.items() if k not in ("policy", "configured")}
    assert list(rows)[-1] == "oracle" and (tmp_path / "r.png").stat().st_size > 0

    _replay("--generate", "80", "--config", str(config), "--GPUCheckpointApp.idle_timeout=1800",
            "--json", str(tmp_path / "s.json"), "--jobs", "1")
    rows = {row["policy"]: row for row in json.loads((tmp_path / "s.json").read_text())}
    assert rows["your config"]["gpu_hours_idle_returned"] == rows["idle 30m"]["gpu_hours_idle_returned"]
    _replay("--generate", "20", "--json", str(tmp_path / "plain.json"), "--jobs", "1")
    assert "your config" not in {row["policy"] for row in json.loads((tmp_path / "plain.json").read_text())}


def test_cli_replays_2000_sessions(tmp_path):
    out = _replay("--generate", "2000", "--json", str(tmp_path / "r.json")).stdout
    rows = {row["policy"]: row for row in json.loads((tmp_path / "r.json").read_text())}
    assert "rhythm" in out and "oracle *" in out
    for name in ("rhythm", "on_demand", "both", "idle 30m"):
        assert rows[name]["sessions_lost"] == 0
        assert rows[name]["resume_wait_median_small_s"] <= 5
    on_demand = rows["on_demand"]
    assert on_demand["suspends_without_demand"] == 0
    assert on_demand["gpu_wait_max_s"] <= on_demand["suspend_max_s"] + 10  # + one policy_interval
    assert rows["oracle"]["cells_waited_share"] < 0.08 <= rows["idle 2m"]["cells_waited_share"]
    # a fixed timeout returning 90% keeps about a fifth of the cells waiting; the rhythm returns
    # nearly as much (90.0% on this trace, 88.7-89.6% on seeds 1-3) with at most 12% waiting
    assert rows["idle 2m"]["idle_returned_share"] >= 0.90 and rows["idle 2m"]["cells_waited_share"] > 0.15
    assert rows["rhythm"]["idle_returned_share"] >= 0.88 and rows["rhythm"]["cells_waited_share"] <= 0.12


def test_the_rhythm_returns_what_a_short_timeout_does_with_fewer_waits():
    """Each session's limit from its own pauses returns more idle GPU-hours than a fixed 5-min
    timeout, and keeps far fewer cells waiting than the 2-min one that returns about as much."""
    trace = generate(600)
    gpus = 10_000  # no contention: the idle limits alone
    rhythm = simulate(trace, Setting("rhythm", Policy(idle_timeout=600, rhythm=True)), gpus, COSTS)
    five = simulate(trace, Setting("idle 5m", Policy(idle_timeout=300)), gpus, COSTS)
    two = simulate(trace, Setting("idle 2m", Policy(idle_timeout=120)), gpus, COSTS)
    assert rhythm.idle_returned_share > five.idle_returned_share
    assert rhythm.idle_returned_share > two.idle_returned_share - 0.02
    assert rhythm.cells_waited_share < two.cells_waited_share - 0.04
