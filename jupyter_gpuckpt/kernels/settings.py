"""What the server's parts need of the extension's traitlets, in one plain record: the parts
below the extension never read traitlets themselves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Settings:
    """Store, retention, deadlines and release mode (see :class:`~..extension.app.GPUCheckpointApp`)."""

    store_root: Path
    keep_checkpoints: int = 0
    ready_timeout: float = 60.0
    stall_timeout: float = 60.0
    rebuild_skipped: str = "ask"
    failover_grace: float = 30.0
    release_mode: str = "park"
    """How a suspend frees GPUs unless asked otherwise: "park" where it can, else "suspend"."""
    release_mode_of: Callable[[str], str] | None = None
    """A kernel's release mode as its effective policy says (the server's, with what its
    kernelspec may change); None: :attr:`release_mode` for every kernel."""
    write_behind_bandwidth: float = 0.0
