"""Slurm's commands as templates a site can wrap, and its JSON read as Slurm defines it.

The JSON shapes: this cluster's Slurm 22.05 (data_parser v0.0.38) is read from the real
commands and checked against Slurm's own text output of the same jobs and nodes; the shape of
23.02 and later (states as lists, numbers as ``{"set", "infinite", "number"}``, nodes under
``sinfo``), which Debian 13's 24.11 prints, is checked on documents of that shape.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import SLURM_KERNELSPECS, api, run, start_kernel
from traitlets.config import Config

from jupyter_gpuckpt.placement.slurm_commands import SlurmCommandError, SlurmCommands
from jupyter_gpuckpt.placement.slurm_jobs import KernelTag, SlurmJob, SlurmNode, SlurmOutputError, read_jobs, read_nodes

SLURM = "python3-gpuckpt-slurm"
SLEEPER = ["-o", "/dev/null", "--wrap", "sleep 600"]


def test_a_template_is_filled_word_by_word_without_a_shell() -> None:
    commands = SlurmCommands(prefix="sudo -E -u {user}", submit="sbatch --parsable {options} {script}")
    script = "/store/jobs/k; rm -rf ~/x.sh"
    argv = commands.argv(commands.submit, ["--gres=gpu:1", "--comment=a b"], script=script)
    assert argv[:4] == ["sudo", "-E", "-u", os.environ.get("USER") or argv[3]]
    assert argv[4:] == ["sbatch", "--parsable", "--gres=gpu:1", "--comment=a b", script]
    assert commands.argv("scancel {options} {job_id}", [], job_id="7")[-1:] == ["7"]  # no options: no word
    with pytest.raises(SlurmCommandError, match=r"template 'scancel \{jobid\}' has an unknown field: 'jobid'"):
        commands.argv("scancel {jobid}", job_id="7")
    assert commands.programs("srun") == ["sudo"]  # what a wrapper runs is on the other side of it
    assert SlurmCommands().programs("srun") == ["sbatch", "scancel", "sinfo", "squeue", "srun"]


def test_slurm_json_from_2302_on_reads_as_2205s() -> None:
    """The same two jobs and nodes in both data_parser generations give the same records."""
    comment = "jupyter-gpuckpt group=vision kernel=k1 store=abc server=s1"
    old = {"meta": {}, "errors": [], "jobs": [
        {"job_id": 11, "job_state": "RUNNING", "state_reason": "None", "partition": "gpu", "user_name": "ana",
         "node_count": 2, "tasks": 2, "tres_per_node": "gres:gpu:h200:2", "tres_per_job": "", "tres_per_task": "",
         "comment": comment, "nodes": "node[1-2]"},
        {"job_id": 12, "job_state": "COMPLETING", "state_reason": "None", "partition": "a,b", "user_name": "bo",
         "node_count": 1, "tasks": 4, "tres_per_node": "", "tres_per_job": "", "tres_per_task": "gres:gpu:1",
         "comment": "", "nodes": "node3"}]}
    new = {"meta": {}, "errors": [], "warnings": [], "jobs": [
        {"job_id": 11, "job_state": ["RUNNING"], "state_reason": "None", "partition": "gpu", "user_name": "ana",
         "node_count": {"set": True, "infinite": False, "number": 2},
         "tasks": {"set": True, "infinite": False, "number": 2}, "tres_per_node": "gres/gpu:h200:2",
         "tres_per_job": "", "tres_per_task": "", "comment": comment, "nodes": "node[1-2]"},
        {"job_id": 12, "job_state": ["COMPLETED", "COMPLETING"], "state_reason": "None", "partition": "a,b",
         "user_name": "bo", "node_count": {"set": True, "infinite": False, "number": 1},
         "tasks": {"set": True, "infinite": False, "number": 4}, "tres_per_node": "", "tres_per_job": "",
         "tres_per_task": "gres/gpu=1", "comment": "", "nodes": "node3"}]}
    expected = [SlurmJob("11", "RUNNING", "None", ("gpu",), "ana", 4, KernelTag("vision", "k1", "abc", "s1"),
                         "node[1-2]"),
                SlurmJob("12", "COMPLETING", "None", ("a", "b"), "bo", 4, None, "node3")]
    assert read_jobs(json.dumps(old)) == read_jobs(json.dumps(new)) == expected
    assert expected[1].suspect and not expected[0].suspect

    old_nodes = {"errors": [], "nodes": [{"name": "node1", "state": "mixed", "state_flags": ["NOT_RESPONDING"],
                                          "partitions": ["gpu", "b"]},
                                         {"name": "node2", "state": "idle", "state_flags": [], "partitions": ["gpu"]}]}
    new_nodes = {"errors": [], "sinfo": [  # --Node: one entry per node and partition
        {"node": {"state": ["MIXED", "NOT_RESPONDING"]}, "nodes": {"nodes": ["node1"]}, "partition": {"name": "gpu"}},
        {"node": {"state": ["MIXED", "NOT_RESPONDING"]}, "nodes": {"nodes": ["node1"]}, "partition": {"name": "b"}},
        {"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["node2"]}, "partition": {"name": "gpu"}}]}
    nodes = {"node1": SlurmNode(frozenset({"MIXED", "NOT_RESPONDING"}), frozenset({"gpu", "b"})),
             "node2": SlurmNode(frozenset({"IDLE"}), frozenset({"gpu"}))}
    assert read_nodes(json.dumps(old_nodes)) == read_nodes(json.dumps(new_nodes)) == nodes
    assert SlurmJob("11", "RUNNING", node="node1", node_state=nodes["node1"].states).suspect


def test_output_that_is_not_slurms_json_says_what_it_is() -> None:
    with pytest.raises(SlurmOutputError, match=r"squeue --json gave no JSON \(it printed 'Usage: squeue "
                                               r"\[OPTIONS\]'\): is its serializer/json"):
        read_jobs("Usage: squeue [OPTIONS]\n")
    with pytest.raises(SlurmOutputError, match="squeue reports: Invalid user: nobody2"):
        read_jobs(json.dumps({"errors": [{"error": "Invalid user: nobody2", "error_number": 2}], "jobs": []}))


async def test_the_real_json_agrees_with_slurms_text_output(slurm: Any, tmp_path: Path) -> None:
    """Jobs and nodes read from this cluster's ``squeue --json`` and ``sinfo --json`` are the
    ones Slurm's text formats list, field by field."""
    tag = KernelTag.of("g", "k1", tmp_path, "s1")
    running = slurm.submit(["-p", "gpu", "-w", "node1", "--gres=gpu:1", f"--comment={tag}", *SLEEPER])
    slurm.wait_job(running, "RUNNING")
    slurm.wait_job(slurm.submit(["-p", "gpu", "-w", "node2", "--gres=gpu:1", *SLEEPER]), "RUNNING")
    pending = [slurm.submit(["-p", "gpu,owner", "--gres=gpu:1", *SLEEPER]) for _ in range(2)]
    ended = slurm.submit(["-p", "far", *SLEEPER])
    slurm.wait_job(ended, "RUNNING")
    slurm.cancel(ended)
    slurm.wait_job(ended, "CANCELLED")
    commands = SlurmCommands()

    text = slurm._run("squeue", "-h", "--states=all", "-o", "%i|%T|%r|%P|%u|%N|%k")
    seen = {job.job_id: job for job in await commands.read_jobs("--states=all")}
    raw = {str(job["job_id"]): job for job in json.loads(slurm._run("squeue", "--json"))["jobs"]}
    for line in text.splitlines():
        job_id, state, reason, partitions, user, node, comment = line.split("|")
        job = seen[job_id]
        assert (job.state, ",".join(job.partitions), job.user) == (state, partitions, user)
        # %r prints Slurm's description where it has one ("Nodes required for job are DOWN, ..."),
        # else the reason's code, which is what the JSON's state_reason always is
        assert job.reason == raw[job_id]["state_reason"]
        assert reason in (job.reason, raw[job_id]["state_description"])
        assert (job.node, job.tag) == (node if state != "PENDING" else job.node, KernelTag.parse(comment))
    assert seen[running].gpus == 1 and seen[running].tag == tag and seen[ended].ended
    assert {seen[p].state for p in pending} == {"PENDING"} and all(seen[p].waits_for_gpus for p in pending)
    assert [job.job_id for job in await commands.own_jobs()] == sorted(seen, key=int)

    nodes = await commands.read_nodes()
    for line in slurm._run("sinfo", "-h", "-N", "-o", "%N %T %P").splitlines():
        name, state, partition = line.split()
        assert state.removesuffix("*").upper() in nodes[name].states
        assert partition.removesuffix("*") in nodes[name].partitions
    assert await commands.default_partition() == "gpu"


