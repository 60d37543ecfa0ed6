"""Park another CUDA process: move its GPU memory into host memory held by the CUDA driver,
so its GPU is free while the process stays alive, and put it back later (unpark).

This is the driver's process checkpoint API (``cuCheckpointProcess{Lock,Checkpoint,Restore,
Unlock,GetState}``, display driver 570+, i.e. CUDA 12.8; restoring onto another GPU of the
same model from driver 580, CUDA 13.0), called through NVIDIA's ``cuda-bindings``. Nothing is
serialized: the driver keeps the bytes, the process keeps its addresses.

A process cannot park itself (its own CUDA calls would block on the lock), and the server
never touches CUDA (DESIGN.md), so this runs as a helper process, started by the server with
the kernel's own Python::

    python -m kernel_hooks.cuda_park probe
    python -m kernel_hooks.cuda_park state PID
    python -m kernel_hooks.cuda_park park PID [--timeout-ms N]
    python -m kernel_hooks.cuda_park unpark PID [--remap OLD-UUID=NEW-UUID ...]

Each prints one JSON object: ``{"ok": true, "state": ..., "seconds": ...}`` (``probe`` adds
``driver``, ``cuda``, ``bindings`` and ``remap``) or ``{"ok": false, "reason": ...,
"kind": "unsupported" | "failed", "state": ...}``; the exit status is 0 either way, 2 when
misused. ``cuda.bindings`` is imported on first use only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gpuckpt_store import protocol

from . import park_checks

FIRST_CUDA = 12080
"""cuDriverGetVersion of the first driver with the checkpoint API: CUDA 12.8, display driver 570."""
REMAP_CUDA = 13000
"""The first driver that restores onto other GPUs (``CUcheckpointRestoreArgs.gpuPairs``): CUDA 13.0, driver 580."""
LOCK_TIMEOUT_MS = 10_000
"""How long park waits for the process's submitted CUDA work before giving up (it keeps running)."""
INSTALL = "pip install cuda-bindings"


