"""The Slurm tests fail, saying why, where the cluster cannot run (no root, no Slurm); they
are skipped only on purpose, with the reason in the summary. Each case runs a small pytest
session of its own (pytester) with tests/slurm_cluster.py as its plugin; none starts the
cluster."""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest
from paths import TESTS
from slurm_cluster import SKIP

pytest_plugins = ["pytester"]

CASES = """
import pytest

def test_on_the_cluster(slurm_cluster):
    pass

@pytest.mark.slurm
def test_marked_slurm():
    pass

def test_elsewhere():
    pass
"""


def _session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str,
             prefix: tuple[str, ...] = ()) -> pytest.RunResult:
    """An inner session as the suite runs (``-ra``), in a process of its own."""
    pytester.makepyfile(test_cases=CASES)
    pytester.makeini("[pytest]\nmarkers =\n    slurm: runs jobs on the local Slurm test cluster\n")
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("COLUMNS", "200")  # the summary's lines whole
    return pytester.run(*prefix, sys.executable, "-m", "pytest", "-p", "slurm_cluster", "-p", "no:cacheprovider",
                        "-ra", *args, timeout=120)


def test_without_root_the_slurm_tests_fail_and_say_why(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SKIP, raising=False)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # the session runs in a user namespace of its own, where it is nobody
        unshare = shutil.which("unshare")
        assert unshare, "unshare (util-linux) is needed to run a session as another user than root"
        prefix = (unshare, "--user")
    result = _session(pytester, monkeypatch, prefix=prefix)
    assert result.parseoutcomes() == {"passed": 2, "errors": 1}, result.stdout.str()
    result.stdout.fnmatch_lines([f"the Slurm testbed needs root * (or set {SKIP}=1, or -m 'not slurm', to leave the "
                                 "Slurm tests out on purpose)", "*short test summary info*",
                                 "ERROR test_cases.py::test_on_the_cluster - Failed: the Slurm testbed needs root*"])


def test_without_slurm_installed_the_slurm_tests_fail_and_say_which(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SKIP, raising=False)
    monkeypatch.setenv("PATH", str(pytester.mkdir("empty")))
    result = _session(pytester, monkeypatch)
    assert result.parseoutcomes() == {"passed": 2, "errors": 1}, result.stdout.str()
    result.stdout.fnmatch_lines(["*slurmctld, slurmd, sbatch, munged, ip, nsenter missing: run *testbed.sh install*",
                                 "*short test summary info*", "ERROR test_cases.py::test_on_the_cluster - Failed: *"])


def test_a_deliberate_skip_says_why_in_the_summary(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SKIP, "1")
    result = _session(pytester, monkeypatch)
    assert result.parseoutcomes() == {"passed": 1, "skipped": 2}, result.stdout.str()
    reasons = re.findall(rf"^SKIPPED \[1\] test_cases.py(?::\d+)?: {SKIP}=1: the Slurm tests are skipped on purpose$",
                         result.stdout.str(), re.MULTILINE)
    assert len(reasons) == 2, result.stdout.str()


def test_not_slurm_leaves_out_every_test_on_the_cluster(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SKIP, raising=False)
    result = _session(pytester, monkeypatch, "-m", "not slurm")
    assert result.parseoutcomes() == {"passed": 1, "deselected": 2}, result.stdout.str()
