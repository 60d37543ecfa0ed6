"""``jupyter gpuckpt`` against a real jupyter_server in its own process, with real kernels.

One server (and its kernels) serves the module; each command runs as ``jupyter gpuckpt ...``
in a subprocess whose Jupyter dirs are the server's, so it finds the server the way
``jupyter server list`` does. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import JUPYTER, KERNEL_NAME, TOKEN, Server, jupyter_env, running_server

from jupyter_gpuckpt.cli.client import CLIError, _pick


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def _failed(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed to stderr."""
    assert result.returncode == 1, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _listed(server: Server, kernel_id: str) -> list[str]:
    """The kernel's row of ``list``: id, notebook, kernelspec, state, ... (no cell holds a space)."""
    rows = [line.split() for line in _ok(server.cli("list")).splitlines()]
    assert rows[0][:4] == ["KERNEL", "ID", "NOTEBOOK", "KERNELSPEC"]
    return next(row for row in rows[1:] if row[0] == kernel_id)


def _state(server: Server, kernel_id: str) -> str:
    return _listed(server, kernel_id)[3]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("cli")
    listed = subprocess.run([JUPYTER, "server", "extension", "list"], env=jupyter_env(base), capture_output=True,
                            text=True, timeout=60)
    assert "jupyter_gpuckpt \x1b[32menabled" in listed.stdout + listed.stderr
    with running_server(base) as found:
        assert found.api("GET", "api/gpuckpt/policy")["idle_timeout"] == 0  # the extension answers
        yield found


@pytest.fixture(scope="module")
def kernelspec(server: Server) -> Path:
    """The kernelspec, installed by the CLI into the server's user data dir."""
    out = _ok(server.cli("install-kernelspec", "--user", "--gpus", "0"))
    where = server.data_dir / "kernels" / KERNEL_NAME
    assert str(where) in out
    return where


def test_install_kernelspec_selects_the_provisioner(server: Server, kernelspec: Path) -> None:
    spec = json.loads((kernelspec / "kernel.json").read_text())
    assert spec["metadata"]["kernel_provisioner"] == {"provisioner_name": "gpuckpt-provisioner",
                                                      "config": {"gpus": 0}}
    assert KERNEL_NAME in server.api("GET", "api/kernelspecs")["kernelspecs"]
    usage = server.cli("install-kernelspec", "--user", "--sys-prefix")
    assert usage.returncode == 2 and "not allowed with argument" in usage.stderr


def test_install_kernelspec_for_slurm_writes_the_job_settings(server: Server) -> None:
    out = _ok(server.cli("install-kernelspec", "--user", "--name", "on-slurm", "--slurm", "--partition", "gpu",
                         "--gpus", "2", "--constraint", "h100|h200", "--time", "8:00:00",
                         "--sbatch-arg=--account=ml", "--sbatch-arg=--qos=interactive"))
    assert "on-slurm" in out
    spec = json.loads((server.data_dir / "kernels" / "on-slurm" / "kernel.json").read_text())
    assert spec["metadata"]["kernel_provisioner"]["config"] == {
        "placement": "slurm", "partition": "gpu", "gpus": 2, "constraint": "h100|h200", "time": "8:00:00",
        "sbatch_args": ["--account=ml", "--qos=interactive"]}
    refused = server.cli("install-kernelspec", "--user", "--name", "no-partition", "--slurm")
    assert refused.returncode == 1 and "a Slurm kernelspec needs a partition (--partition)" in refused.stderr
    assert not (server.data_dir / "kernels" / "no-partition").exists()
    shutil.rmtree(server.data_dir / "kernels" / "on-slurm")  # the module's server (and doctor) go on without it


