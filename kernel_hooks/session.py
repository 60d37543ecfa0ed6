"""Per-kernel-process state of the hooks: the start-up baseline and the last checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field

from .kernel_state import Baseline


@dataclass
class KernelSession:
    """What the hooks remember in one kernel process.

    ``baseline`` is taken when the hooks load (at kernel start, from the kernelspec), so
    the environment variables and ``sys.path`` entries the user added can be told apart.
    ``last_checkpoint`` becomes the parent of the next checkpoint.
    """

    baseline: Baseline = field(default_factory=Baseline)
    last_checkpoint: str | None = None


_current: KernelSession | None = None


def current() -> KernelSession:
    """This process's session, created on first use."""
    global _current
    if _current is None:
        _current = KernelSession()
    return _current
