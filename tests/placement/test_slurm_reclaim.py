"""Reclaim on a Slurm cluster: the demand is Slurm's queue of GPU jobs, the floors count the
tags every kernel job carries, and a restarted server cancels the kernel jobs it lost track of.

Against the real Slurm of tests/slurm_testbed (node1 and node2 in partition ``gpu``, node3 in
``far``, one fake GPU each) and, for the policy, a real jupyter_server.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from live_server import running_server
from server_fixtures import SLURM_KERNELSPECS, api, run, start_kernel
from traitlets.config import Config

from jupyter_gpuckpt.kernels.ledger import Ledger
from jupyter_gpuckpt.placement import GPUCheckpointProvisioner, ServerContext, slurm_jobs, slurm_queue
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json
from jupyter_gpuckpt.placement.slurm import SlurmPlacement

pytestmark = [pytest.mark.slurm]

SLURM = "python3-gpuckpt-slurm"
SLEEPER = ["-o", "/dev/null", "--wrap", "sleep 600"]


@pytest.fixture
def jp_server_config(jp_server_config: Any, slurm: Any) -> Any:
    """The Slurm kernelspecs' settings, read quickly; the cluster is up and empty."""
    jp_server_config["SlurmPlacement"] = Config(poll_interval=0.5, start_timeout=60.0, queue_timeout=120.0)
    jp_server_config["GPUCheckpointApp"]["ready_timeout"] = 60.0
    return jp_server_config


@pytest.fixture
def gpuckpt_config() -> dict[str, Any]:
    return {"reclaim": "on_demand", "demand_idle": 1.0, "policy_interval": 0.5, "warn_before": 0.0}