def test_checkpoint_suspend_resume_round_trip(server: Server, kernelspec: Path) -> None:
    kernel_id = server.start_kernel()
    server.run(kernel_id, "answer = 42")
    assert _state(server, kernel_id) == "running"

    out = _ok(server.cli("checkpoint", kernel_id))
    assert out.startswith(f"Checkpointed {kernel_id} in ")
    checkpoints = _ok(server.cli("checkpoints", kernel_id)).splitlines()
    assert checkpoints[0] == f"Kernel {kernel_id}, no notebook"  # started without a session
    assert checkpoints[1].split()[:2] == ["ID", "CREATED"] and len(checkpoints) == 3
    assert json.loads(_ok(server.cli("checkpoints", kernel_id, "--json")))[0]["variables"] == 1

    out = _ok(server.cli("suspend", kernel_id[:8]))  # a unique prefix is enough
    assert out.startswith(f"Suspended {kernel_id} in ") and "its GPUs are free" in out
    assert _state(server, kernel_id) == "suspended"
    assert "ago," in _ok(server.cli("list"))  # the last checkpoint's age and size

    assert _ok(server.cli("suspend", kernel_id)) == f"Kernel {kernel_id} is already suspended; nothing to suspend.\n"

    out = _ok(server.cli("resume", kernel_id))
    assert out.startswith(f"Resumed {kernel_id} in ")
    assert "Restored 1 variable " in out  # the restore report
    assert _state(server, kernel_id) == "running"
    assert server.run(kernel_id, "print(answer)").strip() == "42"
    assert _ok(server.cli("resume", kernel_id)) == f"Kernel {kernel_id} is already running; nothing to resume.\n"

    out = _ok(server.cli("suspend", kernel_id, "--mode", "park"))  # no CUDA driver here: suspended, and why
    assert out.startswith(f"Suspended {kernel_id} in ") and "The kernel could not be parked (" in out
    assert _state(server, kernel_id) == "suspended"


def test_kernels_are_listed_with_the_notebooks_that_use_them(server: Server, kernelspec: Path) -> None:
    session = server.api("POST", "api/sessions", {"path": "work/analysis.ipynb", "name": "analysis.ipynb",
                                                  "type": "notebook", "kernel": {"name": KERNEL_NAME}})
    kernel_id = str(session["kernel"]["id"])
    bare = server.start_kernel()  # no session: no notebook to name
    assert _listed(server, kernel_id)[1:3] == ["work/analysis.ipynb", KERNEL_NAME]
    assert _listed(server, bare)[1:3] == ["-", KERNEL_NAME]
    shown = _ok(server.cli("checkpoints", kernel_id[:8])).splitlines()
    assert shown == [f"Kernel {kernel_id}, notebook work/analysis.ipynb", "No checkpoints."]


def test_rebuild_reruns_what_a_resume_could_not_restore(server: Server, kernelspec: Path) -> None:
    kernel_id = server.start_kernel()
    server.run(kernel_id, "rows = (i * i for i in range(5))")  # a generator cannot be saved
    _ok(server.cli("suspend", kernel_id))
    out = _ok(server.cli("resume", kernel_id))
    assert "rows (generator)" in out and f"`jupyter gpuckpt rebuild {kernel_id[:8]}` re-runs them." in out
    assert _ok(server.cli("rebuild", kernel_id)).startswith(f"{kernel_id}: Re-ran cell")
    assert server.run(kernel_id, "print(next(rows))").strip() == "0"


def test_errors_are_one_line_with_the_servers_reason(server: Server, kernelspec: Path) -> None:
    assert _failed(server.cli("suspend", "not-a-kernel")) == (
        "jupyter gpuckpt suspend: 'not-a-kernel' is not a kernel id (HTTP 400)")
    unknown = "00000000-0000-0000-0000-000000000000"
    assert _failed(server.cli("suspend", unknown)).endswith(f"{unknown} (HTTP 404)")  # the server's words
    plain = server.start_kernel("python3")
    assert "not started with a gpuckpt kernelspec" in _failed(server.cli("suspend", plain))
    wrong_token = server.cli("list", "--url", server.url, "--token", "wrong", discover=True)
    assert "HTTP 403" in _failed(wrong_token) and "--token" in wrong_token.stderr
    closed = f"http://127.0.0.1:{_closed_port()}"
    assert _failed(server.cli("list", "--url", closed, discover=True)) == (
        f"jupyter gpuckpt list: cannot reach the Jupyter server at {closed}/: Connection refused")


