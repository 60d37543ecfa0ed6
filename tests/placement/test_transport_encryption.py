"""Transport encryption (CurveZMQ) of checkpointable kernels, against a real jupyter_server.

Mirrors jupyter_server's own ``tests/services/kernels/test_transport_encryption.py`` with the
checkpointable kernelspec, and goes on where upstream's kernels cannot: through a suspend and
resume (a new process that must listen encrypted too) and on Slurm, whose messages cross the
network. Each kernel's stderr is the test's (pytest's ``capfd``): ipykernel warns there when it
runs over TCP without encryption.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
from live_server import Server, running_server
from server_fixtures import KERNEL_NAME, api, run, start_kernel, ws_execute
from traitlets.config import Config

from jupyter_gpuckpt.cli.doctor import check_encryption
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json

pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="this pyzmq has no CurveZMQ")

PLAINTEXT_WARNING = "Kernel is running over TCP without encryption"
SLURM = "python3-gpuckpt-slurm"
SEEN_BY_THE_KERNEL = ("import os\nfrom ipykernel.kernelapp import IPKernelApp\n"
                      "print(os.getpid(), IPKernelApp.instance().curve_secretkey is not None)")
"""A cell printing the kernel's pid and whether it holds a CurveZMQ secret key."""


@pytest.fixture
def policy() -> str:
    """The server's ``transport_encryption``."""
    return "auto"


@pytest.fixture
def jp_server_config(jp_server_config: Config, policy: str, request: pytest.FixtureRequest) -> Config:
    """The policy set as upstream's test sets it; a test on Slurm gets the cluster, read quickly."""
    jp_server_config["MappingKernelManager"] = Config(transport_encryption=policy)
    if "slurm" in request.fixturenames:
        request.getfixturevalue("slurm")
        jp_server_config["SlurmPlacement"] = Config(poll_interval=0.5, start_timeout=60.0, queue_timeout=120.0)
        jp_server_config["GPUCheckpointApp"]["ready_timeout"] = 60.0
    return jp_server_config


def answers_ping(info: dict[str, Any], curve: bool) -> bool:
    """Whether the kernel of connection ``info`` echoes a heartbeat ping sent with its CurveZMQ
    keys, or with none (an eavesdropper's plain socket, which an encrypted kernel never answers)."""
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    socket.linger = 0
    if curve:
        socket.curve_secretkey = info["curve_secretkey"].encode()
        socket.curve_publickey = socket.curve_serverkey = info["curve_publickey"].encode()
    try:
        socket.connect(f"tcp://{info['ip']}:{info['hb_port']}")
        socket.send(b"ping")
        return bool(socket.poll(3000))
    finally:
        socket.close()


async def pinged(km: Any, curve: bool) -> bool:
    """:func:`answers_ping` for a kernel of this server, off its event loop."""
    return await asyncio.to_thread(answers_ping, km.get_connection_info(), curve)


async def seen_by_the_kernel(jp_ws_fetch: Any, kernel_id: str, code: str = SEEN_BY_THE_KERNEL) -> list[str]:
    """Run ``code`` over a notebook's websocket; the words it printed."""
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        reply, iopub = await ws_execute(ws, code)
    finally:
        ws.close()
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream").split()


@pytest.mark.parametrize("policy", ["disabled"])
async def test_transport_encryption_disabled_no_curve_keys(jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any,
                                                           capfd: pytest.CaptureFixture[str], policy: str) -> None:
    """Upstream's default: no keys, and the kernel says so (which shows its stderr is read here)."""
    kernel_id = await start_kernel(jp_fetch)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    assert "curve_secretkey" not in km.get_connection_info()
    assert (await seen_by_the_kernel(jp_ws_fetch, kernel_id))[1] == "False"
    assert await pinged(km, curve=False)
    assert PLAINTEXT_WARNING in capfd.readouterr().err


@pytest.mark.parametrize("policy", ["auto", "required"])
async def test_transport_encryption_provisions_curve_keys(jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any,
                                                          capfd: pytest.CaptureFixture[str], policy: str) -> None:
    kernel_id = await start_kernel(jp_fetch)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    info = km.get_connection_info()
    assert info["curve_publickey"] and info["curve_secretkey"]
    written = Path(km.connection_file)
    assert json.loads(written.read_text())["curve_secretkey"] == info["curve_secretkey"]
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert (await seen_by_the_kernel(jp_ws_fetch, kernel_id))[1] == "True"
    assert await pinged(km, curve=True) and not await pinged(km, curve=False)
    assert PLAINTEXT_WARNING not in capfd.readouterr().err


