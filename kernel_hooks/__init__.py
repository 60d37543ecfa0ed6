"""In-kernel side of jupyter-gpuckpt: save a kernel's whole state and restore it elsewhere.

Load it in a kernel with ``%load_ext kernel_hooks`` (kernelspecs installed by
``jupyter gpuckpt install-kernelspec`` do this at start-up), then use ``%gpuckpt``. The
server side calls the Python API below. This package imports nothing from
``jupyter_gpuckpt`` and loads numpy, torch, cupy or jax support only when the user's code
has imported them.
"""

from __future__ import annotations

from typing import Any

from .errors import CheckpointError, IncompatibleError, IntegrityError, RestoreError, SaveError
from .listing import CheckpointInfo, list_checkpoints
from .report import RestoreReport, SaveResult, SkippedVariable
from .restoring import restore_checkpoint
from .saving import save_checkpoint
from .session import KernelSession, current
from .store import CheckpointStore

__all__ = [
    "CheckpointError", "CheckpointInfo", "CheckpointStore", "IncompatibleError", "IntegrityError",
    "KernelSession", "RestoreError", "RestoreReport", "SaveError", "SaveResult", "SkippedVariable",
    "list_checkpoints", "load_ipython_extension", "restore_checkpoint", "save_checkpoint",
]


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext kernel_hooks``: register ``%gpuckpt`` and note the baseline."""
    from .magics import CheckpointMagics

    ipython.register_magics(CheckpointMagics(ipython, current()))
