"""The kernelspec that selects the provisioner and loads the hooks at kernel start."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ipykernel.kernelspec import get_kernel_dict
from jupyter_client.kernelspec import KernelSpecManager

PROVISIONER_NAME = "gpuckpt-provisioner"


def slurm_config(partition: str, gpus: int | None = None, constraint: str | None = None, time: str | None = None,
                 sbatch_args: list[str] | None = None) -> dict[str, Any]:
    """The provisioner config of a Slurm kernelspec (see ``SlurmPlacement``)."""
    if not partition:
        raise ValueError("a Slurm kernelspec needs a partition (--partition)")
    config: dict[str, Any] = {"placement": "slurm", "partition": partition}
    for key, value in (("gpus", gpus), ("constraint", constraint), ("time", time)):
        if value is not None:
            config[key] = value
    if sbatch_args:
        config["sbatch_args"] = list(sbatch_args)
    return config


def kernelspec_json(display_name: str, gpus: int | None = None, slurm: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """A kernelspec that loads the hooks at start and picks our provisioner; ``slurm``
    (from :func:`slurm_config`) makes its kernels Slurm jobs.

    Everything else is what ipykernel's own kernelspec says of this environment's ipykernel
    (its protocol version, the debugger, ``supported_encryption``), so that jupyter_server's
    ``transport_encryption`` gives its kernels CurveZMQ keys as it gives ipykernel's."""
    config: dict[str, Any] = {} if gpus is None else {"gpus": gpus}
    if slurm:
        config.update(slurm)
    spec = get_kernel_dict(["--ext=kernel_hooks"])
    provisioner = {"provisioner_name": PROVISIONER_NAME, "config": config}
    return {**spec, "display_name": display_name, "interrupt_mode": "signal",
            "metadata": {**spec.get("metadata", {}), "kernel_provisioner": provisioner}}


def install(name: str = "python3-gpuckpt", display_name: str = "Python 3 (GPU checkpoint)", *,
            user: bool = False, prefix: str | None = None, gpus: int | None = None,
            slurm: dict[str, Any] | None = None) -> str:
    """Write the kernelspec and return where it was installed."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = kernelspec_json(display_name, gpus, slurm)
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=1))
        return str(KernelSpecManager().install_kernel_spec(tmp, name, user=user, prefix=prefix, replace=True))
