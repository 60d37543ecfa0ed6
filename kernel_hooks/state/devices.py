"""GPU needs of a checkpoint, and whether the restoring kernel can meet them.

``cuda:i`` in a checkpoint means the i-th GPU the saving kernel could see, and restores to
the i-th GPU the restoring kernel can see (after ``CUDA_VISIBLE_DEVICES``). The check runs
before anything is read, so a kernel with too few GPUs or too little free memory refuses
at once with the reason.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from ..errors import IncompatibleError

_GIB = 1 << 30


def _index(device: str) -> int:
    kind, _, index = device.partition(":")
    if kind != "cuda" or not index.isdigit():
        raise IncompatibleError(f"the checkpoint names an unknown device {device!r}")
    return int(index)


def check(needs: dict[str, int], free: list[int]) -> None:
    """Raise :class:`IncompatibleError` unless ``free`` (bytes per visible GPU) fits ``needs``.

    Parameters
    ----------
    needs
        Bytes the checkpoint holds on each device, as ``{"cuda:0": nbytes, ...}``.
    free
        Free bytes on each GPU this kernel can see, in visible order.
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


def free_memory() -> list[int]:
    """Free bytes on each visible GPU, from whichever GPU library the kernel can import."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if not torch.cuda.is_available():
            return []
        return [int(torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())]
    if importlib.util.find_spec("cupy") is None:
        return []
    import cupy

    runtime = cupy.cuda.runtime
    free = []
    for i in range(runtime.getDeviceCount()):
        with cupy.cuda.Device(i):
            free.append(int(runtime.memGetInfo()[0]))
    return free


def describe(needs: dict[str, int]) -> list[dict[str, Any]]:
    """Model, compute capability and memory of the GPUs a checkpoint uses (for the record)."""
    if not needs or "torch" not in sys.modules:
        return []
    import torch

    described = []
    for device in sorted(needs):
        index = _index(device)
        props = torch.cuda.get_device_properties(index)
        described.append({
            "device": device, "name": props.name, "capability": f"{props.major}.{props.minor}",
            "total_memory": int(props.total_memory), "cuda": torch.version.cuda,
        })
    return described
