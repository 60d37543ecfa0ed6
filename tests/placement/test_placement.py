"""The placement seam: the kernelspec's ``placement`` picks the implementation, and a Slurm
resume asks only for GPUs the checkpoint fits (the Slurm jobs themselves: test_slurm_kernels.py)."""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpec

from jupyter_gpuckpt.errors import PlacementError, Unplaceable
from jupyter_gpuckpt.placement import GPUCheckpointProvisioner, GPUNeeds
from jupyter_gpuckpt.placement.local import LocalPlacement
from jupyter_gpuckpt.placement.slurm import SlurmPlacement

GIB = 1 << 30
KINDS = [{"model": "NVIDIA A100-SXM4-40GB", "memory": 40 * GIB, "feature": "a100"},
         {"model": "NVIDIA H100 80GB HBM3", "memory": 80 * GIB, "feature": "h100"},
         {"model": "NVIDIA H200", "memory": 141 * GIB, "feature": "h200"}]


def provisioner(**config: Any) -> Any:
    spec = KernelSpec(argv=["python"], display_name="test", language="python")
    return GPUCheckpointProvisioner(kernel_id="k", kernel_spec=spec, parent=None, **config)


def needs(gib_on_one_gpu: float, model: str = "NVIDIA H100 80GB HBM3") -> GPUNeeds:
    manifest = {"environment": {"gpus": [{"device": "cuda:0", "name": model}]},
                "devices": {"cuda:0": int(gib_on_one_gpu * GIB)}}
    return GPUNeeds.of_manifest(manifest)


def flags(placement: SlurmPlacement, wanted: GPUNeeds) -> dict[str, str]:
    return dict(a.split("=", 1) for a in placement._sbatch_args(wanted) if "=" in a)


def test_the_kernelspecs_placement_picks_the_implementation() -> None:
    assert type(provisioner()) is LocalPlacement
    slurm = provisioner(placement="slurm", partition="gpu", gpus=2)
    assert type(slurm) is SlurmPlacement and (slurm.partition, slurm.gpus) == ("gpu", 2)
    with pytest.raises(PlacementError, match="unknown placement 'kubernetes'.*known: local, slurm"):
        provisioner(placement="kubernetes")


def test_a_resume_asks_for_the_gpu_kinds_with_enough_memory() -> None:
    slurm = provisioner(placement="slurm", partition="gpu", gpu_kinds=KINDS, constraint="ib")
    assert flags(slurm, needs(60))["--constraint"] == "ib&(h100|h200)"
    assert flags(slurm, needs(20))["--constraint"] == "ib&(a100|h100|h200)"
    assert flags(slurm, GPUNeeds())["--constraint"] == "ib"  # no GPU tensors: any GPU
    assert flags(slurm, needs(60))["--gres"] == "gpu:1"


def test_a_resume_can_be_held_to_the_gpu_model_of_the_checkpoint() -> None:
    slurm = provisioner(placement="slurm", gpu_kinds=KINDS, same_gpu_model=True)
    assert flags(slurm, needs(10, "NVIDIA H100 80GB HBM3"))["--constraint"] == "h100"


def test_a_gres_type_is_asked_for_when_one_kind_fits() -> None:
    slurm = provisioner(placement="slurm", gpus=2, gpu_kinds=[{"model": "NVIDIA H200", "memory": 141 * GIB,
                                                               "gres": "h200"}])
    assert flags(slurm, needs(100))["--gres"] == "gpu:h200:2"


def test_a_checkpoint_no_gpu_kind_fits_is_refused_with_the_reason() -> None:
    slurm = provisioner(placement="slurm", gpu_kinds=KINDS)
    with pytest.raises(Unplaceable, match=r"holds 150\.0 GiB on one GPU; known kinds: NVIDIA A100"):
        slurm._sbatch_args(needs(150))
