"""What the CUDA driver's process checkpoint does not cover, read from NVML before a park, and
the GPU map an unpark onto other GPUs hands the driver.

* The driver parks one process: a child with a CUDA context of its own (a ``subprocess`` the
  kernel started, a worker that initialized CUDA) keeps its GPU memory while the GPU is lent, so
  a kernel with one is not parked. Its children are the processes NVML lists on any GPU that
  descend from the kernel or carry its tag (``protocol.KERNEL_ENV``, as a detached daemon does).
  NVML must report pids in the kernel's pid namespace for that; in a container that hides the
  host's pids it does not, and the check finds nothing (docs/operators/staging.md says so).
* GPUs in MIG mode are not parked: the pool hands out whole GPUs and a MIG GPU's memory belongs
  to its instances, a case the driver's checkpoint was never tried on here.
* A restore onto other GPUs takes a map that names every GPU the driver sees, not only those the
  process used: NVIDIA's ``cuda.core.checkpoint.Process.restore`` says so, and
  ``CUDA_VISIBLE_DEVICES`` does not narrow it. NVML lists them all, whatever the kernel's
  ``CUDA_VISIBLE_DEVICES``.

Each check is a function of NVML's answer (:class:`GPUReading`), so it runs without a GPU too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from gpuckpt_store import protocol

_MIB = 1 << 20


@dataclass(frozen=True)
class GPUReading:
    """One GPU as NVML reports it."""

    uuid: str
    mig: bool = False
    """Whether MIG mode is on (now, not pending)."""
    processes: dict[int, int] = field(default_factory=dict)
    """The processes with a CUDA context on it: pid -> bytes of GPU memory they use."""


def read_gpus() -> list[GPUReading]:
    """Every GPU NVML reports, whatever ``CUDA_VISIBLE_DEVICES`` says.

    Raises
    ------
    OSError
        NVML cannot be loaded or answered.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # no library (ImportError), no driver (NVMLError)
        raise OSError(f"NVML cannot be read: {e}") from None
    try:
        return [_reading(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as e:
        raise OSError(f"NVML cannot be read: {e}") from None
    finally:
        pynvml.nvmlShutdown()


def _reading(pynvml: Any, handle: Any) -> GPUReading:
    name = pynvml.nvmlDeviceGetUUID(handle)
    try:
        mig = pynvml.nvmlDeviceGetMigMode(handle)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    except pynvml.NVMLError_NotSupported:  # a GPU without MIG
        mig = False
    processes = {int(p.pid): int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    return GPUReading(name if isinstance(name, str) else name.decode(), mig, processes)


def _of_kernel(pid: int, other: int, tag: str | None) -> bool:
    """Whether process ``other`` descends from ``pid`` or carries the kernel's ``tag``."""
    try:
        process = psutil.Process(other)
        if any(parent.pid == pid for parent in process.parents()):
            return True
        return tag is not None and process.environ().get(protocol.KERNEL_ENV) == tag
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def cuda_children(pid: int, gpus: Iterable[GPUReading], tag: str | None = None) -> dict[int, int]:
    """The processes of kernel ``pid`` other than itself that hold GPU memory, as NVML lists them:
    pid -> bytes on all GPUs. ``tag``: the kernel's id, which every process it started inherits
    in ``protocol.KERNEL_ENV``."""
    found: dict[int, int] = {}
    for gpu in gpus:
        for other, nbytes in gpu.processes.items():
            if other != pid and (other in found or _of_kernel(pid, other, tag)):
                found[other] = found.get(other, 0) + nbytes
    return found


def children_problem(pid: int, gpus: Iterable[GPUReading], tag: str | None = None) -> str | None:
    """Why kernel ``pid`` cannot be parked because of its children (None: it has none on a GPU)."""
    found = cuda_children(pid, gpus, tag)
    if not found:
        return None
    named = ", ".join(f"{other} ({nbytes / _MIB:.0f} MiB)" for other, nbytes in sorted(found.items()))
    return (f"process {pid} has child processes with CUDA contexts of their own, which park would leave on the "
            f"GPU: pid {named}; park moves the kernel's main process only")


def _canonical(text: str) -> str:
    """A GPU UUID as NVML spells it (``GPU-`` and lower-case hex), from either spelling."""
    try:
        return f"GPU-{uuid.UUID(text.strip().removeprefix('GPU-'))}"
    except ValueError:
        raise ValueError(f"{text!r} is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)") from None


def mig_problem(gpus: Sequence[GPUReading], visible: str | None) -> str | None:
    """Why a kernel whose ``CUDA_VISIBLE_DEVICES`` is ``visible`` cannot be parked because of MIG
    (None: no GPU it may use is in MIG mode). Entries that are not GPU UUIDs (indices, MIG
    instances) could be any GPU: then every GPU counts."""
    names = [n.strip() for n in (visible or "").split(",") if n.strip()]
    if any(n.startswith("MIG-") for n in names):
        return "the kernel uses MIG instances; park does not handle MIG devices"
    try:
        mine = {_canonical(n) for n in names} if visible is not None else None
    except ValueError:
        mine = None
    mig = [g.uuid for g in gpus if g.mig and (mine is None or _canonical(g.uuid) in mine)]
    if mig:
        return f"{', '.join(mig)} {'is' if len(mig) == 1 else 'are'} in MIG mode; park does not handle MIG devices"
    return None


def restore_map(remap: Mapping[str, str], gpus: Sequence[str]) -> dict[str, str]:
    """The full map a restore onto other GPUs hands the driver: every GPU in ``gpus`` (all the
    driver sees) to the one it restores onto, ``remap``'s pairs as asked, the others to
    themselves where they are free, else to the GPUs ``remap`` leaves free, in order, so that no
    two map to one.

    Raises
    ------
    ValueError
        ``remap`` names a GPU the driver does not see, or restores two GPUs onto one.
    """
    every = [_canonical(u) for u in gpus]
    asked = {_canonical(old): _canonical(new) for old, new in remap.items()}
    unknown = sorted({u for pair in asked.items() for u in pair} - set(every))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: no such GPU here (the driver sees {', '.join(every) or 'none'})")
    if len(set(asked.values())) != len(asked):
        raise ValueError("two GPUs cannot be restored onto one")
    full = dict(asked)
    taken = set(asked.values())
    for gpu in every:
        if gpu not in full and gpu not in taken:
            full[gpu] = gpu
            taken.add(gpu)
    spare = iter(g for g in every if g not in taken)
    for gpu in every:
        if gpu not in full:
            full[gpu] = next(spare)
    return full
