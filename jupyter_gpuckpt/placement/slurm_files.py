"""A Slurm kernel's files, in its folder of the store (which every node sees), private to
the owner: the job script, the connection file, the kernel's exit note of each run, Slurm's output.

The connection file is written by the server with the session key, the CurveZMQ keypair
and ports 0; the kernel binds ports on its node and writes them back into it (ipykernel
does so for ports 0). Neither key (the session key, the CurveZMQ secret key) is ever on a command
line, in the job script or in the job's environment, and the messages between the server and the
kernel are encrypted (CurveZMQ), whatever the server's ``transport_encryption``: they cross the network.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuckpt_store.files import make_dir

PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def _write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


@dataclass
class JobFiles:
    """The files of one kernel's jobs in ``folder``."""

    folder: Path

    def prepare(self) -> None:
        self.folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        make_dir(self.folder, 0o700)
        os.chmod(self.folder, 0o700)

    @property
    def script(self) -> Path:
        return self.folder / "job.sh"

    @property
    def connection(self) -> Path:
        return self.folder / "connection.json"

    def exit_note(self, run: int) -> Path:
        return self.folder / f"exit-{run}.json"

    def output(self, job_id: str | None = None) -> Path:
        return self.folder / f"slurm-{job_id or '%j'}.out"

    def write_connection(self, info: dict[str, Any]) -> None:
        """The connection file the kernel starts from: ``info`` with every port 0."""
        fresh = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in info.items()}
        fresh.update({port: 0 for port in PORTS})
        _write_private(self.connection, json.dumps(fresh, indent=1))

    def reported(self) -> dict[str, Any] | None:
        """The connection info once the kernel has written the address and ports it bound,
        else None."""
        try:
            info = json.loads(self.connection.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict) or not all(info.get(port) for port in PORTS):
            return None
        info["key"] = str(info.get("key", "")).encode()  # as jupyter_client holds it
        return dict(info)

    def write_script(self, kernel_id: str, argv: list[str]) -> None:
        """The batch script: the kernel as a job step (steps get Slurm's preemption signal
        at the start of the grace time), listening on the address Slurm reaches its node at
        (``NodeAddr``), which it writes into the connection file before the kernel starts
        (ipykernel binds the file's address, whatever its ``--ip``)."""
        command = " ".join(shlex.quote(a) for a in argv)
        # an IP address: ZeroMQ binds no host names (NodeAddr is often one)
        set_ip = ('import json, socket, sys; path, addr = sys.argv[1:]; info = json.load(open(path)); '
                  'info["ip"] = socket.gethostbyname(addr or socket.gethostname()); '
                  'open(path, "w").write(json.dumps(info))')
        _write_private(self.script, "\n".join([
            "#!/bin/bash",
            f"# jupyter-gpuckpt kernel {kernel_id}: written by the Jupyter server (SlurmPlacement)",
            'addr=$(scontrol show node "$SLURMD_NODENAME" -o 2>/dev/null | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
            f'{shlex.quote(argv[0])} -c {shlex.quote(set_ip)} {shlex.quote(str(self.connection))} "$addr" || exit 1',
            f"exec srun --ntasks=1 --kill-on-bad-exit=1 {command}",
            "",
        ]), 0o700)

    def read_exit_note(self, run: int) -> dict[str, Any] | None:
        """What the kernel wrote as it was told to end (see ``kernel_hooks.preemption``)."""
        try:
            note = json.loads(self.exit_note(run).read_text())
        except (OSError, ValueError):
            return None
        return note if isinstance(note, dict) else None

    def write_exit_note(self, run: int, note: dict[str, Any]) -> None:
        """Say why run ``run`` ends, unless the kernel already has (its note is kept)."""
        if not self.exit_note(run).exists():
            _write_private(self.exit_note(run), json.dumps(note))

    def output_tail(self, job_id: str, lines: int = 5) -> str:
        try:
            text = self.output(job_id).read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())
