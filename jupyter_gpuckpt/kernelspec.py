"""The kernelspec that selects the provisioner and loads the hooks at kernel start."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager

PROVISIONER_NAME = "gpuckpt-provisioner"


def kernelspec_json(display_name: str, gpus: int | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {} if gpus is None else {"gpus": gpus}
    return {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--ext=kernel_hooks"],
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"kernel_provisioner": {"provisioner_name": PROVISIONER_NAME, "config": config},
                     "debugger": True},
    }


def install(name: str = "python3-gpuckpt", display_name: str = "Python 3 (GPU checkpoint)", *,
            user: bool = False, prefix: str | None = None, gpus: int | None = None) -> str:
    """Write the kernelspec and return where it was installed."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(kernelspec_json(display_name, gpus), indent=1))
        return str(KernelSpecManager().install_kernel_spec(tmp, name, user=user, prefix=prefix, replace=True))
