"""Behind JupyterHub on a Slurm cluster: the user's server is itself a Slurm job (batchspawner's
SlurmSpawner, as HPC sites run it) and each Slurm kernel is a job of its own. The admin suspends
and resumes the kernel through the hub service, which frees and takes back its GPU; the hub
stops the server (cancels its job) and the kernel's job runs on; the next server, a new job,
takes the kernel over with its state.

The real hub, proxy and Slurm test cluster (tests/slurm_testbed). batchspawner's own spawner
runs unchanged but for who the users are: the test users are no Unix users (everything here
runs as root, as with the other hub tests), so their environment is not read from the password
database; ``MultiSlurmSpawner`` maps the testbed's node names to their address.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_fixtures import ADMIN, TESTER_TOKEN, Hub, running_hub
from slurm_cluster import SlurmCluster

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json, slurm_config

pytestmark = [pytest.mark.slurm]

SLURM_KERNEL = "python3-gpuckpt-slurm"
SERVER_JOB = "spawner-jupyterhub"
"""The job name batchspawner gives users' servers."""


def _slurm_spawner(base: Path) -> str:
    return f"""
import batchspawner  # noqa: F401 (its hub API handler: where the server's job tells the hub its port)
from batchspawner import MultiSlurmSpawner
from traitlets import default


class TestUsersSlurmSpawner(MultiSlurmSpawner):
    def user_env(self, env):
        env["USER"] = self.user.name
        env["HOME"] = self.req_homedir
        return env

    @default("req_homedir")
    def _homedir(self):
        return f"{base}/users/{{self.user.name}}/root"


c.JupyterHub.spawner_class = TestUsersSlurmSpawner
c.MultiSlurmSpawner.daemon_resolver = {{"node1": "127.0.0.1", "node2": "127.0.0.1"}}
c.SlurmSpawner.exec_prefix = ""  # sbatch as the hub's user (root), not sudo -u USER
c.SlurmSpawner.req_srun = "exec"  # the server is the job's process, so that scancel reaches it
c.SlurmSpawner.req_partition = "gpu"
c.SlurmSpawner.startup_poll_interval = 0.5
c.Spawner.cmd = ["jupyterhub-singleuser"]
c.Spawner.env_keep = ["PATH", "PYTHONPATH", "VIRTUAL_ENV", "LANG", "LC_ALL", "SLURM_CONF"]
c.Spawner.args += ["--SlurmPlacement.poll_interval=0.5", "--SlurmPlacement.start_timeout=60",
                   "--GPUCheckpointApp.ready_timeout=60"]
"""


@pytest.fixture
def hub(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Hub]:
    with running_hub(tmp_path, users=("alice",), extra_config=_slurm_spawner(tmp_path)) as hub:
        spec = kernelspec_json("Python 3 (GPU checkpoint, Slurm)", slurm=slurm_config("gpu", gpus=1))
        (tmp_path / "shared" / "kernels" / SLURM_KERNEL).mkdir(parents=True)
        (tmp_path / "shared" / "kernels" / SLURM_KERNEL / "kernel.json").write_text(json.dumps(spec))
        try:
            yield hub
        finally:
            slurm.cancel_all()


def _jobs(slurm: SlurmCluster) -> dict[str, dict[str, str]]:
    return {job["id"]: job for job in slurm.jobs()}


def _server_job(slurm: SlurmCluster) -> dict[str, str]:
    [job] = [j for j in slurm.jobs() if j["name"] == SERVER_JOB]
    assert job["state"] == "RUNNING", job
    return job


def _kernel(hub: Hub, token: str, kernel_id: str) -> dict[str, Any]:
    response = hub.request("GET", f"user/alice/api/gpuckpt/kernels/{kernel_id}", token)
    assert response.code == 200, (response.code, response.body)
    return dict(response.json())


def _service(hub: Hub, kernel_id: str, action: str) -> dict[str, Any]:
    response = hub.request("POST", f"services/gpuckpt/api/users/alice/kernels/{kernel_id}/{action}", TESTER_TOKEN)
    assert response.code == 200, (response.code, response.body)
    return dict(response.json())


def _wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.3)
    return value


def test_a_server_job_and_its_kernel_jobs_behind_the_hub(hub: Hub, slurm: SlurmCluster) -> None:
    hub.start_servers("alice")
    server_job = _server_job(slurm)
    token = hub.token("alice")

    kernel_id = hub.start_kernel("alice", token, SLURM_KERNEL)
    model = _kernel(hub, token, kernel_id)
    kernel_job = model["job_id"]
    assert model["placement"] == "slurm" and kernel_job != server_job["id"], model
    assert _jobs(slurm)[kernel_job]["state"] == "RUNNING" and slurm.gres_used(model["node"]) == 1
    reply, _ = hub.execute("alice", token, kernel_id, "x = 'alice' * 2")
    assert reply["content"]["status"] == "ok", reply["content"]

    # the admin suspends it through the service: its job ends and its GPU is free for anyone
    assert _service(hub, kernel_id, "suspend")["state"] == "suspended"
    assert kernel_job not in _jobs(slurm)
    assert slurm.gres_used("node1") + slurm.gres_used("node2") == 0  # the server's job holds no GPU
    resumed = _service(hub, kernel_id, "resume")
    assert resumed["state"] == "running" and resumed["job_id"] != kernel_job, resumed
    assert hub.execute("alice", token, kernel_id, "print(x)")[1].strip() == "alicealice"

    # the hub stops the server (scancel of its job): the kernel's job runs on, and the next
    # server, a new job, takes it over with its state
    kernel_job = resumed["job_id"]
    hub.hub_api("DELETE", "users/alice/server")
    _wait(lambda: server_job["id"] not in _jobs(slurm), 60, "the server's job to end")
    assert _jobs(slurm)[kernel_job]["state"] == "RUNNING"
    hub.start_servers("alice")
    assert _server_job(slurm)["id"] != server_job["id"]
    model = _wait(lambda: next((k for k in hub.request("GET", "user/alice/api/gpuckpt/kernels", token).json()
                                if k["id"] == kernel_id), None), 60, "the new server to take the kernel over")
    assert model["state"] == "running" and model["job_id"] == kernel_job, model
    assert hub.execute("alice", token, kernel_id, "print(x)")[1].strip() == "alicealice"
    admin_view = hub.request("GET", "services/gpuckpt/api/kernels", hub.token(ADMIN)).json()
    assert [(k["user"], k["id"], k["placement"]) for k in admin_view["kernels"]] == [("alice", kernel_id, "slurm")]
