"""torch tensors: storages out of band, CUDA memory staged through pinned host buffers.

A tensor is saved as its storage plus offset, size, stride, dtype, ``requires_grad``,
``.grad`` and its Python attributes, so views of one storage share it again after restore,
and a model's parameters stay the very objects its optimizer refers to. CUDA storages are
copied off the GPU chunk by chunk (never ``.cpu()`` on a whole model) and come back on the
GPU of the same index among those the restoring kernel can see.

Every host tensor made here names ``device="cpu"``: in a notebook that called
``torch.set_default_device("cuda")`` the staging ring would be made on the GPU, which torch
refuses to pin. A GPU is synchronized before anything is copied off it, since torch's copies
wait for the current stream only.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from gpuckpt_store import BufferRecord

from ..blobs import DEVICE_CHUNK_BYTES
from ..blobs.buffers import BufferSource, Staging, StagingSlot
from .arrays import INLINE_BYTES, OutOfBand, Reduction, host_slot, staged_slot

STAGING_SLOTS = 8


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """A flat uint8 tensor over ``storage``'s memory (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def pinned_staging(chunk: int = DEVICE_CHUNK_BYTES) -> Staging:
    """The ring of pinned host slots that CUDA storages move through."""
    slots = []
    for _ in range(STAGING_SLOTS):
        host = torch.empty(chunk, dtype=torch.uint8, device="cpu", pin_memory=True)
        slots.append(StagingSlot(host.numpy().data, host))
    return Staging(slots)


def _storage_from_bytes(data: bytes, device: str) -> torch.UntypedStorage:
    if not data:
        return torch.empty(0, dtype=torch.uint8, device=device).untyped_storage()
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device).untyped_storage()


def _rebuild_tensor(storage: torch.UntypedStorage, offset: int, size: tuple[int, ...],
                    stride: tuple[int, ...], dtype: torch.dtype, requires_grad: bool,
                    grad: torch.Tensor | None, is_parameter: bool,
                    attrs: dict[str, Any] | None) -> torch.Tensor:
    tensor = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, size, stride)
    if is_parameter:
        tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad)
    elif requires_grad:
        tensor.requires_grad_(True)
    if grad is not None:
        tensor.grad = grad
    if attrs:
        tensor.__dict__.update(attrs)
    return tensor


class _SmallStorage:
    """A storage under ``INLINE_BYTES``: its bytes go in the pickle, still shared by views."""

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.data = _bytes_of(storage).cpu().numpy().tobytes()
        self.device = str(storage.device)


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    synchronized: set[int] = set()

    def synchronize(index: int) -> None:
        """Wait, once per pass, for the work queued on GPU ``index`` on every stream: a copy
        waits for the current stream only, and a kernel on a side stream (torch's streams do
        not wait for the default one) may still be writing a tensor that is being saved."""
        if index not in synchronized:
            torch.cuda.synchronize(index)
            synchronized.add(index)

    def storage_for(storage: torch.UntypedStorage) -> Any:
        device = storage.device
        key = ("torch", str(device), storage.data_ptr(), storage.nbytes())
        nbytes = storage.nbytes()
        if device.type == "cuda":
            out.note_device(key, f"cuda:{device.index}", nbytes)
            synchronize(device.index)
        if nbytes < INLINE_BYTES:
            return out.memo(key, storage, lambda: _SmallStorage(storage))
        if device.type == "cpu":
            return host_slot(out, key, storage, "torch", _bytes_of(storage).numpy().data)
        source = _bytes_of(storage)

        def copy_out(offset: int, length: int, slot: StagingSlot) -> None:
            slot.native[:length].copy_(source[offset:offset + length])

        return staged_slot(out, key, storage, "torch", f"cuda:{device.index}", nbytes,
                           copy_out, pinned_staging)

    def reduce_tensor(tensor: torch.Tensor) -> Reduction:
        if (tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested
                or tensor.device.type not in ("cpu", "cuda")):
            return NotImplemented
        grad = tensor.grad if tensor.is_leaf else None
        return _rebuild_tensor, (
            storage_for(tensor.untyped_storage()), tensor.storage_offset(), tuple(tensor.shape),
            tensor.stride(), tensor.dtype, tensor.requires_grad, grad,
            isinstance(tensor, torch.nn.Parameter), dict(tensor.__dict__) or None,
        )

    def reduce_small(small: _SmallStorage) -> Reduction:
        return _storage_from_bytes, (small.data, small.device)

    return {torch.Tensor: reduce_tensor, torch.nn.Parameter: reduce_tensor,
            _SmallStorage: reduce_small}


def from_host(memory: Any) -> torch.UntypedStorage:
    """A restored buffer (read into ``memory``) as the storage tensors are rebuilt on.

    It shares ``memory`` (page-aligned) rather than copying it; like a tensor
    made by ``torch.frombuffer`` its storage cannot be resized in place.
    """
    if not len(memory):
        return torch.empty(0, dtype=torch.uint8, device="cpu").untyped_storage()
    return torch.frombuffer(memory, dtype=torch.uint8).untyped_storage()


def load_device(record: BufferRecord, device: str, source: BufferSource, what: str,
                staging: Staging) -> tuple[torch.UntypedStorage, list[Future[None]]]:
    """A storage on ``device`` and the reads that fill it."""
    flat = torch.empty(record.nbytes, dtype=torch.uint8, device=device)

    def copy_in(offset: int, length: int, slot: StagingSlot) -> None:
        flat[offset:offset + length].copy_(slot.native[:length])

    return flat.untyped_storage(), source.load_device(record, copy_in, staging, what)


def visible_gpus() -> int:
    """GPUs torch can see here (no CUDA context is made to count them)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def free_bytes(index: int) -> int:
    """Bytes a restore can allocate on GPU ``index``: the driver's free memory plus what torch's
    caching allocator holds there unused, which torch hands out before asking the driver."""
    free = int(torch.cuda.mem_get_info(index)[0])
    return free + torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)


def describe_gpu(index: int) -> dict[str, Any]:
    """GPU ``index``'s model, compute capability and memory, for the checkpoint's record."""
    props = torch.cuda.get_device_properties(index)
    return {"name": props.name, "capability": f"{props.major}.{props.minor}",
            "total_memory": int(props.total_memory), "cuda": torch.version.cuda}
