"""The calls the Jupyter server makes into the kernel, JSON in and out, as messages of their own.

The server sends a :data:`~gpuckpt_store.protocol.REQUEST` on the shell channel, its content
``{"call": NAME, "args": {...}}``; the kernel's shell runs it as it runs a cell (one after the
other), inside what a cell runs in, and publishes on IOPub, the request as parent,
:data:`~gpuckpt_store.protocol.PROGRESS` messages (``{"progress": {"done": ..., "total":
...}}``, or ``{"working": true}``) while it works, then one :data:`~gpuckpt_store.protocol.REPLY`:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": ..., "kind": ...}`` with the message
the user should see. Being types of their own, not comms, the server leaves them out of the
user's activity and a user's widgets in. Nothing is run as source code, and nothing enters the
user's history, cell count or namespace.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from gpuckpt_store import CheckpointError, CheckpointStore, protocol

from .. import rebuilding
from ..restoring import restore_checkpoint
from ..saving import save_checkpoint
from ..state.session import current
from .banner import keep_one_tip

TOPIC = b"gpuckpt"
"""The IOPub topic of a call's messages (subscribers take every topic; it names the sender)."""
PROGRESS_SECONDS = 0.5
"""At most one progress message this often."""
WORKING_SECONDS = 5.0
"""A call that reports no bytes (importing libraries, unpickling, running cells) still says
it is working this often, so the server can tell a long call from a lost kernel."""


class _Channel:
    """Where one request's messages go: the kernel's IOPub, the request as their parent.

    ipykernel's IOPub socket sends from a thread of its own, so the working ticker and the
    I/O threads reporting progress may send too, as comms do.
    """

    def __init__(self, kernel: Any, request: dict[str, Any]) -> None:
        self.kernel = kernel
        self.request = request

    def send(self, data: dict[str, Any]) -> None:
        """Progress, or that the call is working."""
        self._publish(protocol.PROGRESS, data)

    def reply(self, answer: dict[str, Any]) -> None:
        try:
            self._publish(protocol.REPLY, answer)
        except Exception as e:  # an idle kernel without a reply means "no hooks": the server would call again
            self._publish(protocol.REPLY, {"ok": False, "error": f"the answer could not be sent: {e}",
                                           "kind": "InternalError"})

    def _publish(self, msg_type: str, content: dict[str, Any]) -> None:
        self.kernel.session.send(self.kernel.iopub_socket, msg_type, content, parent=self.request, ident=TOPIC)


class _Progress:
    """Send bytes done on the call's channel, at most every :data:`PROGRESS_SECONDS` (called
    from I/O threads)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.last = time.monotonic()  # a call shorter than that reports no progress
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            if not total or now - self.last < PROGRESS_SECONDS:
                return
            self.last = now
        self.channel.send({"progress": {"done": done, "total": total}})


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
    """Restore a checkpoint into this (fresh) kernel; the report's JSON. :data:`~gpuckpt_store.protocol.COMMS_KEPT`:
    the notebook's page kept the comms of the kernel checkpointed (a resume)."""
    checkpoint_id = _text(args, "checkpoint_id")
    if checkpoint_id is None:
        raise TypeError("checkpoint_id is required")
    comms_kept = args.get(protocol.COMMS_KEPT, False)
    if not isinstance(comms_kept, bool):
        raise TypeError(f"{protocol.COMMS_KEPT} must be true or false")
    return restore_checkpoint(shell, checkpoint_id, CheckpointStore(_text(args, "store")),
                              progress=progress, comms_kept=comms_kept).to_json()


def rebuild(shell: Any, args: dict[str, Any], progress: _Progress) -> dict[str, Any]:
    """Re-run the fewest cells that rebuild what the last restore left out; :meth:`RebuildResult.to_json`
    (a cell that fails is in its ``failed``: the call itself succeeded). ``dry_run``: only its
    ``plan``; ``keep``: restored names keep what the cells assign to them."""
    flags = {name: args.get(name, False) for name in ("keep", "dry_run")}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be true or false")
    return rebuilding.rebuild(shell, current(), **flags).to_json()


CALLS: dict[str, Callable[[Any, dict[str, Any], _Progress], dict[str, Any]]] = {
    "save": save, "restore": restore, "rebuild": rebuild,
}


def register(shell: Any) -> None:
    """Answer the server's requests from now on (``load_ipython_extension`` calls it, or the
    server's :data:`~gpuckpt_store.protocol.REGISTER` in a kernel that did not load the hooks).

    The handler goes into the kernel's ``shell_handlers``, as ipykernel puts its comm handlers
    there: ipykernel then reports the kernel busy and idle around it, with the request as
    parent. IPython outside a kernel (a terminal) has no server to answer.
    """
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return
    keep_one_tip(shell)  # the server asks for kernel_info before each call

    def on_request(stream: Any, ident: list[bytes], request: dict[str, Any]) -> None:
        channel = _Channel(kernel, request)
        channel.reply(answer(shell, request["content"], channel))

    kernel.shell_handlers[protocol.REQUEST] = on_request


def answer(shell: Any, request: dict[str, Any], channel: Any) -> dict[str, Any]:
    """Run one call; never raises, so the server always gets an answer it can show.

    The call runs in what IPython sets up around a cell: ``get_ipython`` in builtins (pandas,
    imported by a restore, asks it whether it runs in a kernel or a terminal) and the
    kernel's display hook. ``channel.send(data)`` takes its progress messages.
    """
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
        with shell.builtin_trap, shell.display_trap:
            return {"ok": True, "result": call(shell, args, _Progress(channel))}
    except KeyboardInterrupt:  # the user interrupted the kernel during the call
        return {"ok": False, "error": "the kernel was interrupted during the call", "kind": "KeyboardInterrupt"}
    except CheckpointError as e:
        return {"ok": False, "error": str(e), "kind": type(e).__name__}
    except Exception as e:  # a bug, not the user's doing: the server shows it, with where it happened
        where = traceback.format_exception(e)[-2].strip().splitlines()[0] if e.__traceback__ else ""
        return {"ok": False, "error": f"{type(e).__name__}: {e} ({where})", "kind": "InternalError"}
    finally:
        done.set()
        ticker.join()