async def test_a_resumed_kernel_is_encrypted_with_the_keys_the_manager_holds(
        jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, capfd: pytest.CaptureFixture[str]) -> None:
    kernel_id = await start_kernel(jp_fetch)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    keys = (km.curve_publickey, km.curve_secretkey)
    assert keys[1]
    await run(jp_serverapp, kernel_id, "kept = 'before the suspend'")
    pid, _ = await seen_by_the_kernel(jp_ws_fetch, kernel_id)

    assert (await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1"))["state"] == "suspended"
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["state"] == "running"

    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    assert (km.curve_publickey, km.curve_secretkey) == keys
    assert json.loads(Path(km.connection_file).read_text())["curve_secretkey"] == keys[1].decode()
    new_pid, encrypted = await seen_by_the_kernel(jp_ws_fetch, kernel_id)
    assert new_pid != pid and encrypted == "True"
    assert await seen_by_the_kernel(jp_ws_fetch, kernel_id, "print(kept)") == ["before", "the", "suspend"]
    assert await pinged(km, curve=True) and not await pinged(km, curve=False)
    assert PLAINTEXT_WARNING not in capfd.readouterr().err


def listed(server: Server) -> set[str]:
    """The kernels the server lists."""
    return {k["id"] for k in server.api("GET", "api/gpuckpt/kernels")}


def test_a_kernel_resumed_by_a_restarted_server_is_encrypted(tmp_path: Path) -> None:
    """The next server registers the suspended kernel again with keys of its own, and its run
    from the checkpoint listens encrypted with them."""
    folder = tmp_path / "data" / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("encryption restart test", gpus=0)))
    args = ("--MappingKernelManager.transport_encryption=auto", "--GPUCheckpointApp.ready_timeout=30")
    with running_server(tmp_path, *args) as server:
        kernel_id = server.start_kernel()
        server.run(kernel_id, "kept = 'before the restart'")
        assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")["state"] == "suspended"
    with running_server(tmp_path, *args) as server:
        deadline = time.monotonic() + 30
        while kernel_id not in listed(server):
            assert time.monotonic() < deadline, "the suspended kernel was not registered again"
            time.sleep(0.2)
        assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")["state"] == "running"
        info = json.loads((server.runtime_dir / f"kernel-{kernel_id}.json").read_text())
        assert info["curve_secretkey"]
        code = f"{SEEN_BY_THE_KERNEL}\nprint(kept)"
        assert server.run(kernel_id, code).split()[1:] == ["True", "before", "the", "restart"]
        assert answers_ping(info, curve=True) and not answers_ping(info, curve=False)
    assert PLAINTEXT_WARNING not in (tmp_path / "server.log").read_text()  # the kernels' stderr too


def test_doctor_says_whether_kernels_are_encrypted(jp_environ: Any, jp_data_dir: Path,
                                                   jp_server_config: Config) -> None:
    """With the test kernelspecs (local and Slurm ones) installed in the data dir."""
    off = check_encryption(Config())
    assert off.status == "WARN" and off.detail.startswith("off: local kernels' messages are not encrypted")
    assert f"the Slurm kernels of python3-gpuckpt-far, {SLURM}, " in off.detail
    auto = Config({"MappingKernelManager": {"transport_encryption": "auto"}})
    assert check_encryption(auto).line().startswith("OK    encryption   auto: every gpuckpt kernel's messages are")

    old = kernelspec_json("installed before the kernelspec declared CurveZMQ")
    del old["metadata"]["supported_encryption"]
    (jp_data_dir / "kernels" / "old-gpuckpt").mkdir()
    (jp_data_dir / "kernels" / "old-gpuckpt" / "kernel.json").write_text(json.dumps(old))
    warned = check_encryption(auto)
    assert warned.status == "WARN" and "kernelspec old-gpuckpt does not declare CurveZMQ support: its kernels run " \
                                       "unencrypted; install it again" in warned.detail
    failed = check_encryption(Config({"AsyncMappingKernelManager": {"transport_encryption": "required"}}))
    assert failed.status == "FAIL" and "its kernels cannot start" in failed.detail


@pytest.mark.slurm
@pytest.mark.parametrize("policy", ["required"])
async def test_a_slurm_kernel_is_encrypted_and_its_keys_never_travel_in_the_clear(
        jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, slurm: Any, policy: str) -> None:
    kernel_id = await start_kernel(jp_fetch, SLURM)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    secret = km.curve_secretkey.decode()
    # the kernel holds the manager's key, and it is neither in its environment nor on its command line
    probe = ("import hashlib, os\nfrom ipykernel.kernelapp import IPKernelApp\n"
             "secret = IPKernelApp.instance().curve_secretkey.decode()\n"
             "shown = [*os.environ.values(), open('/proc/self/cmdline').read()]\n"
             "print(hashlib.sha256(secret.encode()).hexdigest(), any(secret in text for text in shown))")
    digest = hashlib.sha256(secret.encode()).hexdigest()

    for step in ("started", "resumed"):
        assert await seen_by_the_kernel(jp_ws_fetch, kernel_id, probe) == [digest, "False"], step
        assert km.curve_secretkey.decode() == secret, step
        job_id = (await api(jp_fetch, "kernels", kernel_id))["job_id"]
        [folder] = Path(jp_serverapp.web_app.settings["gpuckpt_app"].store_root).glob(f"*/jobs/{kernel_id}")
        assert json.loads((folder / "connection.json").read_text())["curve_secretkey"] == secret
        assert stat.S_IMODE((folder / "connection.json").stat().st_mode) == 0o600
        assert secret not in (folder / "job.sh").read_text()
        job = await asyncio.to_thread(subprocess.run, ["scontrol", "show", "job", job_id], capture_output=True,
                                      text=True, check=True, timeout=60)
        assert secret not in job.stdout
        assert PLAINTEXT_WARNING not in (folder / f"slurm-{job_id}.out").read_text()
        assert await pinged(km, curve=True) and not await pinged(km, curve=False)
        if step == "started":
            await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
            assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["state"] == "running"
