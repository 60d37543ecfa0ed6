"""CUDA park from the server: runs the helper ``python -m kernel_hooks.cuda_park`` with the
kernel's own Python and reads the one JSON object it prints.

The server never touches CUDA (DESIGN.md), and the kernel's environment, not the server's,
holds ``cuda-bindings``; so every park, unpark and state query is a short-lived process of
that Python, bounded by a timeout, whose crash is reported with its last words.

Results are ``{"ok": true, "state": ..., "seconds": ...}``; refusals raise
:class:`~jupyter_gpuckpt.errors.ParkUnsupported`, failures
:class:`~jupyter_gpuckpt.errors.ParkFailed` (with the process's CUDA state after it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any

from gpuckpt_store import protocol

from ..errors import ParkFailed, ParkUnsupported

HELPER = "kernel_hooks.cuda_park"
QUERY_TIMEOUT = 60.0
"""Seconds for ``probe`` and ``state``: loading the bindings and the driver, nothing moved."""
MOVE_TIMEOUT = 600.0
"""Seconds for a park or unpark: the lock's wait plus copying all of the kernel's GPU memory
(an H200's 141 GB at a few GB/s)."""

_support: dict[str, str | None] = {}


async def _run(python: str, args: list[str], timeout: float, env: Mapping[str, str] | None) -> dict[str, Any]:
    """Run the helper; its answer where ``ok``, else the matching domain error."""
    try:
        process = await asyncio.create_subprocess_exec(
            python, "-m", HELPER, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=None if env is None else dict(env))
    except OSError as e:
        raise ParkUnsupported(f"the kernel's Python {python} cannot be started: {e}") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
        process.kill()
        await process.wait()
        raise ParkFailed(f"the park helper ({args[0]}) did not finish within {timeout:.0f} s; the kernel's CUDA "
                         "state is unknown until it is asked again") from None
    try:
        answer = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
        if not isinstance(answer, dict) or "ok" not in answer:
            raise ValueError(answer)
    except (ValueError, IndexError):
        words = err.decode(errors="replace").strip().splitlines()
        raise ParkFailed(f"the park helper ({args[0]}) crashed with exit status {process.returncode}: "
                         f"{words[-1] if words else 'no message'}") from None
    if not answer["ok"]:
        if answer.get("kind") == protocol.PARK_UNSUPPORTED:
            raise ParkUnsupported(answer["reason"])
        raise ParkFailed(answer["reason"], answer.get("state"))
    return answer


async def probe(python: str = sys.executable, env: Mapping[str, str] | None = None,
                timeout: float = QUERY_TIMEOUT) -> dict[str, Any]:
    """Whether park can work where ``python`` runs: ``driver`` (570.86.10), ``cuda`` (12.8),
    ``bindings`` (cuda-bindings' version) and ``remap`` (unpark onto another GPU works).

    Parameters
    ----------
    python
        The kernel's Python executable (``argv[0]`` of its kernelspec).
    env
        The environment to run it in; the server's where None.
    timeout
        Seconds before the helper is killed.

    Raises
    ------
    ParkUnsupported
        With the reason (no driver, too old, no cuda-bindings ...).
    """
    return await _run(python, ["probe"], timeout, env)


async def park_support(python: str = sys.executable, env: Mapping[str, str] | None = None) -> str | None:
    """None where park works with ``python``, else why not; asked once per Python executable.

    A helper that times out or crashes is reported but not remembered, so it is asked again.
    """
    if python not in _support:
        try:
            await probe(python, env)
        except ParkUnsupported as e:
            _support[python] = str(e)
        except ParkFailed as e:
            return str(e)
        else:
            _support[python] = None
    return _support[python]


async def state(pid: int, python: str = sys.executable, env: Mapping[str, str] | None = None,
                timeout: float = QUERY_TIMEOUT) -> str:
    """Process ``pid``'s CUDA checkpoint state: ``running``, ``locked``, ``checkpointed``
    (parked), ``failed``, ``checkpointing`` or ``restoring``."""
    return str((await _run(python, ["state", str(pid)], timeout, env))["state"])


async def park(pid: int, python: str = sys.executable, env: Mapping[str, str] | None = None,
               lock_timeout_ms: int = 10_000, timeout: float = MOVE_TIMEOUT) -> dict[str, Any]:
    """Park process ``pid``: its GPU memory moves into host memory held by the driver and
    its GPU is free on return; the answer's ``state`` is ``checkpointed``.

    Parameters
    ----------
    lock_timeout_ms
        How long the driver waits for the kernel's submitted CUDA work before refusing
        (the kernel then keeps running on its GPU); 0 waits forever.
    timeout
        Seconds before the helper is killed.

    Raises
    ------
    ParkUnsupported
        Park cannot work for this kernel (the reason says why: no driver, memory the driver cannot
        checkpoint, a child process with a CUDA context of its own, a GPU in MIG mode); it keeps
        running.
    ParkFailed
        The lock timed out, or the checkpoint failed; ``state`` says where it was left.
    """
    return await _run(python, ["park", str(pid), "--timeout-ms", str(lock_timeout_ms)], timeout, env)


async def unpark(pid: int, python: str = sys.executable, env: Mapping[str, str] | None = None,
                 remap: Mapping[str, str] | None = None, timeout: float = MOVE_TIMEOUT) -> dict[str, Any]:
    """Give parked process ``pid`` its GPU memory back and unlock it (``state``: ``running``).

    Parameters
    ----------
    remap
        NVML UUIDs: each GPU it was parked from to the GPU to restore onto, all of them,
        same model (driver 580+); by default it returns to the GPUs it left.

    Raises
    ------
    ParkUnsupported
        A remap was asked of a driver or cuda-bindings that cannot remap.
    ParkFailed
        The restore failed (too little free GPU memory, for one); ``state`` says where
        it was left (``checkpointed``: still parked).
    """
    pairs = [f"{old}={new}" for old, new in (remap or {}).items()]
    return await _run(python, ["unpark", str(pid), *(["--remap", *pairs] if pairs else [])], timeout, env)
