"""The local Slurm cluster itself (tests/slurm_testbed): what the placement tests rely on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from slurm_cluster import SlurmCluster

# Registers the fixtures for this module run on its own; conftest registers them for the whole suite.
pytestmark = pytest.mark.slurm

# what a job tells about where it runs: the node, its GPU, and (node3) its network namespace's address
REPORT = 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"; ip -o -4 addr show'


def test_jobs_run_on_every_node(slurm: SlurmCluster, tmp_path: Path) -> None:
    """node1 and node2 by name and by feature, node3 in partition far inside its own netns."""
    asks = {"node1": ["-w", "node1"], "node2": ["-C", "fastgpu"], "node3": ["-p", "far"]}
    jobs = {node: slurm.submit([*args, "--gres=gpu:1", "-o", str(tmp_path / f"{node}.out"), "--wrap", REPORT])
            for node, args in asks.items()}
    for node, job in jobs.items():
        slurm.wait_job(job, "COMPLETED")
        first, *addresses = (tmp_path / f"{node}.out").read_text().splitlines()
        assert first == f"{node} 0"
        assert any("127.2.0.2/24" in a for a in addresses) == (node == "node3"), addresses


def test_gres_used_counts_a_running_gpu_job(slurm: SlurmCluster) -> None:
    """The one GPU of node1 is taken: sinfo counts it, and a second GPU job on node1 waits."""
    job = slurm.submit(["-w", "node1", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "exec sleep 300"])
    slurm.wait_job(job, "RUNNING")
    assert [slurm.gres_used(n) for n in ("node1", "node2", "node3")] == [1, 0, 0]
    second = slurm.submit(["-J", "second", "-w", "node1", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "exec sleep 300"])
    time.sleep(1)
    assert [j for j in slurm.jobs() if j["id"] == second] == [
        {"id": second, "name": "second", "state": "PENDING", "reason": "Resources", "node": ""}]
    slurm.cancel_all()
    assert slurm.gres_used("node1") == 0


def test_dead_and_cut_off_nodes_go_down_and_come_back(slurm: SlurmCluster) -> None:
    """node1 crashes (every process killed) while node3 loses its network (its job keeps running):
    both are marked not responding, then DOWN, and their --no-requeue jobs end NODE_FAIL. A new
    slurmd, or the network back, makes them IDLE again."""
    jobs = {node: slurm.submit(["-w", node, "-p", partition, "--no-requeue", "--gres=gpu:1", "-o", "/dev/null",
                                "--wrap", "exec sleep 300"])
            for node, partition in (("node1", "gpu"), ("node3", "far"))}
    for job in jobs.values():
        slurm.wait_job(job, "RUNNING")
    slurm.kill_node("node1")
    slurm.cut_node3()
    assert slurm.pids_of_node("node1") == []
    for node in jobs:
        slurm.wait_node(node, "NOT_RESPONDING", timeout=30)
    for node, job in jobs.items():
        assert slurm.wait_node(node, "DOWN", timeout=40) == "DOWN+NOT_RESPONDING"
        assert slurm.job_state(job) == "NODE_FAIL"
    assert len(slurm.pids_of_node("node3")) > 1, "node3's slurmd and job should still run while cut off"
    assert slurm.node_state("node2") == "IDLE"
    slurm.start_node("node1")
    slurm.uncut_node3()
    for node in jobs:
        assert slurm.wait_node(node, "IDLE", timeout=30) == "IDLE"