class ParkError(Exception):
    """Park, unpark or a state query failed; ``state`` is the process's CUDA state after it
    (None where unknown), so the caller knows whether the kernel still runs on its GPU."""

    kind = protocol.PARK_FAILED

    def __init__(self, reason: str, state: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.state = state


class Unparkable(ParkError):
    """Park cannot work here or for this process (no driver, too old, no bindings, no CUDA
    in the process, state the driver cannot checkpoint); retrying will not help."""

    kind = protocol.PARK_UNSUPPORTED


class _Failed(Exception):
    """A driver call returned an error; the message is its name (``CUDA_ERROR_...``)."""


def _version(cuda: int) -> str:
    return f"{cuda // 1000}.{cuda % 1000 // 10}"


def _display_driver() -> str | None:
    """The display driver's version (``570.86.10``), where the kernel module tells it."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            words = f.readline().split()
    except OSError:
        return None
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def _driver_cuda_version() -> int:
    """The CUDA version the driver offers (``cuDriverGetVersion``, 12080 = 12.8), asked of
    libcuda itself: it needs no ``cuInit`` and no GPU, and cannot be hidden by the bindings."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise Unparkable("no CUDA driver on this machine (libcuda.so.1 not found)") from None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        raise Unparkable("the CUDA driver does not tell its version (cuDriverGetVersion failed)")
    return version.value


def _bindings() -> tuple[Any, str]:
    """``cuda.bindings.driver`` and the bindings' version."""
    try:
        import cuda.bindings
        from cuda.bindings import driver
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("cuda"):
            raise Unparkable(f"cuda-python is not installed in the kernel's environment ({INSTALL})") from None
        raise Unparkable(f"cuda-python cannot be loaded in the kernel's environment: {e}") from None
    return driver, str(getattr(cuda.bindings, "__version__", "?"))


class _Driver:
    """The checkpoint API of this machine's driver, checked once: bindings, driver, versions."""

    def __init__(self) -> None:
        self.api, self.bindings = _bindings()
        self.cuda = _driver_cuda_version()
        self.display = _display_driver()
        if self.cuda < FIRST_CUDA:
            shown = self.display or f"for CUDA {_version(self.cuda)}"
            raise Unparkable(f"park is not supported here: the CUDA driver {shown} is older than 570 "
                                  "(process checkpointing needs 570+)")
        # NVIDIA's own cuda.core accepts 12.8+ and 13.0.2+ for this API (cuda-python PR #1983)
        if not hasattr(self.api, "cuCheckpointProcessLock") or self.bindings in ("13.0.0", "13.0.1"):
            raise Unparkable(f"cuda-bindings {self.bindings} has no usable process checkpoint API "
                                  "(pip install -U 'cuda-bindings>=12.8,!=13.0.0,!=13.0.1')")

    @property
    def remap(self) -> bool:
        """Whether unpark can put the memory on another GPU than it came from."""
        return self.cuda >= REMAP_CUDA and hasattr(self.api, "CUcheckpointGpuPair")

    def call(self, function: str, *args: Any) -> Any:
        """``function(*args)``'s value; raises :class:`_Failed` with the driver's error name."""
        try:
            result = getattr(self.api, function)(*args)
        except RuntimeError as e:  # no such entry point: bindings built for a newer CUDA than the driver's
            major = self.cuda // 1000
            if self.bindings.split(".")[0] != str(major):
                advice = f"install cuda-bindings for CUDA {major} (pip install 'cuda-bindings=={major}.*')"
            else:
                advice = "this driver lacks it"
            raise Unparkable(f"cuda-bindings {self.bindings} cannot call {function} on this driver "
                                  f"(CUDA {_version(self.cuda)}): {advice} ({e})") from None
        code, *values = result
        if code != self.api.CUresult.CUDA_SUCCESS:
            raise _Failed(str(getattr(code, "name", code)))
        return values[0] if values else None

    def state(self, pid: int) -> str:
        value = self.call("cuCheckpointProcessGetState", pid)
        return str(value.name).removeprefix("CU_PROCESS_STATE_").lower()


_driver: _Driver | None = None


def _get_driver() -> _Driver:
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


def _check_pid(pid: int) -> None:
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        raise ParkError(f"process {pid} does not exist")


def _opens_nvidia_device(pid: int) -> bool | None:
    """Whether the process has an NVIDIA device file open (every CUDA context does); None
    where its file descriptors cannot be read (another user's process)."""
    try:
        targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return None
    return any(t.startswith("/dev/nvidia") for t in targets)


def _current_state(driver: _Driver, pid: int) -> str | None:
    try:
        return driver.state(pid)
    except _Failed:
        return None


def probe() -> dict[str, Any]:
    """Whether park can work on this machine at all, touching no other process: the bindings
    load, the driver is 570+ and its checkpoint entry points resolve.

    Raises
    ------
    Unparkable
        With the reason, in the words of :class:`Unparkable`'s messages.
    """
    driver = _get_driver()
    try:  # asks about this helper itself: resolves the entry point, changes nothing
        driver.call("cuCheckpointProcessGetState", os.getpid())
    except _Failed:
        pass
    return {"driver": driver.display, "cuda": _version(driver.cuda), "bindings": driver.bindings,
            "remap": driver.remap}


def state(pid: int) -> str:
    """The process's CUDA checkpoint state: running, locked, checkpointed (parked), failed,
    checkpointing or restoring."""
    _check_pid(pid)
    driver = _get_driver()
    try:
        return driver.state(pid)
    except _Failed as e:
        if _opens_nvidia_device(pid) is False:
            raise Unparkable(f"process {pid} does not use CUDA (the driver says {e})") from None
        raise ParkError(f"the CUDA driver cannot tell process {pid}'s checkpoint state: {e}") from None


def park(pid: int, timeout_ms: int = LOCK_TIMEOUT_MS) -> str:
    """Lock the process's CUDA calls (waiting up to ``timeout_ms`` for its submitted work),
    then checkpoint its GPU memory into host memory; the GPU is free on return.

    Where the checkpoint fails the process is unlocked again, so it keeps running on its GPU
    (the driver does not do that itself); the error's ``state`` says whether that worked.
    """
    _check_pid(pid)
    driver = _get_driver()
    # The driver first: a parked process has closed its /dev/nvidia* files, and is no process
    # without CUDA; a running one has them open, whatever the driver answers for a process
    # without CUDA.
    now = state(pid)
    if now != "running":
        raise ParkError(f"process {pid} is {'already parked' if now == 'checkpointed' else now}, not running",
                        now)
    if _opens_nvidia_device(pid) is False:
        raise Unparkable(f"process {pid} does not use CUDA", now)
    _check_gpus(pid)
    lock_args = driver.api.CUcheckpointLockArgs()
    lock_args.timeoutMs = timeout_ms
    try:
        driver.call("cuCheckpointProcessLock", pid, lock_args)
    except _Failed as e:
        raise ParkError(f"process {pid}'s CUDA work did not pause within {timeout_ms} ms, so it was not "
                        f"parked and keeps running: {e}", _current_state(driver, pid)) from None
    try:
        driver.call("cuCheckpointProcessCheckpoint", pid, None)
    except _Failed as e:
        try:
            driver.call("cuCheckpointProcessUnlock", pid, None)
        except _Failed as unlock:
            after, error = f"unlocking it again failed too ({unlock})", ParkError
        else:
            after, error = "it was unlocked and keeps running", Unparkable
        if str(e) == "CUDA_ERROR_NOT_SUPPORTED":
            reason = "the process holds state the driver cannot checkpoint (managed/UVM or IPC memory, for instance)"
        else:
            reason, error = f"the driver could not checkpoint process {pid}", ParkError
        raise error(f"{reason}: {e}; {after}", _current_state(driver, pid)) from None
    return driver.state(pid)


def _read_gpus(purpose: str, now: str | None) -> list[park_checks.GPUReading]:
    """NVML's GPUs, read for ``purpose``; the process's state ``now`` goes with the error."""
    try:
        return park_checks.read_gpus()
    except OSError as e:
        raise ParkError(f"{e}, so {purpose}", now) from None


def _check_gpus(pid: int) -> None:
    """Refuse a park that would leave GPU memory behind (a child's CUDA context) or meet a GPU in
    MIG mode (see :mod:`.park_checks`); the process keeps running."""
    gpus = _read_gpus("park cannot check what it would leave on the GPU", "running")
    problem = (park_checks.children_problem(pid, gpus, os.environ.get(protocol.KERNEL_ENV))
               or park_checks.mig_problem(gpus, os.environ.get("CUDA_VISIBLE_DEVICES")))
    if problem is not None:
        raise Unparkable(problem, "running")


def _uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a GPU UUID in NVML's spelling (``GPU-01234567-89ab-...``)."""
    try:
        return uuid.UUID(text.strip().removeprefix("GPU-")).bytes
    except ValueError:
        raise ParkError(f"{text!r} is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)") from None


def _restore_args(driver: _Driver, remap: Mapping[str, str]) -> Any:
    if not remap:
        return None
    if not driver.remap:
        raise Unparkable(f"unpark onto another GPU needs driver 580+ and cuda-bindings 13+ (this is driver "
                              f"{driver.display or _version(driver.cuda)}, cuda-bindings {driver.bindings})")
    try:  # every GPU the driver sees, not only those the process used (see .park_checks)
        every = _read_gpus("the restore cannot name every GPU the driver sees", None)
        full = park_checks.restore_map(remap, [g.uuid for g in every])
    except ValueError as e:
        raise ParkError(f"cannot unpark onto those GPUs: {e}") from None
    pairs = []
    for old, new in full.items():
        pair = driver.api.CUcheckpointGpuPair()
        # CUuuid has no settable bytes: it is made over a buffer, which the pair copies
        old_bytes, new_bytes = (ctypes.create_string_buffer(_uuid_bytes(u), 16) for u in (old, new))
        pair.oldUuid = driver.api.CUuuid(ctypes.addressof(old_bytes))
        pair.newUuid = driver.api.CUuuid(ctypes.addressof(new_bytes))
        pairs.append(pair)
    args = driver.api.CUcheckpointRestoreArgs()
    args.gpuPairs = pairs
    args.gpuPairsCount = len(pairs)
    return args


def unpark(pid: int, remap: Mapping[str, str] | None = None) -> str:
    """Restore a parked process's GPU memory and unlock its CUDA calls.

    ``remap`` maps each GPU UUID it was parked from to the UUID to restore onto (same model,
    driver 580+); the driver is handed every GPU it sees, those ``remap`` leaves out in their
    place or in the places it frees (:func:`.park_checks.restore_map`). By default it goes back
    where it was.
    """
    _check_pid(pid)
    driver = _get_driver()
    args = _restore_args(driver, remap or {})
    now = state(pid)
    if now not in ("checkpointed", "locked"):
        raise ParkError(f"process {pid} is {now}, not parked", now)
    if now == "checkpointed":
        try:  # restore needs an initialized driver in the caller, or persistence mode
            driver.call("cuInit", 0)
        except _Failed as e:
            raise ParkError(f"the CUDA driver cannot start in the park helper: {e}", now) from None
        try:
            driver.call("cuCheckpointProcessRestore", pid, args)
        except _Failed as e:
            reason = {"CUDA_ERROR_OUT_OF_MEMORY": "its GPU has too little free memory to take it back"}.get(
                str(e), "the driver could not restore it")
            raise ParkError(f"process {pid} stays parked: {reason}: {e}", _current_state(driver, pid)) from None
    try:
        driver.call("cuCheckpointProcessUnlock", pid, None)
    except _Failed as e:
        raise ParkError(f"process {pid}'s GPU memory is back but its CUDA calls stay locked: {e}",
                        _current_state(driver, pid)) from None
    return driver.state(pid)


def _remap_pair(text: str) -> tuple[str, str]:
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(f"{text!r} is not OLD-UUID=NEW-UUID")
    return old, new


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kernel_hooks.cuda_park", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("probe", help="whether park can work on this machine")
    for name, text in (("state", "the process's CUDA checkpoint state"), ("park", "free the process's GPU"),
                       ("unpark", "give the process its GPU memory back")):
        action = actions.add_parser(name, help=text)
        action.add_argument("pid", type=int)
        if name == "park":
            action.add_argument("--timeout-ms", type=int, default=LOCK_TIMEOUT_MS,
                                help=f"wait this long for submitted CUDA work (default {LOCK_TIMEOUT_MS}; 0: forever)")
        if name == "unpark":
            action.add_argument("--remap", type=_remap_pair, nargs="+", default=[], metavar="OLD=NEW",
                                help="restore onto other GPUs of the same model (driver 580+)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The helper's command line; prints one JSON object."""
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    answer: dict[str, Any]
    try:
        if args.action == "probe":
            answer = {"ok": True, "state": None, **probe()}
        elif args.action == "state":
            answer = {"ok": True, "state": state(args.pid)}
        elif args.action == "park":
            answer = {"ok": True, "state": park(args.pid, args.timeout_ms)}
        else:
            answer = {"ok": True, "state": unpark(args.pid, dict(args.remap))}
        answer["seconds"] = round(time.perf_counter() - started, 4)
    except ParkError as e:
        answer = {"ok": False, "reason": e.reason, "kind": e.kind, "state": e.state}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
