"""GPU placement: the restore-time check, and the staged device copy path, without a GPU.

The CUDA path itself runs in tests/kernel_hooks/test_gpu.py on a GPU machine; here the same code
checks a test inventory, and the staging ring moves torch CPU tensors standing in for
device memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernel_hooks.blobs import BlobStore, BlobWriter, ParallelIO
from kernel_hooks.blobs.buffers import BufferSink, BufferSource, Staging, StagingSlot
from kernel_hooks.errors import IncompatibleError
from kernel_hooks.state.devices import check

GIB = 1 << 30


def test_check_accepts_what_fits():
    check({}, [])
    check({"cuda:0": 2 * GIB, "cuda:1": GIB}, [3 * GIB, GIB])


@pytest.mark.parametrize(
    ("needs", "free", "message"),
    [
        ({"cuda:0": 1}, [], "holds tensors on 1 GPU(s); this kernel can see 0"),
        ({"cuda:1": 1}, [8 * GIB], "holds tensors on 2 GPU(s); this kernel can see 1"),
        ({"cuda:0": 6 * GIB}, [4 * GIB], "needs 6.00 GiB on cuda:0; only 4.00 GiB is free there"),
        ({"tpu:0": 1}, [GIB], "unknown device 'tpu:0'"),
    ],
)
def test_check_refuses_with_the_reason(needs, free, message):
    with pytest.raises(IncompatibleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(needs, free)


def test_kernel_without_gpu_refuses_a_cuda_checkpoint_before_loading(kernels):
    saver = kernels.start()
    saver.ok("import numpy as np\nweights = np.ones(1 << 20)")
    checkpoint = saver.save()
    manifest = kernels.manifest(checkpoint)
    manifest["devices"] = {"cuda:0": 8 * GIB}
    kernels.rewrite_manifest(checkpoint, manifest)

    fresh = kernels.start()
    outcome = fresh.run(f"%gpuckpt restore {checkpoint}")
    assert outcome.error == "UsageError: the checkpoint holds tensors on 1 GPU(s); this kernel can see 0"
    assert fresh.value("'weights' in dir()") is False


def _cpu_staging(slots: int, size: int) -> Staging:
    tensors = [torch.empty(size, dtype=torch.uint8) for _ in range(slots)]
    return Staging([StagingSlot(memoryview(t.numpy()), t) for t in tensors])


def test_staged_path_round_trips_through_a_small_ring(tmp_path: Path):
    blobs = BlobStore(tmp_path, chunk_bytes=1 << 20)
    device = torch.arange(5_500_000, dtype=torch.int32).view(torch.uint8)  # 22 MB, 21 chunks
    staging = _cpu_staging(2, 1 << 20)
    copies = []

    def copy_out(offset: int, length: int, slot: StagingSlot) -> None:
        copies.append(length)
        slot.native[:length].copy_(device[offset:offset + length])

    writer = BlobWriter(blobs)
    io = ParallelIO(4)
    try:
        staged = BufferSink(writer, io).add_device("key", device, device.numel(), copy_out, staging)
        io.wait()
        writer.finish(io)
        record = staged.record()
        second = BlobWriter(blobs)
        host = BufferSink(second, io).add_host("host", device, memoryview(device.numpy()))
        io.wait()
        second.finish(io)
        # the staged chunks hash like the same bytes from memory
        assert host.record().hashes == record.hashes and len(record.hashes) == 21
        assert sum(copies) == device.numel() and max(copies) == 1 << 20
        assert writer.bytes_written == device.numel() == second.bytes_written
        assert sum(n for _, _, n in record.extents) == 21 and len(record.blobs) <= 4  # packed, one per thread

        restored = torch.zeros_like(device)

        def copy_in(offset: int, length: int, slot: StagingSlot) -> None:
            restored[offset:offset + length].copy_(slot.native[:length])

        BufferSource(blobs, io).load_device(record, copy_in, _cpu_staging(2, 1 << 20), "test buffer")
        io.wait()
    finally:
        io.close()
    assert torch.equal(restored, device)
