"""What a new user meets first: a server on a machine with Slurm's commands but no cluster starts
without Slurm warnings, unless a kernelspec runs kernels as Slurm jobs.

Real ``jupyter server`` processes (tests/live_server.py) with a fake ``squeue`` first on the PATH
that fails as Slurm's own does on a machine with no ``slurm.conf``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from live_server import running_server
from traitlets.config import Config

from jupyter_gpuckpt.errors import PlacementError
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json, slurm_config
from jupyter_gpuckpt.placement.slurm import SlurmPlacement

UNCONFIGURED = "squeue: fatal: Could not establish a configuration source"


@pytest.fixture
def unconfigured_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``squeue`` on the PATH, failing as it does without a cluster; the file it touches when called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "squeue-called"
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\ntouch {called}\necho '{UNCONFIGURED}' >&2\nexit 1\n")
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    return called


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _started_log(base: Path, done: Callable[[], bool], *kernelspecs: str) -> str:
    """The log of a server started with dirs under ``base`` and ``kernelspecs`` (Slurm ones) installed,
    once ``done`` holds (its start has looked for Slurm jobs), and the server stopped."""
    base.mkdir()
    for name in kernelspecs:
        folder = base / "data" / "kernels" / name
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text(json.dumps(kernelspec_json(name, slurm=slurm_config("gpu"))))
    with running_server(base) as server:
        _until(done, "the server's start to look for Slurm jobs")
        time.sleep(1.0)  # what it logs on squeue's answer, logged
        assert server.api("GET", "api/gpuckpt/kernels") == []
    return (base / "server.log").read_text()


def test_slurm_commands_without_a_cluster_are_no_news(tmp_path: Path, unconfigured_slurm: Path) -> None:
    log = _started_log(tmp_path / "quiet", unconfigured_slurm.exists)
    assert "Slurm" not in log and "squeue" not in log, log


def test_a_slurm_kernelspec_without_an_answering_slurm_is_a_clear_warning(tmp_path: Path,
                                                                          unconfigured_slurm: Path) -> None:
    base = tmp_path / "slurm"
    log = _started_log(base, lambda: "Slurm does not answer" in (base / "server.log").read_text(),
                       "python3-on-slurm")
    warnings = [line for line in log.splitlines() if "Slurm does not answer" in line]
    assert len(warnings) == 1, log
    assert warnings[0].startswith("[W ") and "the kernels of kernelspec python3-on-slurm are Slurm jobs" in warnings[0]
    assert "Could not establish a configuration source" in warnings[0] and "jupyter gpuckpt doctor" in warnings[0]


@pytest.mark.parametrize(("config", "runs", "uses"), [
    ({}, {}, None),
    ({"SlurmCommands": {"timeout": 10.0}}, {}, "c.SlurmCommands is set"),
    ({}, {"k": {"placement": "slurm", "job_id": "7", "node": "n1", "run": 1}}, "the ledger holds Slurm kernel jobs"),
])
async def test_a_slurm_that_does_not_answer_is_news_where_something_uses_it(
        jp_environ: None, unconfigured_slurm: Path, config: dict[str, Any], runs: dict[str, Any],
        uses: str | None) -> None:
    """Without a Slurm kernelspec (the Jupyter dirs are the test's own): the server's Slurm
    settings, or a kernel job in the ledger, are what make an unanswering Slurm worth a warning."""
    if uses is None:
        assert await SlurmPlacement.collect_orphans(runs, (), Config(config)) == []
    else:
        with pytest.raises(PlacementError, match=f"^{uses}, but Slurm does not answer: squeue failed: .*"
                                                 "Could not establish a configuration source"):
            await SlurmPlacement.collect_orphans(runs, (), Config(config))
    assert unconfigured_slurm.exists()
