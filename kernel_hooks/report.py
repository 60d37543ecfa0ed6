"""What a save or restore tells its caller: the results and the report the user reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass
class SkippedVariable:
    """A variable left out of a checkpoint, why, and the cells that assigned it."""

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
            f"Saved {self.variables} variables ({human_bytes(self.bytes_total)}, "
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
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cells_to_rerun(self) -> list[int]:
        return sorted({c for s in self.skipped for c in s.cells})

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "cells_to_rerun": self.cells_to_rerun}

    def __str__(self) -> str:
        lines = [
            f"Restored {len(self.restored)} variables ({human_bytes(self.nbytes)}) from "
            f"checkpoint {self.id} in {self.seconds:.1f} s."
        ]
        lines += [f"Warning: {w}" for w in self.warnings]
        if self.skipped:
            lines.append(f"Not restored, they could not be saved ({len(self.skipped)}):")
            lines += [f"  {s.line()}" for s in self.skipped]
        if self.cells_to_rerun:
            lines.append(f"Cells to re-run: {', '.join(map(str, self.cells_to_rerun))}")
        return "\n".join(lines)
