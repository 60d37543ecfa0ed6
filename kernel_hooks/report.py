"""What a save, restore or rebuild tells its caller: the results and the text the user reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuckpt_store import human_bytes


def error_text(error: BaseException) -> str:
    """An exception as a reason the user reads: its type and message, cut to 200 characters."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 200 else text[:197] + "..."


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _cells(cells: list[int]) -> str:
    return f"{'cell' if len(cells) == 1 else 'cells'} {', '.join(map(str, cells))}"


@dataclass
class SkippedVariable:
    """A variable left out of a checkpoint or of a restore, why, and the cells that
    assigned it."""

    name: str
    type: str
    reason: str
    cells: list[int]

    def line(self) -> str:
        rerun = f"; re-run cell(s) {', '.join(map(str, self.cells))}" if self.cells else ""
        return f"{self.name} ({self.type}): {self.reason}{rerun}"


@dataclass
class SaveResult:
    """The outcome of :func:`kernel_hooks.save_checkpoint`."""

    id: str
    parent: str | None
    variables: int
    skipped: list[SkippedVariable]
    bytes_total: int
    bytes_written: int
    seconds: float
    last_cell: int
    """The number of the last cell whose effects the checkpoint holds."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        lines = [
            f"Saved {_count(self.variables, 'variable')} ({human_bytes(self.bytes_total)}, "
            f"{human_bytes(self.bytes_written)} new) in {self.seconds:.1f} s."
        ]
        if self.skipped:
            lines.append(f"Not saved ({len(self.skipped)}):")
            lines += [f"  {s.line()}" for s in self.skipped]
        lines.append(self.id)
        return "\n".join(lines)


@dataclass
class RestoreReport:
    """The outcome of :func:`kernel_hooks.restore_checkpoint`, shown to the user."""

    id: str
    restored: list[str]
    nbytes: int
    skipped: list[SkippedVariable]
    """Left out when the checkpoint was saved."""
    lost: list[SkippedVariable] = field(default_factory=list)
    """Saved, but they could not be rebuilt here."""
    warnings: list[str] = field(default_factory=list)
    had_outputs: bool = False
    """The checkpointed kernel had outputs in ``Out``, which are not restored."""
    seconds: float = 0.0

    @property
    def cells_to_rerun(self) -> list[int]:
        return sorted({c for s in (*self.skipped, *self.lost) for c in s.cells})

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "cells_to_rerun": self.cells_to_rerun, "text": str(self)}

    def __str__(self) -> str:
        lines = [
            f"Restored {_count(len(self.restored), 'variable')} ({human_bytes(self.nbytes)}) from "
            f"checkpoint {self.id} in {self.seconds:.1f} s."
        ]
        lines += [f"Warning: {w}" for w in self.warnings]
        for missing, why in ((self.skipped, "saved"), (self.lost, "rebuilt")):
            if missing:
                lines.append(f"Not restored, they could not be {why} ({len(missing)}):")
                lines += [f"  {s.line()}" for s in missing]
        if self.had_outputs:
            lines.append("Outputs of earlier cells (Out, _) are not restored.")
        if self.cells_to_rerun:
            lines.append(f"Cells to re-run: {', '.join(map(str, self.cells_to_rerun))}")
        return "\n".join(lines)


@dataclass
class RebuildResult:
    """The outcome of :func:`kernel_hooks.rebuilding.rebuild`.

    .. versionadded:: 0.1
    """

    checkpoint: str | None
    """The checkpoint last restored, whose missing variables were rebuilt; None if none."""
    cells: list[int] = field(default_factory=list)
    """The cells re-run to the end, in order."""
    names: list[str] = field(default_factory=list)
    """The variables to rebuild that are now in the namespace."""
    missing: list[str] = field(default_factory=list)
    """Those still absent."""
    failed: dict[str, Any] | None = None
    """``{"cell": n, "error": "..."}`` for the cell that failed and stopped the rebuild."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.summary()}

    def summary(self) -> str:
        """One line for the user."""
        if self.checkpoint is None:
            return "Nothing to rebuild: no checkpoint was restored in this kernel."
        if self.failed is not None:
            ran = f"Re-ran {_cells(self.cells)}. " if self.cells else ""
            return (f"{ran}Cell {self.failed['cell']} failed while rebuilding: {self.failed['error']}; "
                    "stopped, later cells were not run.")
        if not self.cells:
            if self.missing:
                return f"No recorded cell assigns {', '.join(self.missing)}; nothing was re-run."
            return f"Nothing left to rebuild from checkpoint {self.checkpoint}."
        text = f"Re-ran {_cells(self.cells)}"
        if self.names:
            text += f": {', '.join(self.names)} {'is' if len(self.names) == 1 else 'are'} back"
        return f"{text}." + (f" Still missing: {', '.join(self.missing)}." if self.missing else "")