def test_the_server_is_found_like_jupyter_server_list_finds_it(server: Server, kernelspec: Path) -> None:
    assert _ok(server.cli("list", discover=True)).startswith("KERNEL ID")
    other_token = {**server.env, "JUPYTER_TOKEN": "another-servers-token"}  # the found server's own wins
    assert _ok(server.cli("list", discover=True, env=other_token)).startswith("KERNEL ID")
    from_env = {**server.env, "JUPYTER_GPUCKPT_URL": server.url, "JUPYTER_TOKEN": TOKEN,
                "JUPYTER_RUNTIME_DIR": str(server.root)}  # nothing to discover there
    assert _ok(server.cli("list", "--json", discover=True, env=from_env)).startswith("[")
    alone = {**server.env, "JUPYTER_RUNTIME_DIR": str(server.root)}
    assert _failed(server.cli("list", discover=True, env=alone)).endswith("no running Jupyter server found "
                                                                          "(start one, or pass --url and --token)")


def test_several_servers_are_told_apart_by_root_dir(tmp_path: Path) -> None:
    outer = {"url": "http://a/", "root_dir": str(tmp_path)}
    inner = {"url": "http://b/", "root_dir": str(tmp_path / "project")}
    (tmp_path / "project" / "notebooks").mkdir(parents=True)
    assert _pick([outer, inner], tmp_path / "project" / "notebooks") is inner
    assert _pick([outer, inner], tmp_path) is outer
    with pytest.raises(CLIError, match="2 Jupyter servers are running .*--url"):
        _pick([outer, inner], Path("/"))


def test_doctor_reports_each_part(server: Server, kernelspec: Path) -> None:
    lines = _ok(server.cli("doctor")).splitlines()
    topics = {line.split()[1]: line.split()[0] for line in lines}
    assert topics["NVML"] in ("OK", "WARN")  # no GPU driver on CI machines is a warning
    assert {topics[t] for t in ("provisioner", "kernelspec", "extension", "server", "store", "signing")} == {"OK"}
    assert any(line.startswith("OK    kernelspec   python3-gpuckpt in ") for line in lines)
    assert any(line.startswith(f"OK    server       {server.url} runs the extension") for line in lines)
    assert any(f"{server.data_dir}/gpuckpt/signing.key (mode 0600)" in line for line in lines)
    assert topics["host"] == "OK" and any(f"suspends stage in {server.root.parent / 'staging'}" in line
                                          for line in lines)  # the server's own staging_root
    park = next(line for line in lines if line.split()[1] == "park")
    assert park.startswith("OK    park") or "kernels are suspended, not parked: " in park  # and why


