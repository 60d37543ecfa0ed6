"""A real local Slurm cluster for tests: ``slurm_cluster`` (session) and ``slurm`` (per test).

``tests/slurm_testbed/testbed.sh`` runs munged, slurmctld and three slurmd on this host: node1
(Features=slowgpu) and node2 (fastgpu) on 127.0.0.1 in partitions ``gpu`` (default, PriorityTier 1,
PreemptMode=CANCEL, GraceTime=10) and ``owner`` (PriorityTier 10), node3 (fargpu) at 127.2.0.2 in its
own network namespace in partition ``far``. One fake GPU per node; jobs run as root, and ``hostname``
is the same on every node: use ``$SLURMD_NODENAME``.

Caveat (proctrack/linuxproc, no cgroups): a job process whose parent dies is reparented to init and
escapes scancel and node kills; ``exec`` the long-lived process in the batch script (or use srun).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTBED = Path(__file__).parent / "slurm_testbed"
SCRIPT = TESTBED / "testbed.sh"
BASE = Path("/tmp/gpuckpt_slurm")
SKIP = "JUPYTER_GPUCKPT_SKIP_SLURM"
BINARIES = ("slurmctld", "slurmd", "sbatch", "munged", "ip", "nsenter")


class SlurmCluster:
    """Client side of the testbed: Slurm's commands with ``SLURM_CONF`` set, plus node faults."""

    def __init__(self) -> None:
        self.conf = BASE / "etc" / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}
        self.nodes = ("node1", "node2", "node3")

    def _run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(args, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def testbed(self, *args: str) -> str:
        """Run ``testbed.sh`` (its daemons close inherited pipes, so capturing output is safe)."""
        return self._run(str(SCRIPT), *args)

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's slurmd, slurmstepd's and job processes: a crashed machine."""
        self.testbed("kill-node", name)

    def start_node(self, name: str) -> None:
        """Start the node's slurmd again; with ReturnToService=2 it comes back IDLE by itself."""
        self.testbed("start-node", name)

    def cut_node3(self) -> None:
        """Take node3's network down: unreachable, but its slurmd and jobs keep running."""
        self.testbed("cut-node3")

    def uncut_node3(self) -> None:
        self.testbed("uncut-node3")

    def pids_of_node(self, name: str) -> list[int]:
        """The node's slurmd, slurmstepd's and job processes."""
        return [int(p) for p in self.testbed("pids-of-node", name).split()]

    def node_state(self, name: str) -> str:
        """scontrol's state with its flags, e.g. ``IDLE``, ``MIXED``, ``DOWN+NOT_RESPONDING``."""
        match = re.search(r"\bState=(\S+)", self._run("scontrol", "-o", "show", "node", name))
        assert match, f"no State= for {name}"
        return match.group(1)

    def wait_node(self, name: str, state_substring: str, timeout: float = 60.0) -> str:
        """Poll until ``state_substring`` is in the node's state; returns that state."""
        deadline = time.monotonic() + timeout
        while state_substring not in (state := self.node_state(name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} is {state}, not {state_substring}, after {timeout} s")
            time.sleep(0.2)
        return state

    def gres_used(self, name: str) -> int:
        """GPUs allocated on the node (sinfo prints e.g. ``gpu:1``, ``gpu:1(IDX:0)``, ``gpu:0(IDX:N/A)``)."""
        used = self._run("sinfo", "-h", "-n", name, "-O", "GresUsed").split()
        match = re.match(r"gpu:(?:[^:(]+:)?(\d+)", used[0]) if used else None
        return int(match.group(1)) if match else 0

    def jobs(self) -> list[dict[str, str]]:
        """squeue's jobs (pending, running, completing): id, name, state, reason, node."""
        keys = ("id", "name", "state", "reason", "node")
        out = self._run("squeue", "-h", "-o", "\t".join(("%i", "%j", "%T", "%r", "%N")))
        return [dict(zip(keys, line.split("\t"), strict=True)) for line in out.splitlines() if line]

    def cancel_all(self, timeout: float = 30.0) -> None:
        """End every job and wait until squeue shows none. Batch scripts get SIGKILL first, so that
        a process ignoring SIGTERM costs no KillWait (those jobs end FAILED, the others CANCELLED)."""
        deadline = time.monotonic() + timeout
        while ids := [job["id"] for job in self.jobs()]:
            # check=False: pending jobs have no batch step to signal, and a job may just have ended
            self._run("scancel", "--batch", "--signal=KILL", *ids, check=False)
            self._run("scancel", *ids, check=False)
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still queued after {timeout} s: {self.jobs()}")
            time.sleep(0.2)

    def submit(self, args: list[str]) -> str:
        """``sbatch --parsable ARGS``; returns the job id."""
        return self._run("sbatch", "--parsable", *args).strip().split(";")[0]

    def cancel(self, job_id: str) -> None:
        """``scancel`` one job."""
        self._run("scancel", job_id)

    def job_state(self, job_id: str) -> str:
        """e.g. PENDING, RUNNING, COMPLETED, CANCELLED, PREEMPTED, NODE_FAIL (kept MinJobAge=300 s)."""
        match = re.search(r"\bJobState=(\S+)", self._run("scontrol", "-o", "show", "job", job_id))
        assert match, f"no JobState= for job {job_id}"
        return match.group(1)

    def wait_job(self, job_id: str, state_substring: str, timeout: float = 30.0) -> str:
        """Poll until ``state_substring`` is in the job's state; returns that state."""
        deadline = time.monotonic() + timeout
        while state_substring not in (state := self.job_state(job_id)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is {state}, not {state_substring}, after {timeout} s")
            time.sleep(0.1)
        return state

    def reset(self, timeout: float = 60.0) -> None:
        """Leave no job, every node responding and IDLE, and the partitions as slurm.conf has them,
        whatever the previous test did."""
        self.testbed("revive")  # slurmd's first: jobs on a killed but not yet DOWN node end then
        self.cancel_all()
        for line in self.conf.read_text().splitlines():
            if line.startswith("PartitionName="):
                self._run("scontrol", "update", *line.split())
        deadline = time.monotonic() + timeout
        while busy := {n: s for n in self.nodes if (s := self.node_state(n)) not in ("IDLE", "IDLE+PLANNED")}:
            for name, state in busy.items():
                if "NOT_RESPONDING" not in state and any(f in state for f in ("DOWN", "DRAIN", "FAIL")):
                    self._run("scontrol", "update", f"nodename={name}", "state=resume")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not idle after {timeout} s: {busy}")
            time.sleep(0.2)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker, and before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the cluster is marked ``slurm`` (``-m "not slurm"`` leaves them out), and
    with JUPYTER_GPUCKPT_SKIP_SLURM=1 each is skipped with that reason, which ``-ra`` lists.

    Under pytest-xdist (``-n 2 --dist loadgroup``, as CI runs) the tests on the cluster share one
    worker, since the testbed is one per machine, and every other test runs in the worker of the
    rest of its file, whose module fixtures (a hub, a server) are then made once."""
    skip = pytest.mark.skip(reason=f"{SKIP}=1: the Slurm tests are skipped on purpose")
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
        on_cluster = item.get_closest_marker("slurm") is not None
        if on_cluster and os.environ.get(SKIP) == "1":
            item.add_marker(skip)
        item.add_marker(pytest.mark.xdist_group("slurm" if on_cluster else item.nodeid.split("::")[0]))


def _missing_requirements() -> list[str]:
    """What this machine lacks to run the testbed, each with how to get it (none: it can run)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("the Slurm testbed needs root (it starts munged, slurmctld, slurmd and a network namespace)")
    if binaries := [b for b in BINARIES if not shutil.which(b)]:
        missing.append(f"{', '.join(binaries)} missing: run {os.path.relpath(SCRIPT)} install")
    return missing


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Start the testbed once per session and stop it at the end. A missing requirement fails
    the tests, saying what is missing (a skip is too easy to miss); JUPYTER_GPUCKPT_SKIP_SLURM=1
    skips them on purpose (see :func:`pytest_collection_modifyitems`)."""
    if missing := _missing_requirements():
        pytest.fail(f"{'; '.join(missing)} (or set {SKIP}=1, or -m 'not slurm', to leave the Slurm tests out on "
                    "purpose)", pytrace=False)
    started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=120)
    if started.returncode:
        subprocess.run([str(SCRIPT), "stop"], capture_output=True, timeout=60)
        pytest.fail(f"testbed.sh start failed:\n{started.stderr}", pytrace=False)
    cluster = SlurmCluster()
    before = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        subprocess.run([str(SCRIPT), "stop"], capture_output=True, timeout=120)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The session's cluster, reset for this test: no jobs, every node IDLE."""
    slurm_cluster.reset()
    return slurm_cluster
