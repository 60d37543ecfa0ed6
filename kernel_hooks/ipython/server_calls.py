"""The calls the Jupyter server makes into the kernel, over a comm, JSON in and out.

The server opens a comm with target :data:`TARGET` whose data is ``{"call": NAME, "args":
{...}}``; the kernel runs the call, sends ``{"progress": {"done": ..., "total": ...}}``
messages on the comm while it works, and closes the comm with the answer: ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error": ..., "kind": ...}`` with the message the user
should see. Nothing is run as source code, and nothing enters the user's history, cell
count or namespace.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from gpuckpt_store import CheckpointError, CheckpointStore

from .. import rebuilding
from ..restoring import restore_checkpoint
from ..saving import save_checkpoint
from ..state.session import current

TARGET = "jupyter_gpuckpt"
"""The comm target (must match ``jupyter_gpuckpt.kernel_calls``)."""
PROGRESS_SECONDS = 0.5
"""At most one progress message this often."""
WORKING_SECONDS = 5.0
"""A call that reports no bytes (importing libraries, unpickling, running cells) still says
it is working this often, so the server can tell a long call from a lost kernel."""


class _Progress:
    """Send bytes done on the comm, at most every :data:`PROGRESS_SECONDS` (called from
    I/O threads)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.last = time.monotonic()  # a call shorter than that reports no progress
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            if not total or now - self.last < PROGRESS_SECONDS:
                return
            self.last = now
        self.comm.send({"progress": {"done": done, "total": total}})


def _text(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    return value


def save(shell: Any, args: dict[str, Any], progress: _Progress) -> dict[str, Any]:
    """Checkpoint this kernel (at most ``max_bytes`` new bytes, if given); :meth:`SaveResult.to_json`."""
    max_bytes = args.get("max_bytes")
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 0):
        raise TypeError("max_bytes must be a non-negative integer")
    return save_checkpoint(shell, CheckpointStore(_text(args, "store")), kernel_id=_text(args, "kernel_id"),
                           kernelspec=_text(args, "kernelspec"), notebook=_text(args, "notebook"),
                           progress=progress, max_bytes=max_bytes).to_json()


def restore(shell: Any, args: dict[str, Any], progress: _Progress) -> dict[str, Any]:
    """Restore a checkpoint into this (fresh) kernel; the report's JSON."""
    checkpoint_id = _text(args, "checkpoint_id")
    if checkpoint_id is None:
        raise TypeError("checkpoint_id is required")
    return restore_checkpoint(shell, checkpoint_id, CheckpointStore(_text(args, "store")),
                              progress=progress).to_json()


def rebuild(shell: Any, args: dict[str, Any], progress: _Progress) -> dict[str, Any]:
    """Re-run the cells that assigned what the last restore left out; :meth:`RebuildResult.to_json`
    (a cell that fails is in its ``failed``: the call itself succeeded)."""
    return rebuilding.rebuild(shell, current()).to_json()


CALLS: dict[str, Callable[[Any, dict[str, Any], _Progress], dict[str, Any]]] = {
    "save": save, "restore": restore, "rebuild": rebuild,
}


def register(shell: Any) -> None:
    """Answer the server's comm from now on (``load_ipython_extension`` calls it)."""
    import comm

    def on_open(channel: Any, message: dict[str, Any]) -> None:
        channel.close(answer(shell, message["content"].get("data") or {}, channel))

    comm.get_comm_manager().register_target(TARGET, on_open)


def answer(shell: Any, request: dict[str, Any], channel: Any) -> dict[str, Any]:
    """Run one call; never raises, so the server always gets an answer it can show."""
    call = CALLS.get(request.get("call"))  # type: ignore[arg-type]
    args = request.get("args") or {}
    if call is None or not isinstance(args, dict):
        return {"ok": False, "error": f"unknown call {str(request.get('call'))[:40]!r}", "kind": "UsageError"}
    done = threading.Event()

    def working() -> None:
        while not done.wait(WORKING_SECONDS):
            channel.send({"working": True})

    ticker = threading.Thread(target=working, name="gpuckpt-working", daemon=True)
    ticker.start()
    try:
        return {"ok": True, "result": call(shell, args, _Progress(channel))}
    except CheckpointError as e:
        return {"ok": False, "error": str(e), "kind": type(e).__name__}
    except Exception as e:  # a bug, not the user's doing: the server shows it, with where it happened
        where = traceback.format_exception(e)[-2].strip().splitlines()[0] if e.__traceback__ else ""
        return {"ok": False, "error": f"{type(e).__name__}: {e} ({where})", "kind": "InternalError"}
    finally:
        done.set()
        ticker.join()
