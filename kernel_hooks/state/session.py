"""Per-kernel-process state of the hooks: the start-up baseline, the last checkpoint and
the last restore."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .kernel_state import Baseline

if TYPE_CHECKING:
    from ..report import RestoreReport, SkippedVariable


@dataclass
class KernelSession:
    """What the hooks remember in one kernel process.

    ``baseline`` is taken when the hooks load (at kernel start, from the kernelspec), so
    the environment variables and ``sys.path`` entries the user added can be told apart.
    ``last_checkpoint`` becomes the parent of the next checkpoint. ``last_restore`` is the
    report of the last restore into this process, and ``to_rebuild`` what it did not bring
    back that ``%gpuckpt rebuild`` has yet to re-create.
    """

    baseline: Baseline = field(default_factory=Baseline)
    last_checkpoint: str | None = None
    last_restore: RestoreReport | None = None
    to_rebuild: list[SkippedVariable] = field(default_factory=list)

    def restored(self, report: RestoreReport) -> None:
        """Called by :func:`~kernel_hooks.restore_checkpoint` once the namespace holds the
        checkpoint's variables."""
        self.last_restore = report
        self.to_rebuild = report.not_restored


_current: KernelSession | None = None


def current() -> KernelSession:
    """This process's session, created on first use."""
    global _current
    if _current is None:
        _current = KernelSession()
    return _current
