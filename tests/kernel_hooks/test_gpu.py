"""CUDA save and restore on a real GPU (``pytest -m gpu`` on a lent GPU machine).

The same code paths run on CPU machines through tests/kernel_hooks/test_roundtrip.py (torch CPU
tensors), tests/placement/test_devices.py (the staging ring and the placement check) and
tests/kernel_hooks/test_device_paths.py (the default device, a failing copy, which GPUs are asked).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUDA_STATE = """
import torch
torch.manual_seed(3)
big = torch.randn(64 * 1024 * 1024, device="cuda")            # 256 MiB: many staged chunks
half_view = big[1000:2000]
grid = big[: 1 << 20].view(1024, 1024).t()
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 512, device="cuda")
for _ in range(2):
    opt.zero_grad(); model(x).pow(2).mean().backward(); opt.step()
checksum = (round(big.sum().item(), 1), [round(p.sum().item(), 4) for p in model.parameters()])
"""


def test_cuda_tensors_model_and_optimizer_round_trip(kernels):
    saver = kernels.start()
    saver.ok(CUDA_STATE)
    checkpoint = saver.save()
    expected = saver.value("(checksum, torch.rand(2, device='cuda').tolist())")

    manifest = kernels.manifest(checkpoint)
    assert manifest["devices"]["cuda:0"] >= 256 << 20
    assert manifest["environment"]["gpus"][0]["device"] == "cuda:0"
    assert any(b["device"] == "cuda:0" and len(b["hashes"]) > 1 for b in manifest["buffers"])

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("((round(big.sum().item(), 1), [round(p.sum().item(), 4) for p in model.parameters()]),"
                       " torch.rand(2, device='cuda').tolist())") == (expected[0], expected[1])
    assert fresh.value("(str(big.device), str(model[0].weight.device), str(opt.state[model[0].weight]['exp_avg'].device))") == (
        "cuda:0", "cuda:0", "cuda:0")
    assert fresh.value("(half_view.untyped_storage().data_ptr() == big.untyped_storage().data_ptr(), grid.stride())") == (
        True, (1, 1024))
    assert fresh.value("opt.param_groups[0]['params'][0] is model[0].weight") is True
    assert fresh.value("(model[0].weight.grad is not None, str(model[0].weight.grad.device))") == (True, "cuda:0")


DEFAULT_CUDA = """
import torch
torch.set_default_device("cuda")
torch.manual_seed(4)
weights = torch.randn(1 << 20)   # 4 MiB on the GPU: staged through the pinned ring
bias = torch.randn(8)            # inside the pickle
"""
USE = "(str(weights.device), round(weights.sum().item(), 3), (weights[:8] + bias).tolist())"


def test_a_cuda_default_device_saves_and_restores_every_cuda_tensor(kernels):
    """With ``torch.set_default_device("cuda")`` the pinned ring was made on the GPU, which torch
    refuses to pin: every CUDA tensor of 64 KiB or more was then left out of a save that succeeded."""
    saver = kernels.start()
    saver.ok(DEFAULT_CUDA)
    checkpoint = saver.save()
    statuses = {v["name"]: v["status"] for v in kernels.manifest(checkpoint)["variables"]}
    assert (statuses["weights"], statuses["bias"]) == ("saved", "saved")
    expected = saver.value(USE)
    fresh = kernels.start()
    fresh.ok("import torch\ntorch.set_default_device('cuda')")  # the restore's ring, under the same default
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value(USE) == expected and expected[0] == "cuda:0"


SIDE_STREAM = """
import torch
x = torch.zeros(64 << 20, device="cuda")   # 256 MiB: staged
s = torch.zeros(1000, device="cuda")       # 4 kB: copied into the pickle
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    torch.cuda._sleep(4_000_000_000)       # about 2 s of GPU clock: the save starts meanwhile
    x.fill_(1.0)
    s.fill_(2.0)
del side
%gpuckpt save
"""


def test_a_tensor_written_on_a_side_stream_is_saved_with_its_final_values(kernels):
    """torch's streams do not wait for the default one, and a copy waits for the current stream
    only: the save synchronizes the GPUs it copies from first."""
    saver = kernels.start()
    checkpoint = saver.ok(SIDE_STREAM).strip().splitlines()[-1]
    assert saver.value("(x.min().item(), s.min().item())") == (1.0, 2.0)
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("(x.min().item(), x.max().item(), s.min().item(), s.max().item())") == (1.0, 1.0, 2.0, 2.0)


def test_memory_torch_holds_cached_counts_as_free_for_the_restore(kernels):
    """torch's caching allocator keeps freed memory reserved, and hands it out before asking the
    driver: the restore-time check counts it as free (it counted it as used, and refused)."""
    saver = kernels.start()
    saver.ok("import torch\nt = torch.ones(1 << 20, device='cuda')")
    checkpoint = saver.save()
    fresh = kernels.start()
    fresh.ok("import torch\nheld = torch.empty(int(torch.cuda.mem_get_info()[0] * 0.6), dtype=torch.uint8, "
             "device='cuda')\ndel held")
    free, cached = fresh.value("(torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved() - "
                               "torch.cuda.memory_allocated())")
    assert cached > 1 << 30
    manifest = kernels.manifest(checkpoint)
    manifest["devices"] = {"cuda:0": free + cached // 2}  # more than the driver has free, less than torch can give
    kernels.rewrite_manifest(checkpoint, manifest)
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("(float(t.sum()), str(t.device))") == (float(1 << 20), "cuda:0")


def test_restore_refused_when_the_gpu_has_too_little_free_memory(kernels):
    saver = kernels.start()
    saver.ok("import torch\nt = torch.ones(1 << 20, device='cuda')")
    checkpoint = saver.save()
    manifest = kernels.manifest(checkpoint)
    manifest["devices"] = {"cuda:0": 1 << 50}
    kernels.rewrite_manifest(checkpoint, manifest)
    fresh = kernels.start()
    outcome = fresh.run(f"%gpuckpt restore {checkpoint}")
    assert outcome.error is not None and "GiB on cuda:0; only" in outcome.error
    assert fresh.value("'t' in dir()") is False


def test_cupy_arrays_round_trip(kernels):
    pytest.importorskip("cupy")
    saver = kernels.start()
    saver.ok("import cupy as cp\nca = cp.arange(4_000_000, dtype=cp.float32)\ncv = ca[::2]")
    checkpoint = saver.save()
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("(type(ca).__name__, float(ca[123457]), float(cv[10]), ca.device.id)") == (
        "ndarray", 123457.0, 20.0, 0)


async def test_server_assigns_a_real_gpu_by_uuid_and_frees_it_on_suspend(jp_fetch, jp_serverapp):
    from server_fixtures import api, run, start_kernel

    from jupyter_gpuckpt.placement.gpus import read_nvml

    gpus = read_nvml()
    assert gpus, "NVML sees no GPU on a machine where torch does"
    kernel_id = await start_kernel(jp_fetch)
    out = await run(jp_serverapp, kernel_id, "import os, torch; x = torch.ones(1 << 20, device='cuda')\n"
                                             "print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.device_count())")
    uuid, count = out.split()
    assert uuid in {g.uuid for g in gpus} and count == "1"
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert model["gpus"] == []
    assert all(g["kernel_id"] is None for g in (await api(jp_fetch, "gpus"))["gpus"])
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert [g["uuid"] for g in model["gpus"]] and "cuda" in await run(jp_serverapp, kernel_id, "print(x.device)")