async def until(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(0.1)
    return value


async def state_is(slurm: Any, job: str, state: str) -> bool:
    return await asyncio.to_thread(lambda: slurm.job_state(job) == state)


async def running(slurm: Any, args: list[str]) -> str:
    """A batch job submitted with ``args``, once it runs."""
    job = str(slurm.submit([*args, *SLEEPER]))
    await until(lambda: state_is(slurm, job, "RUNNING"), 30, f"job {job} to run")
    return job


def placement(partition: str) -> SlurmPlacement:
    """A kernel's placement as the policy asks it, reading the cluster fresh every time."""
    return SlurmPlacement(kernel_id=str(uuid.uuid4()), partition=partition, poll_interval=0.0)


def tag(group: str, kernel_id: str, store: Path, server: str | None = None) -> str:
    return f"--comment={slurm_jobs.KernelTag.of(group, kernel_id, store, server)}"


@pytest.mark.parametrize(("tres", "gpus"), [
    ("gres:gpu:2", 2), ("gres:gpu:h200:2", 2), ("gres:gpu", 1),  # Slurm 22.05 (this cluster)
    ("gres/gpu:2", 2), ("gres/gpu:h200:4", 4), ("gres/gpu=3", 3), ("cpu=2,gres/gpu=1", 1),  # 24.11
    ("gres/gpu:h200", 1), ("N/A", 0), ("(null)", 0), ("gres/shard:2", 0), ("gres/gpumem:10G", 0)])
def test_gpu_requests_are_read_in_the_formats_of_both_slurm_versions(tres: str, gpus: int) -> None:
    assert slurm_jobs.gpu_count(tres) == gpus


def test_the_tag_reads_back() -> None:
    tag = slurm_jobs.KernelTag.of("data science", "1a2b", Path("/store"), "0123456789abcdef")
    assert str(tag).startswith("jupyter-gpuckpt group=data_science kernel=1a2b store=")
    assert str(tag).endswith(" server=0123456789abcdef")
    assert slurm_jobs.KernelTag.parse(str(tag)) == tag
    older = slurm_jobs.KernelTag.parse(f"jupyter-gpuckpt group=g kernel=1a2b store={tag.store}")  # no server
    assert older == slurm_jobs.KernelTag("g", "1a2b", tag.store, "")
    assert str(slurm_jobs.KernelTag.of("g", "1a2b", Path("/store"))) == str(older)
    assert slurm_jobs.KernelTag.parse("(null)") is None and slurm_jobs.KernelTag.parse("") is None


async def test_demand_is_the_gpu_jobs_pending_in_the_partition(slurm: Any) -> None:
    first = await running(slurm, ["-p", "gpu", "-w", "node1", "--gres=gpu:1"])
    await running(slurm, ["-p", "gpu", "-w", "node2", "--gres=gpu:1"])  # every GPU of gpu is taken
    gres = slurm.submit(["-p", "gpu", "--gres=gpu:1", *SLEEPER])
    per_job = slurm.submit(["-p", "gpu", "--gpus=2", "-N", "2", *SLEEPER])
    slurm.submit(["-p", "gpu", "--gres=gpu:1", "--hold", *SLEEPER])  # held: a GPU cannot start it
    slurm.submit(["-p", "gpu", "--gres=gpu:1", f"--dependency=afterok:{first}", *SLEEPER])
    slurm.submit(["-p", "gpu", "-c", "4", *SLEEPER])  # no GPU asked for: pends for CPUs
    gpu = placement("gpu")
    assert gpu.demand_pool == "slurm:gpu"

    async def both() -> Any:
        found = await gpu.demand()
        return found if len(found.waiters) == 2 else None

    demand = await until(both, 30, "the two GPU jobs to pend for Resources or Priority")
    user = getpass.getuser()
    assert sorted(demand.waiters) == sorted([f"Slurm job {gres} ({user})", f"Slurm job {per_job} ({user})"])
    assert demand.gpus == 3
    reasons = {j["id"]: j["reason"] for j in slurm.jobs()}
    assert {reasons[gres], reasons[per_job]} <= {"Resources", "Priority"}

    # the cluster's default partition is gpu; node3's partition has nobody waiting
    assert (await placement("").demand()).gpus == 3
    assert placement("").demand_pool == "slurm:(default)"
    assert (await placement("far").demand()).gpus == 0
    both_pools = placement("gpu, far")
    assert both_pools.demand_pool == "slurm:far,gpu" and (await both_pools.demand()).gpus == 3


async def test_group_gpus_counts_the_tags_of_running_kernel_jobs(slurm: Any, tmp_path: Path) -> None:
    await running(slurm, ["-p", "gpu", "-w", "node1", "--gres=gpu:1", tag("vision", "k1", tmp_path)])
    await running(slurm, ["-p", "far", "--gres=gpu:1", tag("vision", "k2", tmp_path / "other")])
    await running(slurm, ["-p", "gpu", "-w", "node2", "--gres=gpu:1", tag("data science", "k3", tmp_path)])
    slurm.submit(["-p", "gpu", "--gres=gpu:1", tag("vision", "k4", tmp_path), *SLEEPER])  # pends: holds none
    assert await placement("gpu").group_gpus() == {"vision": 2, "data_science": 1}


async def test_a_restarted_server_cancels_the_kernel_jobs_it_lost_track_of(
        slurm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(GPUCheckpointProvisioner, "context", ServerContext(store_root=tmp_path))
    lost, kept, stale, launched, elsewhere = (str(uuid.uuid4()) for _ in range(5))
    jobs = {
        "lost": await running(slurm, ["-p", "gpu", "-w", "node1", "--gres=gpu:1", tag("g", lost, tmp_path)]),
        "kept": await running(slurm, ["-p", "gpu", "-w", "node2", "--gres=gpu:1", tag("g", kept, tmp_path)]),
        "stale": await running(slurm, ["-p", "far", "--gres=gpu:1", tag("g", stale, tmp_path)]),
        # pending (every GPU is taken) and submitted for a kernel not in the ledger, the same
        "lost pending": slurm.submit(["-p", "gpu", "--gres=gpu:1", tag("g", lost, tmp_path), *SLEEPER]),
        "launched": slurm.submit(["-p", "gpu", "--gres=gpu:1", tag("g", launched, tmp_path), *SLEEPER]),
        "other store": slurm.submit(["-p", "gpu", "--gres=gpu:1", tag("g", elsewhere, tmp_path / "x"), *SLEEPER]),
        "not a kernel": slurm.submit(["-p", "gpu", "--gres=gpu:1", *SLEEPER]),
    }
    slurm_queue.JobQueue.instance().kernels.add(launched)  # started by this server since
    ledger = {kept: {"placement": "slurm", "job_id": jobs["kept"], "node": "node2", "run": 1},
              stale: {"placement": "slurm", "job_id": "999999", "node": "node3", "run": 3}}
    with caplog.at_level(logging.WARNING):
        ended = await SlurmPlacement.collect_orphans(ledger, (), Config())
    assert sorted(ended) == sorted([f"Slurm job {jobs['lost']} (kernel {lost})",
                                    f"Slurm job {jobs['lost pending']} (kernel {lost})",
                                    f"Slurm job {jobs['stale']} (kernel {stale})"])
    assert f"cancelled Slurm job {jobs['lost']} (running): its kernel {lost} is not in the ledger" in caplog.text
    cancelled = [jobs[n] for n in ("lost", "lost pending", "stale")]
    await until(lambda: asyncio.to_thread(lambda: {slurm.job_state(j) for j in cancelled} == {"CANCELLED"}), 30,
                "the lost jobs to end")
    states = {name: slurm.job_state(job) for name, job in jobs.items()}
    assert states["kept"] == "RUNNING"
    assert {states[n] for n in ("launched", "other store", "not a kernel")} <= {"PENDING", "RUNNING"}
    assert await GPUCheckpointProvisioner.collect_orphans(ledger, (), Config()) == []  # local kernels end with their server


async def test_a_starting_server_cancels_no_job_of_another_running_server(
        slurm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs that no ledger knows yet, tagged with their server: another running server's
    (just submitted: its ledger write comes after sbatch) is left alone; this server's, a
    stopped server's and an older server's (a tag without one) are cancelled."""
    monkeypatch.setattr(GPUCheckpointProvisioner, "context", ServerContext(store_root=tmp_path))
    log = logging.getLogger("test_slurm_reclaim")
    me, other, gone = (Ledger(tmp_path / "ledger.json", lambda n=name: n, log) for name in ("lab-a", "lab-b", "lab-c"))
    for ledger in (me, other, gone):
        ledger.save({})
    servers = {"mine": me.key, "other": other.key, "gone": gone.key, "older": None}
    gone.close()
    kernels = {name: str(uuid.uuid4()) for name in servers}
    jobs = {name: slurm.submit(["-p", "gpu", "--gres=gpu:1", tag("g", kernels[name], tmp_path, server), *SLEEPER])
            for name, server in servers.items()}

    ended = await SlurmPlacement.collect_orphans({}, me.live_servers(), Config())

    assert sorted(ended) == sorted(f"Slurm job {jobs[n]} (kernel {kernels[n]})" for n in ("mine", "gone", "older"))
    await until(lambda: asyncio.to_thread(lambda: slurm.job_state(jobs["gone"]) == "CANCELLED"), 30,
                "the stopped server's job to end")
    assert slurm.job_state(jobs["other"]) in ("PENDING", "RUNNING")


def test_a_server_killed_while_submitting_finds_the_job_at_restart_and_cancels_it(tmp_path: Path,
                                                                                   slurm: Any) -> None:
    folder = tmp_path / "data" / "kernels" / SLURM
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("orphan test", slurm=SLURM_KERNELSPECS[SLURM])))
    store = tmp_path / "store"
    args = ("--SlurmPlacement.poll_interval=0.5", f"--GPUCheckpointApp.store_root={store}")
    with running_server(tmp_path, *args) as server:
        kernel_id = server.start_kernel(SLURM)
        server.run(kernel_id, "a = 'taken over'")
        job = server.api("GET", f"api/gpuckpt/kernels/{kernel_id}")["job_id"]
    # what a server killed inside sbatch leaves: a kernel job its ledger never heard of
    lost = str(slurm.submit(["-p", "gpu", "--gres=gpu:1", tag("g", str(uuid.uuid4()), store), *SLEEPER]))
    asyncio.run(until(lambda: state_is(slurm, lost, "RUNNING"), 30, "the lost job to run"))

    with running_server(tmp_path, *args) as server:
        asyncio.run(until(lambda: state_is(slurm, lost, "CANCELLED"), 30, "the lost job to be cancelled"))
        assert f"cancelled Slurm job {lost} (running)" in (tmp_path / "server.log").read_text()
        deadline = time.monotonic() + 30
        while kernel_id not in {k["id"] for k in server.api("GET", "api/gpuckpt/kernels")}:
            assert time.monotonic() < deadline, "the ledger's kernel was not taken over"
            time.sleep(0.2)
        assert slurm.job_state(job) == "RUNNING"  # the ledger's kernel is taken over, not cancelled
        assert server.run(kernel_id, "print(a)").strip() == "taken over"


async def _start_policy(serverapp: Any) -> None:
    """pytest-jupyter does not run the server's start hooks; run them (the policy loop)."""
    await serverapp.extension_manager.start_all_extensions()


async def _idle_slurm_kernel(jp_fetch: Any, jp_serverapp: Any, slurm: Any) -> tuple[str, str]:
    """A Slurm kernel that ran a cell, idle on one GPU, with the partition's other GPU taken by
    a batch job; the kernel's id and node."""
    await _start_policy(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch, SLURM)
    await run(jp_serverapp, kernel_id, "x = 41")
    node = (await api(jp_fetch, "kernels", kernel_id))["node"]
    await running(slurm, ["-p", "gpu", "-w", "node2" if node == "node1" else "node1", "--gres=gpu:1"])
    return kernel_id, node


async def _decided(jp_fetch: Any, kernel_id: str, passes: int = 3) -> dict[str, Any]:
    """The kernel's model once it has been idle past ``demand_idle`` for a few policy passes."""
    async def settled() -> Any:
        found = await api(jp_fetch, "kernels", kernel_id)
        return found if (found["idle_seconds"] or 0) > 1.0 + passes * 0.5 else None

    await until(settled, 30, "policy passes over the idle kernel")
    return dict(await api(jp_fetch, "kernels", kernel_id))


async def test_on_demand_an_idle_slurm_kernel_is_suspended_for_a_pending_gpu_job(
        jp_fetch: Any, jp_serverapp: Any, slurm: Any) -> None:
    kernel_id, node = await _idle_slurm_kernel(jp_fetch, jp_serverapp, slurm)
    found = await _decided(jp_fetch, kernel_id)
    assert found["state"] == "running", found  # nobody waits: kept, however idle
    assert found["policy"]["action"] is None and "nobody waits for a GPU" in found["policy"]["reason"], found

    started = time.monotonic()
    waiting = slurm.submit(["-p", "gpu", "--gres=gpu:1", *SLEEPER])
    seen: list[dict[str, Any]] = []

    async def suspended() -> bool:
        model = await api(jp_fetch, "kernels", kernel_id)
        seen.append(model["policy"] or {})
        return bool(model["state"] == "suspended")

    await until(suspended, 60, "the policy to suspend the idle kernel")
    decision = next(p for p in seen if p.get("action") == "suspend")
    assert decision["for_demand"] and "1 waiting for a GPU" in decision["reason"], decision
    await until(lambda: state_is(slurm, waiting, "RUNNING"), 30, "the pending job to take the freed GPU")
    print(f"GPU job submitted to it running on the freed GPU: {time.monotonic() - started:.1f} s")
    assert {j["node"] for j in slurm.jobs() if j["id"] == waiting} == {node}


@pytest.mark.parametrize("gpuckpt_config", [{
    "reclaim": "on_demand", "demand_idle": 1.0, "policy_interval": 0.5, "warn_before": 0.0,
    "user_groups": {getpass.getuser(): "vision"}, "group_floors": {"vision": 1}}])
async def test_a_group_floor_keeps_the_kernel_despite_a_pending_gpu_job(
        jp_fetch: Any, jp_serverapp: Any, slurm: Any, gpuckpt_config: dict[str, Any]) -> None:
    kernel_id, _ = await _idle_slurm_kernel(jp_fetch, jp_serverapp, slurm)
    provisioner = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner
    assert await provisioner.group_gpus() == {"vision": 1}  # read from the kernel job's tag
    [comment] = [line for line in slurm._run("squeue", "-h", "-o", "%k").splitlines() if kernel_id in line]
    assert comment.startswith(f"jupyter-gpuckpt group=vision kernel={kernel_id} store=")
    ledger = jp_serverapp.web_app.settings["gpuckpt_app"].parts.registry.records.ledger
    assert comment.endswith(f" server={ledger.key}")  # which server runs it, for the others to tell

    waiting = slurm.submit(["-p", "gpu", "--gres=gpu:1", *SLEEPER])

    async def floored() -> Any:
        found = await api(jp_fetch, "kernels", kernel_id)
        return found if (found["policy"] or {}).get("reason", "").startswith("kept: group floor") else None

    await until(floored, 30, "a policy pass to keep the kernel for its group's floor")
    await asyncio.sleep(2.0)  # more passes, the job still waiting
    found = await api(jp_fetch, "kernels", kernel_id)
    assert found["state"] == "running" and found["policy"]["action"] is None, found
    assert found["policy"]["reason"] == "kept: group floor (vision keeps 1 GPU(s))", found
    assert slurm.job_state(waiting) == "PENDING"