def _wrapper(folder: Path) -> Path:
    """A site's wrapper: logs each Slurm command it is given, then runs it as it is."""
    script = folder / "slurm-wrapper"
    script.write_text(f"#!{sys.executable}\nimport os, sys\n"
                      f"open({str(folder / 'commands.log')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                      "os.execvp(sys.argv[1], sys.argv[1:])\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def jp_server_config(jp_server_config: Any, slurm: Any, tmp_path: Path) -> Any:
    jp_server_config["SlurmPlacement"] = Config(poll_interval=0.5, start_timeout=60.0, queue_timeout=120.0)
    jp_server_config["SlurmCommands"] = Config(prefix=str(_wrapper(tmp_path)))
    jp_server_config["GPUCheckpointApp"]["ready_timeout"] = 60.0
    return jp_server_config


async def test_a_sites_wrapper_runs_every_slurm_command_of_a_kernels_life(jp_fetch: Any, jp_serverapp: Any,
                                                                           tmp_path: Path) -> None:
    assert SLURM in SLURM_KERNELSPECS
    kernel_id = await start_kernel(jp_fetch, SLURM)
    await run(jp_serverapp, kernel_id, "x = 6 * 7")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    resumed = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert resumed["state"] == "running"
    assert (await run(jp_serverapp, kernel_id, "print(x)")).strip() == "42"
    log = (tmp_path / "commands.log").read_text()
    words = {line.split()[0] for line in log.splitlines()}
    assert {"sbatch", "squeue", "sinfo", "scancel"} <= words, log
    assert "squeue --json --states=all --user=" in log and "sinfo --json --Node" in log
