from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_processes import Kernel, KernelFactory
from server_fixtures import FAST_KERNEL_NAME, KERNEL_NAME, SLURM_KERNELSPECS
from traitlets.config import Config

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json


@pytest.fixture
def kernels(tmp_path: Path) -> Iterator[KernelFactory]:
    """Start real kernels that share a Jupyter data dir (one signing key, one store)."""
    factory = KernelFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def kernel(kernels: KernelFactory) -> Kernel:
    """One kernel with ``%load_ext kernel_hooks`` done."""
    return kernels.start()


@pytest.fixture
def gpuckpt_config() -> dict[str, Any]:
    """Extension settings for one test; override to change the policy."""
    return {"policy_interval": 3600.0}


@pytest.fixture
def jp_server_config(jp_data_dir: Path, gpuckpt_config: dict[str, Any], tmp_path: Path) -> Config:
    for name, override in ((KERNEL_NAME, None), (FAST_KERNEL_NAME, {"idle_timeout": 1.0})):
        spec = kernelspec_json(f"GPU checkpoint test ({name})")
        if override:
            spec["metadata"]["gpuckpt"] = override
        folder = jp_data_dir / "kernels" / name
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text(json.dumps(spec))
    for name, slurm in SLURM_KERNELSPECS.items():
        folder = jp_data_dir / "kernels" / name
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text(json.dumps(kernelspec_json(f"Slurm test ({name})", slurm=slurm)))
    return Config({
        "ServerApp": {"jpserver_extensions": {"jupyter_gpuckpt": True}},
        # each test stages in its own folder, not in the user's /dev/shm one
        "GPUCheckpointApp": {"staging_root": str(tmp_path / "staging"), **gpuckpt_config},
    })
