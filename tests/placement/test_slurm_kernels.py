"""Kernels as Slurm jobs, against the real Slurm of tests/slurm_testbed and a real jupyter_server.

The test cluster: node1 and node2 (partition ``gpu``, one fake GPU each, preemptible by
partition ``owner`` with a 10 s grace time) and node3 (partition ``far``) in a network
namespace of its own at 127.2.0.2.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from live_server import JUPYTER, jupyter_env, running_server
from server_fixtures import SLURM_KERNELSPECS, api, run, start_kernel, ws_execute
from tornado.httpclient import HTTPClientError
from traitlets.config import Config

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json, slurm_config

pytestmark = [pytest.mark.slurm]

SLURM = "python3-gpuckpt-slurm"
FAR = "python3-gpuckpt-far"
WIDE = "python3-gpuckpt-wide"
BLOCKER = ["-p", "gpu", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 600"]


@pytest.fixture
def jp_server_config(jp_server_config: Any, slurm: Any) -> Any:
    """The Slurm kernelspecs' settings, read quickly; the cluster is up and empty."""
    jp_server_config["SlurmPlacement"] = Config(poll_interval=0.5, start_timeout=60.0, queue_timeout=120.0)
    jp_server_config["GPUCheckpointApp"]["ready_timeout"] = 60.0
    return jp_server_config


