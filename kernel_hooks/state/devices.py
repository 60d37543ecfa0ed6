"""GPU needs of a checkpoint, and whether the restoring kernel can meet them.

``cuda:i`` in a checkpoint means the i-th GPU the saving kernel could see, and restores to
the i-th GPU the restoring kernel can see (after ``CUDA_VISIBLE_DEVICES``). The check runs
before anything is read, so a kernel with too few GPUs or too little free memory refuses
at once with the reason.

The GPUs are asked of the library that will hold the restored buffers (torch, unless the
checkpoint's GPU buffers are all cupy's): a kernel with a CPU-only torch can still restore
cupy arrays. Only the GPUs the checkpoint uses are asked for their free memory, since asking
makes a CUDA context there (hundreds of MB of that GPU), and memory the library has cached
for reuse counts as free, since the restore's allocations take it first.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, overload

from ..errors import IncompatibleError

_GIB = 1 << 30
_CODECS = {"torch": "torch_tensors", "cupy": "cupy_arrays"}
"""The codec module of each library that keeps buffers on GPUs; each offers ``visible_gpus()``,
``free_bytes(index)`` and ``describe_gpu(index)``."""


def _index(device: str) -> int:
    kind, _, index = device.partition(":")
    if kind != "cuda" or not index.isdigit():
        raise IncompatibleError(f"the checkpoint names an unknown device {device!r}")
    return int(index)


def check(needs: dict[str, int], free: Sequence[int]) -> None:
    """Raise :class:`IncompatibleError` unless ``free`` (bytes per visible GPU) fits ``needs``.

    Parameters
    ----------
    needs
        Bytes the checkpoint holds on each device, as ``{"cuda:0": nbytes, ...}``.
    free
        Free bytes on each GPU this kernel can see, in visible order; only the entries of the
        GPUs in ``needs`` are looked up.
    """
    if not needs:
        return
    wanted = max(_index(d) for d in needs) + 1
    if wanted > len(free):
        raise IncompatibleError(
            f"the checkpoint holds tensors on {wanted} GPU(s); this kernel can see {len(free)}"
        )
    for device, nbytes in sorted(needs.items()):
        have = free[_index(device)]
        if nbytes > have:
            raise IncompatibleError(
                f"the checkpoint needs {nbytes / _GIB:.2f} GiB on {device}; only "
                f"{have / _GIB:.2f} GiB is free there"
            )


class FreeMemory(Sequence[int]):
    """Free bytes on each of ``count`` GPUs, each GPU asked (``free_bytes(index)``) only when
    its entry is looked up, and once."""

    def __init__(self, count: int, free_bytes: Callable[[int], int]) -> None:
        self._count = count
        self._free_bytes = free_bytes
        self._asked: dict[int, int] = {}

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(self._count)[index]]
        index = range(self._count)[index]  # IndexError beyond the GPUs, as a list's
        if index not in self._asked:
            self._asked[index] = self._free_bytes(index)
        return self._asked[index]


def library_for(kinds: Iterable[str]) -> str:
    """The library to ask about GPUs, given the kinds of the checkpoint's GPU buffers: torch,
    unless they are all cupy's (small CUDA tensors are inside the pickle, so a checkpoint with
    GPU needs and no GPU buffers holds torch's)."""
    kinds = set(kinds)
    return "cupy" if kinds and kinds <= {"cupy"} else "torch"


def _codec(library: str) -> ModuleType:
    try:
        return importlib.import_module(f"..codecs.{_CODECS[library]}", __package__)
    except ImportError as e:
        raise IncompatibleError(f"the checkpoint holds {library} data on GPUs but {library} cannot be imported "
                                f"here: {e}") from e


def free_memory(buffers: Iterable[dict[str, Any]]) -> FreeMemory:
    """Free bytes on each GPU this kernel can see, from the library that will hold the
    checkpoint's GPU ``buffers`` (its manifest's entries), asked per GPU when looked up."""
    codec = _codec(library_for(b["kind"] for b in buffers if b["device"] != "cpu"))
    return FreeMemory(codec.visible_gpus(), codec.free_bytes)


def describe(needs: dict[str, int]) -> list[dict[str, Any]]:
    """Model, compute capability and memory of the GPUs a checkpoint uses (for the record),
    from whichever library the kernel imported sees them: torch's CUDA, else cupy."""
    if not needs:
        return []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        codec = _codec("torch")
    elif "cupy" in sys.modules:
        codec = _codec("cupy")
    else:
        return []
    return [{"device": device, **codec.describe_gpu(_index(device))} for device in sorted(needs)]
