"""The GPU paths' logic, where it runs without a GPU: host tensors that stay on the CPU whatever
the default device, a device copy that fails the save instead of leaving a variable out, and
which library (and which GPUs) the restore-time check asks.

The same paths on a real GPU: tests/kernel_hooks/test_gpu.py (``pytest -m gpu``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

from kernel_hooks.blobs import BlobStore, BlobWriter, ParallelIO
from kernel_hooks.blobs.buffers import BufferSink, Staging, StagingSlot
from kernel_hooks.codecs.arrays import OutOfBand, staged_slot
from kernel_hooks.errors import IncompatibleError
from kernel_hooks.state.devices import FreeMemory, check, library_for

GIB = 1 << 30

META_DEFAULT = """
import torch
torch.set_default_device("meta")
big = torch.arange(100_000, dtype=torch.float32, device="cpu")    # out of band
small = torch.tensor([1.5, 2.5], device="cpu")                      # inside the pickle
empty = torch.empty(0, device="cpu")
"""


def test_host_tensors_stay_on_the_cpu_whatever_the_default_device(kernels):
    """``torch.set_default_device`` (meta here, cuda in a GPU notebook) must not move the host
    memory a save or restore makes: the restoring kernel has set it before the restore."""
    saver = kernels.start()
    saver.ok(META_DEFAULT)
    checkpoint = saver.save()
    fresh = kernels.start()
    fresh.ok("import torch\ntorch.set_default_device('meta')")
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("(str(big.device), str(small.device), str(empty.device), str(torch.get_default_device()))") == (
        "cpu", "cpu", "cpu", "meta")
    # used after the restore: arithmetic on each, on the CPU
    assert fresh.value("(float((big * 2)[99_999]), (small + 1).tolist(), torch.cat([empty, small], ).tolist())") == (
        199_998.0, [2.5, 3.5], [1.5, 2.5])


def test_a_staging_ring_that_cannot_be_made_fails_the_store_not_the_trial_pass(tmp_path: Path):
    """The trial pass (no sink) that finds the variables that cannot be pickled makes no ring;
    the pass that stores makes it, and its failure reaches the save. Before, the ring was made in
    both, so a ring torch refused to pin made every CUDA tensor a variable that cannot be
    pickled, left out of a save that succeeded."""
    made = []

    def refused() -> Staging:
        made.append(1)
        raise RuntimeError("Only dense CPU tensors can be pinned")

    def copy_out(offset: int, length: int, slot: StagingSlot) -> None:
        raise AssertionError("nothing is copied without a ring")

    trial = OutOfBand(sink=None)
    staged_slot(trial, "key", object(), "torch", "cuda:0", 1 << 20, copy_out, refused)
    assert made == []

    io = ParallelIO(2)
    try:
        storing = OutOfBand(BufferSink(BlobWriter(BlobStore(tmp_path)), io))
        slot = staged_slot(storing, "key", object(), "torch", "cuda:0", 1 << 20, copy_out, refused)
        with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
            assert storing.sink is not None
            slot.store(storing.sink)
    finally:
        io.close()
    assert made == [1]


def test_the_gpus_are_asked_of_the_library_that_holds_the_buffers():
    assert library_for([]) == "torch"  # GPU needs without GPU buffers: small CUDA tensors, in the pickle
    assert library_for(["torch"]) == library_for(["torch", "cupy"]) == "torch"
    assert library_for(["cupy", "cupy"]) == "cupy"


def test_a_cupy_checkpoint_is_checked_through_cupy_without_importing_torch():
    """A cupy-only checkpoint restored where torch is CPU-only was refused ("can see 0") because
    torch was asked first; now cupy is asked, and torch is not even imported. On this machine
    (no driver) cupy sees no GPU: the refusal says so, and a checkpoint without GPU needs passes."""
    pytest.importorskip("cupy")
    code = """
import sys
from kernel_hooks.errors import IncompatibleError
from kernel_hooks.state import devices
free = devices.free_memory([{"kind": "numpy", "device": "cpu"}, {"kind": "cupy", "device": "cuda:0"}])
devices.check({}, free)
try:
    devices.check({"cuda:0": 1 << 20}, free)
except IncompatibleError as e:
    print(e)
print("torch" in sys.modules, "cupy" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the checkpoint holds tensors on 1 GPU(s); this kernel can see 0",
                                        "False True"]


def test_only_the_gpus_a_checkpoint_uses_are_asked_for_free_memory():
    """Asking a GPU for its free memory makes a CUDA context there: a checkpoint on cuda:1 asks
    cuda:1 alone, once, of the four GPUs the kernel sees."""
    asked: list[int] = []

    def free_bytes(index: int) -> int:
        asked.append(index)
        return (index + 1) * GIB

    free = FreeMemory(4, free_bytes)
    check({"cuda:1": GIB}, free)
    check({"cuda:1": 2 * GIB}, free)
    assert asked == [1]
    with pytest.raises(IncompatibleError, match=r"needs 3.00 GiB on cuda:1; only 2.00 GiB is free there"):
        check({"cuda:1": 3 * GIB}, free)
    with pytest.raises(IncompatibleError, match=r"holds tensors on 5 GPU\(s\); this kernel can see 4"):
        check({"cuda:4": 1}, free)
    assert asked == [1] and len(free) == 4 and free[-1] == 4 * GIB and free[2:] == [3 * GIB, 4 * GIB]
    with pytest.raises(IndexError):
        free[4]