async def until(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(0.25)


async def model(jp_fetch: Any, kernel_id: str) -> dict[str, Any]:
    return dict(await api(jp_fetch, "kernels", kernel_id))


async def block(slurm: Any, node: str) -> str:
    """A batch job holding ``node``'s GPU; its id, once it runs."""
    job = slurm.submit([*BLOCKER[:2], "-w", node, *BLOCKER[2:]])
    await until(lambda: asyncio.to_thread(lambda: slurm.job_state(job) == "RUNNING"), 30, f"blocker on {node}")
    return str(job)


async def test_a_slurm_kernel_runs_cells_as_a_job_on_a_node(jp_fetch: Any, jp_serverapp: Any, slurm: Any) -> None:
    kernel_id = await start_kernel(jp_fetch, SLURM)
    assert (await run(jp_serverapp, kernel_id, "import os; print(os.environ['SLURMD_NODENAME'], 6 * 7)")
            ).split()[1] == "42"
    found = await model(jp_fetch, kernel_id)
    jobs = {j["id"]: j for j in slurm.jobs()}
    assert found["placement"] == "slurm" and found["job_id"] in jobs
    assert found["node"] == jobs[found["job_id"]]["node"] and found["node"] in ("node1", "node2")
    assert slurm.gres_used(found["node"]) == 1 and len(found["gpus"]) == 1

    # the key is only in the job's private connection file, and the traffic is encrypted
    folder = Path(jp_serverapp.web_app.settings["gpuckpt_app"].store_root)
    [job_dir] = folder.glob(f"*/jobs/{kernel_id}")
    connection = json.loads((job_dir / "connection.json").read_text())
    assert stat.S_IMODE((job_dir / "connection.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(job_dir.stat().st_mode) & 0o777 == 0o700  # (ipykernel adds the sticky bit)
    assert connection["curve_secretkey"] and connection["key"] not in (job_dir / "job.sh").read_text()
    job = await asyncio.to_thread(subprocess.run, ["scontrol", "show", "job", found["job_id"]],
                                  capture_output=True, text=True, check=True)
    assert connection["key"] not in job.stdout


async def test_suspend_frees_the_gres_and_a_pending_job_takes_the_gpu(jp_fetch: Any, jp_serverapp: Any,
                                                                      slurm: Any) -> None:
    kernel_id = await start_kernel(jp_fetch, SLURM)
    await run(jp_serverapp, kernel_id, "x = 1")
    node = (await model(jp_fetch, kernel_id))["node"]
    other = "node2" if node == "node1" else "node1"
    await block(slurm, other)
    waiting = slurm.submit(BLOCKER)  # every GPU is taken: it waits for one
    await until(lambda: asyncio.to_thread(lambda: slurm.job_state(waiting) == "PENDING"), 10, "pending job")

    started = time.monotonic()
    suspended = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert suspended["state"] == "suspended" and suspended["job_id"] is None and suspended["gpus"] == []
    # the kernel, told by the server that it ends its run, took no checkpoint of its own on SIGTERM
    assert len(await api(jp_fetch, "kernels", kernel_id, "checkpoints")) == 1
    await until(lambda: asyncio.to_thread(lambda: slurm.job_state(waiting) == "RUNNING"), 30,
                "the pending job to take the freed GPU")
    print(f"suspend to the pending job running: {time.monotonic() - started:.1f} s")
    assert {j["node"] for j in slurm.jobs() if j["id"] == waiting} == {node}


async def test_resume_waits_in_slurms_queue_visibly_then_lands_on_the_other_node(
        jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, slurm: Any) -> None:
    first = await block(slurm, "node2")
    kernel_id = await start_kernel(jp_fetch, SLURM)
    assert (await model(jp_fetch, kernel_id))["node"] == "node1"
    await run(jp_serverapp, kernel_id, "import numpy as np\nweights = np.arange(1000)\nname = 'kept'")
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
        await block(slurm, "node1")  # every GPU is taken now
        cell = asyncio.ensure_future(ws_execute(ws, "print(name, int(weights.sum()))", timeout=180))
        waiting = await until(lambda: _waiting(jp_fetch, kernel_id), 30, "the resume to wait in the queue")
        assert waiting.startswith("waiting for a GPU: queued in Slurm, job ") and "reason Resources" in waiting
        listing = await asyncio.to_thread(subprocess.run, [
            JUPYTER, "gpuckpt", "list", "--url", jp_serverapp.connection_url,
            "--token", jp_serverapp.identity_provider.token], capture_output=True, text=True, timeout=60)
        assert f"{kernel_id}: waiting for a GPU: queued in Slurm, job " in listing.stdout, listing
        assert not cell.done()  # the cell waits for the kernel
        slurm.cancel(first)  # node2's GPU frees
        reply, iopub = await cell
    finally:
        ws.close()
    assert reply["content"]["status"] == "ok", reply["content"]
    assert "kept 499500\n" in "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")
    found = await model(jp_fetch, kernel_id)
    assert (found["state"], found["node"], found["waiting_for_gpus"]) == ("running", "node2", None)


async def _waiting(jp_fetch: Any, kernel_id: str) -> str | None:
    text = (await model(jp_fetch, kernel_id))["waiting_for_gpus"]
    return text if text and "queued in Slurm" in text and "reason" in text else None


async def test_a_kernel_on_a_node_in_its_own_network_namespace(jp_fetch: Any, jp_serverapp: Any,
                                                                slurm: Any) -> None:
    kernel_id = await start_kernel(jp_fetch, FAR)
    out = await run(jp_serverapp, kernel_id, "import os; print(os.environ['SLURMD_NODENAME'])")
    assert out.strip() == "node3"
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    assert km.ip == "127.2.0.2"  # reached over the namespace's own address
    assert (await model(jp_fetch, kernel_id))["node"] == "node3"


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
async def test_preemption_checkpoints_in_the_grace_time_and_the_kernel_moves(
        jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, slurm: Any, busy: bool) -> None:
    kernel_id = await start_kernel(jp_fetch, SLURM)
    await run(jp_serverapp, kernel_id, "kept = 'before the preemption'")
    node = (await model(jp_fetch, kernel_id))["node"]
    other = "node2" if node == "node1" else "node1"
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        code = "n = 0\nwhile True:\n    n += 1" if busy else "n = 1"
        cell = asyncio.ensure_future(ws_execute(ws, code, timeout=240))
        if busy:
            await asyncio.sleep(1)
        else:
            await cell
        started = time.monotonic()
        owner = slurm.submit(["-p", "owner", "-w", node, "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 600"])
        if busy:
            reply, _ = await cell  # interrupted by the preemption, and answered
            assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KernelTerminated"
        moved = await until(lambda: _moved(jp_fetch, kernel_id), 150, "the kernel to come back elsewhere")
        print(f"owner job submitted to the kernel answering on {moved['node']}: {time.monotonic() - started:.1f} s")
        assert moved["node"] == other and slurm.job_state(owner) == "RUNNING"
        assert f"moved from {node} to {other} after preemption" in moved["notice"]
        if busy:
            assert "Cell 2 was interrupted: re-run it." in moved["notice"]
        else:  # the kernel's own checkpoint holds every cell it ran
            assert "Cells run after that checkpoint: none." in moved["notice"], moved["notice"]
        reply, iopub = await ws_execute(ws, "print(kept, n > 0)")
    finally:
        ws.close()
    printed = "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")
    assert printed == "before the preemption True\n"


async def _moved(jp_fetch: Any, kernel_id: str) -> dict[str, Any] | None:
    found = await model(jp_fetch, kernel_id)
    return found if found["state"] == "running" and found["notice"] else None


async def test_node_death_restores_the_kernel_elsewhere_with_the_same_id(jp_fetch: Any, jp_serverapp: Any,
                                                                           slurm: Any) -> None:
    kernel_id = await start_kernel(jp_fetch, SLURM)
    await run(jp_serverapp, kernel_id, "kept = 'checkpointed'")
    await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    await run(jp_serverapp, kernel_id, "lost = 'after the checkpoint'")
    node = (await model(jp_fetch, kernel_id))["node"]
    started = time.monotonic()
    slurm.kill_node(node)
    moved = await until(lambda: _moved(jp_fetch, kernel_id), 150, "the kernel to come back on another node")
    print(f"node kill to the kernel answering elsewhere: {time.monotonic() - started:.1f} s")
    assert moved["id"] == kernel_id and moved["node"] != node
    assert f"after node failure on {node}" in moved["notice"] or f"from {node} to" in moved["notice"]
    assert "Cells run after that checkpoint: 2." in moved["notice"]
    out = await run(jp_serverapp, kernel_id, "print(kept, 'lost' in dir())")
    assert out.strip() == "checkpointed False"


async def test_a_kernel_cut_off_from_the_network_is_restored_elsewhere(jp_fetch: Any, jp_serverapp: Any,
                                                                       slurm: Any) -> None:
    blockers = [await block(slurm, "node1"), await block(slurm, "node2")]
    kernel_id = await start_kernel(jp_fetch, WIDE)  # node3: the only node left
    await run(jp_serverapp, kernel_id, "kept = 'checkpointed'")
    await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    assert (await model(jp_fetch, kernel_id))["node"] == "node3"
    for job in blockers:
        slurm.cancel(job)
    started = time.monotonic()
    slurm.cut_node3()  # node3 and its job keep running, unreachable
    moved = await until(lambda: _moved(jp_fetch, kernel_id), 120, "the kernel to come back on another node")
    print(f"network cut to the kernel answering elsewhere: {time.monotonic() - started:.1f} s")
    assert moved["node"] in ("node1", "node2") and "after node failure" in moved["notice"]
    assert (await run(jp_serverapp, kernel_id, "print(kept)")).strip() == "checkpointed"


async def test_bad_placements_fail_with_a_clear_error_and_leave_no_job(jp_fetch: Any, jp_serverapp: Any,
                                                                       slurm: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    specs = jp_serverapp.kernel_spec_manager
    cases = {
        "unknown-partition": ({"partition": "nosuchpartition"}, None, "invalid partition"),
        "no-such-feature": ({"partition": "gpu", "constraint": "nosuchfeature"}, None, "Invalid feature"),
        "fails-to-start": ({"partition": "gpu"}, ["/nonexistent/python"], "before its kernel reported back"),
        "never-reports": ({"partition": "gpu", "start_timeout": 3.0},
                          [sys.executable, "-c", "import time; time.sleep(600)", "{connection_file}"],
                          "did not report back within 3 s"),
    }
    for name, (config, argv, expected) in cases.items():
        spec = json.loads((Path(specs.get_kernel_spec(SLURM).resource_dir) / "kernel.json").read_text())
        spec["metadata"]["kernel_provisioner"]["config"].update(config)
        if argv:
            spec["argv"] = argv
        folder = Path(specs.get_kernel_spec(SLURM).resource_dir).parent / name
        folder.mkdir()
        (folder / "kernel.json").write_text(json.dumps(spec))
        started = time.monotonic()
        with pytest.raises(HTTPClientError) as raised:
            await start_kernel(jp_fetch, name)
        message = raised.value.response.body.decode() if raised.value.response else str(raised.value)
        assert expected in message, (name, message)
        assert time.monotonic() - started < 60, name
        assert slurm.jobs() == [], name  # the job is cleaned up

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    with pytest.raises(HTTPClientError) as raised:
        await start_kernel(jp_fetch, SLURM)
    assert "sbatch is not on the Jupyter server's PATH" in raised.value.response.body.decode()


def test_a_server_restart_finds_its_running_and_suspended_slurm_kernels(tmp_path: Path, slurm: Any) -> None:
    folder = tmp_path / "data" / "kernels" / SLURM
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("restart test", slurm=SLURM_KERNELSPECS[SLURM])))
    args = ("--SlurmPlacement.poll_interval=0.5",)
    with running_server(tmp_path, *args) as server:
        running, suspended = server.start_kernel(SLURM), server.start_kernel(SLURM)
        server.run(running, "a = 'still running'")
        server.run(suspended, "b = 'was suspended'")
        job = server.api("GET", f"api/gpuckpt/kernels/{running}")["job_id"]
        assert server.api("POST", f"api/gpuckpt/kernels/{suspended}/suspend?wait=1")["state"] == "suspended"
    assert slurm.job_state(job) == "RUNNING"  # the server stopped; the kernel did not

    with running_server(tmp_path, *args) as server:
        deadline = time.monotonic() + 30
        while {running, suspended} - {k["id"] for k in server.api("GET", "api/gpuckpt/kernels")}:
            assert time.monotonic() < deadline, "the kernels were not registered again"
            time.sleep(0.2)
        found = server.api("GET", f"api/gpuckpt/kernels/{running}")
        assert (found["state"], found["job_id"]) == ("running", job)
        listing = server.cli("list").stdout
        assert f"{found['node']} (job {job})" in listing, listing
        assert server.run(running, "print(a)").strip() == "still running"
        assert server.api("GET", f"api/gpuckpt/kernels/{suspended}")["state"] == "suspended"
        assert server.api("POST", f"api/gpuckpt/kernels/{suspended}/resume?wait=1")["state"] == "running"
        assert server.run(suspended, "print(b)").strip() == "was suspended"
        server.api("DELETE", f"api/kernels/{running}")
        deadline = time.monotonic() + 30
        while slurm.job_state(job) not in ("CANCELLED", "COMPLETED", "FAILED"):
            assert time.monotonic() < deadline, "shutting the kernel down did not end its job"
            time.sleep(0.2)


def test_doctor_checks_that_every_node_sees_the_store(tmp_path: Path, slurm: Any) -> None:
    env = jupyter_env(tmp_path)
    for name, partition in ((SLURM, "gpu"), (FAR, "far"), ("nowhere", "nosuchpartition")):
        folder = tmp_path / "data" / "kernels" / name
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text(json.dumps(kernelspec_json(name, slurm=slurm_config(partition))))
    doctor = subprocess.run([JUPYTER, "gpuckpt", "doctor"], env=env, capture_output=True, text=True, timeout=240)
    lines = doctor.stdout.splitlines()
    store = tmp_path / "data" / "gpuckpt" / "store"
    assert f"OK    shared store partition gpu: 2 of 2 node(s) see the store {store}" in lines, doctor.stdout + doctor.stderr
    assert f"OK    shared store partition far: 1 of 1 node(s) see the store {store}" in lines, doctor.stdout
    assert any(line.startswith("FAIL  slurm        partition 'nosuchpartition'") for line in lines), doctor.stdout
    assert doctor.returncode == 1
    assert not list((store / "root").glob(".doctor-*"))  # its test file is gone
