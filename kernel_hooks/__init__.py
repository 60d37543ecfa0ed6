"""In-kernel side of jupyter-gpuckpt: save a kernel's whole state and restore it elsewhere.

Load it in a kernel with ``%load_ext kernel_hooks`` (kernelspecs installed by
``jupyter gpuckpt install-kernelspec`` do this at start-up), then use ``%gpuckpt``. The
server side calls it with messages of its own (:mod:`.ipython.server_calls`). This package imports
nothing from ``jupyter_gpuckpt``; the store it writes to is ``gpuckpt_store``, shared with
the server. Importing it loads nothing else: the names below are imported on first use, and
numpy, torch, cupy or jax support only when the user's code has imported them.

Parts: :mod:`.saving` and :mod:`.restoring` (the API), :mod:`.codecs` (pickling, array
and tensor buffers), :mod:`.blobs` (chunked, hashed, parallel I/O), :mod:`.state` (session,
cells, RNG, libraries' settings, environment, devices), :mod:`.ipython` (magic and server calls).
"""

from __future__ import annotations

import importlib
from typing import Any

_API = {
    "save_checkpoint": ".saving", "restore_checkpoint": ".restoring",
    "SaveResult": ".report", "RestoreReport": ".report", "SkippedVariable": ".report", "RebuildResult": ".report",
    "KernelSession": ".state.session", "current": ".state.session",
    "CheckpointError": ".errors", "SaveError": ".errors", "RestoreError": ".errors", "IntegrityError": ".errors",
    "IncompatibleError": ".errors", "CheckpointNotFound": ".errors",
    "CheckpointStore": "gpuckpt_store", "CheckpointInfo": "gpuckpt_store", "list_checkpoints": "gpuckpt_store",
}
__all__ = [*sorted(_API), "load_ipython_extension"]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext kernel_hooks``: register ``%gpuckpt`` and the server's calls,
    and checkpoint on SIGTERM where the server asked for it (:mod:`.preemption`)."""
    from .ipython.magics import CheckpointMagics
    from .ipython.server_calls import register
    from .preemption import arm
    from .state.session import current

    ipython.register_magics(CheckpointMagics(ipython, current()))
    register(ipython)
    arm(ipython)

