"""Entry points the Jupyter server evaluates in the kernel, with JSON in and out.

The server sends ``kernel_hooks.server_calls.save(...)`` (or ``restore``) as a user
expression of a silent execute request, so the call adds nothing to the user's history,
cell count or namespace. Each returns a JSON string: ``{"ok": ..., "result": ...}`` or
``{"ok": false, "error": ...}`` with the message the user should see.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from IPython.core.getipython import get_ipython
from IPython.display import display

from .errors import CheckpointError
from .restoring import restore_checkpoint
from .saving import save_checkpoint
from .store import CheckpointStore

PROGRESS_MIMETYPE = "application/vnd.jupyter-gpuckpt.progress+json"
"""Progress is displayed with this type; only the server's own client reads it."""


class _ProgressReport:
    """Display bytes done, at most twice a second (called from I/O threads)."""

    def __init__(self) -> None:
        self.last = 0.0
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            if not total or now - self.last < 0.5:
                return
            self.last = now
        display({PROGRESS_MIMETYPE: {"done": done, "total": total}}, raw=True)


def _answer(call: Any) -> str:
    try:
        return json.dumps({"ok": True, "result": call().to_json()})
    except CheckpointError as e:
        return json.dumps({"ok": False, "error": str(e), "kind": type(e).__name__})


def save(store: str | None = None, kernel_id: str | None = None, kernelspec: str | None = None,
         notebook: str | None = None) -> str:
    """Checkpoint this kernel; the result is :meth:`SaveResult.to_json`."""
    return _answer(lambda: save_checkpoint(get_ipython(), CheckpointStore(store), kernel_id=kernel_id,
                                           kernelspec=kernelspec, notebook=notebook,
                                           progress=_ProgressReport()))


def restore(checkpoint_id: str, store: str | None = None) -> str:
    """Restore ``checkpoint_id`` into this (fresh) kernel; the result is the report's JSON."""
    return _answer(lambda: restore_checkpoint(get_ipython(), checkpoint_id, CheckpointStore(store),
                                              progress=_ProgressReport()))
