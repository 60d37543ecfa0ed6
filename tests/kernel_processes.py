"""Real ipykernel processes, started through jupyter_client, for the tests to drive."""

from __future__ import annotations

import ast
import getpass
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.manager import KernelManager

from gpuckpt_store import SigningKey


@dataclass
class Outcome:
    """What one execute request produced."""

    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    displays: list[str] = field(default_factory=list)

    @property
    def last_line(self) -> str:
        return self.stdout.strip().splitlines()[-1]


class Kernel:
    """One kernel process and a client on its channels."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(cwd))
        for attempt in range(3):
            self.client = self.manager.client()
            self.client.start_channels()
            try:
                self.client.wait_for_ready(timeout=60)
                break
            except RuntimeError:  # ipykernel 7 can crash while starting on a loaded machine
                self.client.stop_channels()
                if attempt == 2:
                    raise
                self.manager.restart_kernel(now=True)

    def run(self, code: str, timeout: float = 180) -> Outcome:
        outcome = Outcome()

        def on_output(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    outcome.stdout += content["text"]
                else:
                    outcome.stderr += content["text"]
            elif kind == "error":
                outcome.error = f"{content['ename']}: {content['evalue']}"
            elif kind in ("display_data", "update_display_data", "execute_result"):
                outcome.displays.append(content["data"].get("text/plain", ""))

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=on_output)
        if reply["content"]["status"] != "ok" and outcome.error is None:
            outcome.error = f"{reply['content'].get('ename')}: {reply['content'].get('evalue')}"
        return outcome

    def ok(self, code: str, timeout: float = 180) -> str:
        """Run ``code``, fail the test on any error, return its stdout."""
        outcome = self.run(code, timeout)
        assert outcome.error is None, f"{outcome.error}\n{outcome.stderr}"
        return outcome.stdout

    def value(self, expr: str) -> Any:
        """The value of a Python literal expression evaluated in the kernel."""
        return ast.literal_eval(self.ok(f"print(repr({expr}))").strip())

    def save(self, store: Path | None = None) -> str:
        """``%gpuckpt save``; returns the id the magic prints on its last line."""
        return self.ok(f"%gpuckpt save{f' --store {store}' if store else ''}").strip().splitlines()[-1]

    @property
    def pid(self) -> int:
        return int(self.manager.provisioner.process.pid)  # type: ignore[union-attr]

    def alive(self) -> bool:
        return bool(self.manager.is_alive())

    def shutdown(self) -> None:
        try:
            self.client.stop_channels()
        finally:
            self.manager.shutdown_kernel(now=True)


class KernelFactory:
    """Starts kernels sharing one Jupyter data dir (so one signing key and store)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "jupyter-data"
        self.store = self.data_dir / "gpuckpt" / "store"
        self.workdir = root / "work"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kernels: list[Kernel] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_GPUCKPT_")}
        env["JUPYTER_DATA_DIR"] = str(self.data_dir)
        env["PYTHONHASHSEED"] = "0"
        return env

    def start(self, load_hooks: bool = True, **extra_env: str) -> Kernel:
        kernel = Kernel({**self.env(), **extra_env}, self.workdir)
        self.kernels.append(kernel)
        if load_hooks:
            kernel.ok("%load_ext kernel_hooks")
        return kernel

    def manifest_path(self, checkpoint_id: str) -> Path:
        return self.store / getpass.getuser() / "checkpoints" / checkpoint_id / "manifest.json"

    def manifest(self, checkpoint_id: str) -> dict[str, Any]:
        return dict(json.loads(self.manifest_path(checkpoint_id).read_text()))

    def rewrite_manifest(self, checkpoint_id: str, manifest: dict[str, Any]) -> None:
        """Write ``manifest`` back, signed with this factory's key (a tampering owner)."""
        manifest["signature"] = SigningKey(self.data_dir / "gpuckpt" / "signing.key").sign(manifest)
        self.manifest_path(checkpoint_id).write_text(json.dumps(manifest))

    def close(self) -> None:
        for kernel in self.kernels:
            try:
                kernel.shutdown()
            except Exception:
                pass

    def restore_outcome(self, kernel: Kernel, checkpoint_id: str) -> Outcome:
        return kernel.run(f"%gpuckpt restore {checkpoint_id}")


def empty_queue(kernel: Kernel) -> None:
    """Drop stray iopub messages (used after a kernel was killed and restarted)."""
    while True:
        try:
            kernel.client.get_iopub_msg(timeout=0.1)
        except Empty:
            return
