"""A real ``jupyter server`` in its own process, with its own Jupyter dirs, for tests
that need a server they can stop and start again (the CLI, server restarts)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.blocking import BlockingKernelClient

TOKEN = "gpuckpt-live-test-token"
KERNEL_NAME = "python3-gpuckpt"
JUPYTER = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"


@dataclass
class Server:
    url: str
    env: dict[str, str]
    root: Path
    data_dir: Path
    runtime_dir: Path

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {TOKEN}"},
            data=None if body is None and method == "GET" else json.dumps(body or {}).encode())
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def cli(self, *args: str, discover: bool = False, env: dict[str, str] | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """``jupyter gpuckpt ARGS``, with --url and --token unless ``discover``."""
        explicit = [] if discover or args[0] in ("install-kernelspec", "doctor") else ["--url", self.url, "--token", TOKEN]
        return subprocess.run([JUPYTER, "gpuckpt", *args, *explicit], env=env or self.env, cwd=self.root,
                              stdout=subprocess.PIPE, stderr=kwargs.pop("stderr", subprocess.PIPE), text=True,
                              timeout=180, **kwargs)

    def start_kernel(self, name: str = KERNEL_NAME) -> str:
        return str(self.api("POST", "api/kernels", {"name": name})["id"])

    def run(self, kernel_id: str, code: str) -> str:
        """Run ``code`` in the kernel through its connection file; its stdout."""
        client = BlockingKernelClient(connection_file=str(self.runtime_dir / f"kernel-{kernel_id}.json"))
        client.load_connection_file()
        client.start_channels()
        out: list[str] = []
        try:
            for attempt in range(3):
                try:
                    client.wait_for_ready(timeout=60)
                    break
                except RuntimeError:  # ipykernel 7 can crash while starting; the server restarts it
                    if attempt == 2:
                        raise
                    time.sleep(3)
            client.execute_interactive(code, timeout=60, output_hook=lambda msg: out.append(
                msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None)
        finally:
            client.stop_channels()
        return "".join(out)


def jupyter_env(base: Path) -> dict[str, str]:
    """An environment whose Jupyter dirs all live under ``base`` (created if missing)."""
    dirs = {name: base / name for name in ("data", "runtime", "config", "ipython", "root")}
    for path in dirs.values():
        path.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update(JUPYTER_DATA_DIR=str(dirs["data"]), JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
               JUPYTER_CONFIG_DIR=str(dirs["config"]), IPYTHONDIR=str(dirs["ipython"]), JUPYTER_PLATFORM_DIRS="1")
    return env


@contextmanager
def running_server(base: Path, *args: str, app: str = "jupyter_server") -> Iterator[Server]:
    """Start ``jupyter server`` with dirs under ``base``; stop it (politely) on exit.

    ``app`` is the module run with ``python -m``: ``"jupyterlab"`` starts ``jupyter lab``. No
    policy pass runs during a test unless ``args`` set ``--GPUCheckpointApp.policy_interval``;
    staged state goes under ``base`` unless they set ``--GPUCheckpointApp.staging_root``.
    """
    env = jupyter_env(base)
    quiet = [] if any(a.startswith("--GPUCheckpointApp.policy_interval=") for a in args) else [
        "--GPUCheckpointApp.policy_interval=3600"]
    # a setting given twice on the command line fails the extension's whole config
    staging = [] if any(a.startswith("--GPUCheckpointApp.staging_root=") for a in args) else [
        f"--GPUCheckpointApp.staging_root={base / 'staging'}"]
    log = (base / "server.log").open("a")
    url: str | None = None
    process = subprocess.Popen(
        [sys.executable, "-m", app, "--allow-root", "--no-browser", "--ip=127.0.0.1", "--port=0",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={base / 'root'}",
         *quiet, *staging, *args],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        info_file = base / "runtime" / f"jpserver-{process.pid}.json"
        deadline = time.monotonic() + 60
        while not info_file.exists():
            assert process.poll() is None, (base / "server.log").read_text()
            assert time.monotonic() < deadline, "the server wrote no info file"
            time.sleep(0.1)
        time.sleep(0.2)  # written in one go, but let it land
        url = json.loads(info_file.read_text())["url"]
        yield Server(url, env, base / "root", base / "data", base / "runtime")
    finally:
        try:
            shutdown = urllib.request.Request(f"{url}api/shutdown", method="POST", data=b"",
                                              headers={"Authorization": f"token {TOKEN}"})
            with urllib.request.urlopen(shutdown, timeout=10):
                pass
            process.wait(timeout=30)
        except Exception:  # a server that will not stop politely is ended
            process.kill()
            process.wait()
        log.close()