def test_progress_is_shown_on_a_terminal(server: Server, kernelspec: Path) -> None:
    kernel_id = server.start_kernel()
    server.run(kernel_id, "numbers = list(range(1000))")
    controller, terminal = pty.openpty()
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's last holder closed it
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        result = server.cli("suspend", kernel_id, stderr=terminal)
    finally:
        os.close(terminal)
        reader.join(timeout=10)
        os.close(controller)
    assert result.returncode == 0 and result.stdout.startswith(f"Suspended {kernel_id} in ")
    assert f"\rsuspend {kernel_id[:8]}  ".encode() in shown  # the status line, redrawn in place
    assert shown.endswith(b"\r\x1b[K")  # and wiped before the result is printed

    out = _ok(server.cli("resume", kernel_id, "--no-wait"))
    assert out.startswith(f"resume of {kernel_id} started")
    deadline = time.monotonic() + 60
    while server.api("GET", f"api/gpuckpt/kernels/{kernel_id}")["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.3)


def _gpuckpt(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter gpuckpt ARGS`` with Jupyter dirs under ``base`` and no server to find."""
    return subprocess.run([JUPYTER, "gpuckpt", *args], env=jupyter_env(base), cwd=base, capture_output=True,
                          text=True, timeout=120)


def test_help_lists_the_subcommands_and_their_options(tmp_path: Path) -> None:
    commands = ("list", "checkpoint", "suspend", "resume", "rebuild", "checkpoints", "install-kernelspec", "doctor",
                "replay")
    listed = _ok(_gpuckpt(tmp_path, "--help"))
    assert all(f"\n{command}\n" in listed for command in commands), listed
    bare = _gpuckpt(tmp_path)  # no command: the list, and exit 1 as `jupyter kernelspec` does
    assert bare.returncode == 1 and all(f"\n{command}\n" in bare.stdout for command in commands)
    suspend = _ok(_gpuckpt(tmp_path, "suspend", "--help"))
    assert suspend.startswith("Usage: jupyter gpuckpt suspend KERNEL_ID [options]")
    for option in ("--mode=<OptionEnum>", "--no-wait", "--url=<Unicode>", "--token=<Unicode>", "--config=<Unicode>",
                   "[--SuspendKernel.mode]"):
        assert option in suspend, option
    assert "Default: the found server's own (from its info file; $JUPYTER_TOKEN may be another server's)" in " ".join(
        suspend.split())  # why $JUPYTER_TOKEN does not win over a found server's token
    assert "--sbatch-arg=<list-item-1>..." in _ok(_gpuckpt(tmp_path, "install-kernelspec", "--help"))


def test_argument_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, message in ((("list", "--jsno"), "jupyter gpuckpt list: unrecognized option --jsno"),
                          (("list", "--jsno=1"), "jupyter gpuckpt list: unrecognized option --jsno"),
                          (("bogus",), "jupyter gpuckpt: unknown command 'bogus'; one of: list, checkpoint, "),
                          (("suspend",), "jupyter gpuckpt suspend: the following arguments are required: KERNEL_ID"),
                          (("resume", "a", "b"), "jupyter gpuckpt resume: unrecognized arguments: b"),
                          (("suspend", "a", "--mode=stop"),
                           "jupyter gpuckpt suspend: --mode: 'stop' is not one of park, suspend (see `jupyter "
                           "gpuckpt suspend --help`)"),
                          (("replay", "--config", str(tmp_path / "none.py")),
                           f"jupyter gpuckpt replay: --config: {tmp_path / 'none.py'} is not a file")):
        result = _gpuckpt(tmp_path, *args)
        assert result.returncode == 2 and result.stderr.startswith(message), (args, result.stderr)
        assert len(result.stderr.splitlines()) == 1 and not result.stdout, (args, result.stderr)


def test_replay_keeps_the_config_it_was_given(tmp_path: Path) -> None:
    config = tmp_path / "policy.py"
    config.write_text("c.GPUCheckpointApp.idle_timeout = 600\nc.GPUCheckpointApp.rhythm = True\n")
    shown = json.loads(_ok(_gpuckpt(tmp_path, "replay", f"--config={config}", "--show-config-json")))
    assert shown["GPUCheckpointApp"] == {"idle_timeout": 600, "rhythm": True}


def test_doctor_checks_the_store_the_jupyter_config_names(server: Server, tmp_path: Path) -> None:
    """The config's store wins over the found server's (which still answers)."""
    (tmp_path / "config").mkdir()
    env = {**server.env, "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    in_config_dir = tmp_path / "from-config-dir"
    (tmp_path / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"GPUCheckpointApp": {"store_root": str(in_config_dir)}}))
    named = tmp_path / "named"
    (named.with_suffix(".py")).write_text(f"c.GPUCheckpointApp.store_root = {str(named)!r}\n")

    def store_line(*args: str) -> str:
        lines = server.cli("doctor", *args, env=env).stdout.splitlines()
        assert any(line.startswith(f"OK    server       {server.url} runs the extension") for line in lines)
        return next(line for line in lines if line.split()[1] == "store")

    assert store_line().startswith(f"OK    store        {in_config_dir} (the first checkpoint creates it): ")
    assert store_line(f"--config={named}.py").startswith(f"OK    store        {named} (the first")
    elsewhere = tmp_path / "on-the-command-line"
    assert store_line(f"--GPUCheckpointApp.store_root={elsewhere}").startswith(f"OK    store        {elsewhere} (")
