"""What a save, restore or rebuild tells its caller: the results and the text the user reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuckpt_store import human_bytes

from .state.cell_effects import KINDS


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
    """A variable left out of a checkpoint or of a restore, why, and the cells that rebuild
    it: the last that assigned it and those that make what that one reads and the checkpoint
    lacks (:func:`kernel_hooks.state.lineage.cells_to_rebuild`)."""

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
    """The outcome of :func:`kernel_hooks.restore_checkpoint`, shown to the user.

    Each variable of the checkpoint comes back as one of three kinds, which the text counts:
    restored, of which some are *rebuilt* (a live part of theirs started again: a pool's
    workers, a widget's comm, a dask cluster), and not restored (not saved, lost here, or
    rebuilt but a live part of theirs could not be started again), each with the reason and
    the cells that make it again.

    .. versionchanged:: 0.2
       ``started_again`` and ``not_set_up``; ``counts`` in :meth:`to_json`.
    """

    id: str
    restored: list[str]
    """The variables in the namespace now, as saved: ``started_again`` among them."""
    nbytes: int
    skipped: list[SkippedVariable]
    """Left out when the checkpoint was saved."""
    lost: list[SkippedVariable] = field(default_factory=list)
    """Saved, but they could not be rebuilt here."""
    warnings: list[str] = field(default_factory=list)
    had_outputs: bool = False
    """The checkpointed kernel had outputs in ``Out``, which are not restored."""
    seconds: float = 0.0
    started_again: list[str] = field(default_factory=list)
    """Of ``restored``, those with a live part started again: the text's *rebuilt* (the key
    ``rebuilt`` that the server adds to its copy of the report is what ``%gpuckpt rebuild`` did)."""
    not_set_up: list[SkippedVariable] = field(default_factory=list)
    """Unpickled, but a live part of theirs could not be started again (a scheduler that does
    not answer, a log file's folder that is gone): taken out of the namespace, for rebuild to make."""

    @property
    def not_restored(self) -> list[SkippedVariable]:
        return [*self.skipped, *self.lost, *self.not_set_up]

    @property
    def cells_to_rerun(self) -> list[int]:
        return sorted({c for s in self.not_restored for c in s.cells})

    def to_json(self) -> dict[str, Any]:
        counts = {"restored": len(self.restored), "rebuilt": len(self.started_again),
                  "not_restored": len(self.not_restored)}
        return {**asdict(self), "counts": counts, "cells_to_rerun": self.cells_to_rerun, "text": str(self)}

    def __str__(self) -> str:
        rebuilt = f"{len(self.started_again)} rebuilt: {_names(self.started_again)}; " if self.started_again else ""
        missing = len(self.not_restored)
        lines = [
            f"Restored {_count(len(self.restored), 'variable')} ({rebuilt}{human_bytes(self.nbytes)}) from "
            f"checkpoint {self.id} in {self.seconds:.1f} s{f'; {missing} not restored' if missing else ''}."
        ]
        lines += [f"Warning: {w}" for w in self.warnings]
        for kind, why in ((self.skipped, "saved"), (self.lost, "rebuilt"), (self.not_set_up, "set up again")):
            if kind:
                lines.append(f"Not restored, they could not be {why} ({len(kind)}):")
                lines += [f"  {s.line()}" for s in kind]
        if self.had_outputs:
            lines.append("Outputs of earlier cells (Out, _) are not restored.")
        if self.cells_to_rerun:
            lines.append(f"Cells to re-run: {', '.join(map(str, self.cells_to_rerun))}")
        return "\n".join(lines)


_NAMED = 8
"""How many rebuilt variables the report's first line names."""


def _names(names: list[str]) -> str:
    if len(names) <= _NAMED:
        return ", ".join(names)
    return f"{', '.join(names[:_NAMED])} and {len(names) - _NAMED} more"


@dataclass
class CellEffect:
    """Something re-running a cell does beyond binding names.

    .. versionadded:: 0.2
    """

    kind: str
    """A key of :data:`kernel_hooks.state.cell_effects.KINDS`: ``rng``, ``files``,
    ``network``, ``processes`` or ``in_place``."""
    what: str
    """The call or assignment: ``torch.manual_seed``, ``model.fit(...)``."""


@dataclass
class PlannedCell:
    """One cell a rebuild re-runs, and why.

    .. versionadded:: 0.2
    """

    cell: int
    rebuilds: list[str]
    """The missing variables it assigns."""
    feeds: list[str] = field(default_factory=list)
    """Names it makes for later cells of the plan that the namespace lacks (removed after)."""
    reassigns: list[str] = field(default_factory=list)
    """Names in the namespace it assigns again: they keep their restored objects (unless kept)."""
    made_from: dict[str, list[str]] = field(default_factory=dict)
    """Rebuilt names it makes from names it re-assigns first: they may hold the cell's new
    objects, which are discarded, not the restored ones."""
    effects: list[CellEffect] = field(default_factory=list)
    unbound: list[str] = field(default_factory=list)
    """Names it reads that neither the namespace nor an earlier cell has: it will fail."""

    def lines(self, keep: bool) -> list[str]:
        what = [", ".join(self.rebuilds)] if self.rebuilds else []
        if self.feeds:
            what.append(f"{', '.join(self.feeds)}, for the cells after it (removed afterwards)")
        lines = [f"  cell {self.cell}: {'; '.join(what)}"]
        if self.reassigns:
            fate = "replaced by the cell's new ones (--keep)" if keep else "kept as restored"
            lines.append(f"    also assigns {', '.join(self.reassigns)}: {fate}")
        lines += [f"    {name} is made from the new {', '.join(sources)} of this cell, not the restored one"
                  for name, sources in self.made_from.items() if not keep]
        lines += [f"    {KINDS[e.kind]}: {e.what}" for e in self.effects]
        if self.unbound:
            lines.append(f"    reads {', '.join(self.unbound)}, which nothing defines: it will fail")
        return lines


@dataclass
class RebuildPlan:
    """The fewest recorded cells that rebuild what the last restore left out, and what
    running them does: told before they run.

    .. versionadded:: 0.2
    """

    names: list[str]
    """The variables to rebuild: left out and not in the namespace now."""
    cells: list[PlannedCell] = field(default_factory=list)
    """In the order they run (their execution counts)."""
    needs: dict[str, list[int]] = field(default_factory=dict)
    """The cells each name needs."""
    unresolved: list[str] = field(default_factory=list)
    """Names no recorded cell assigns."""

    @property
    def numbers(self) -> list[int]:
        return [c.cell for c in self.cells]

    def text(self, keep: bool = False) -> str:
        if not self.cells:
            return ""
        lines = [f"Rebuilding {', '.join(n for n in self.names if n not in self.unresolved)}: "
                 f"re-running {_cells(self.numbers)}."]
        for cell in self.cells:
            lines += cell.lines(keep)
        if any(e.kind == "rng" for c in self.cells for e in c.effects):
            lines.append("The random number generators are put back as restored afterwards.")
        if self.unresolved:
            lines.append(f"No recorded cell assigns {', '.join(self.unresolved)}.")
        return "\n".join(lines)


@dataclass
class RebuildResult:
    """The outcome of :func:`kernel_hooks.rebuilding.rebuild`.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
       A restored variable a cell assigns again keeps its restored object (``discarded``)
       unless asked (``kept``); names the checkpoint did not have are removed again.
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
    plan: RebuildPlan | None = None
    dry_run: bool = False
    """Only planned: nothing ran."""
    discarded: dict[str, int] = field(default_factory=dict)
    """Names in the namespace that a cell assigned again, given their objects back, with the cell."""
    kept: dict[str, int] = field(default_factory=dict)
    """Those that keep what the cell assigned instead, as asked (``keep``)."""
    removed: list[str] = field(default_factory=list)
    """Names the cells made that the namespace did not have, removed again."""
    rng_restored: bool = False
    """The cells changed the random number generators' states, which were put back."""
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.summary()}

    def summary(self) -> str:
        """One line for the user."""
        if self.checkpoint is None:
            return "Nothing to rebuild: no checkpoint was restored in this kernel."
        if self.dry_run:
            return (self.plan.text() if self.plan else "") or self._nothing()
        if self.failed is not None:
            ran = f"Re-ran {_cells(self.cells)}. " if self.cells else ""
            text = (f"{ran}Cell {self.failed['cell']} failed while rebuilding: {self.failed['error']}; "
                    "stopped, later cells were not run.")
        elif not self.cells:
            return self._nothing()
        else:
            text = f"Re-ran {_cells(self.cells)}"
            if self.names:
                text += f": {', '.join(self.names)} {'is' if len(self.names) == 1 else 'are'} back"
            text += "." + (f" Still missing: {', '.join(self.missing)}." if self.missing else "")
        return " ".join([text, *self._aftermath(), *(f"Warning: {w}" for w in self.warnings)])

    def _nothing(self) -> str:
        if self.missing:
            return f"No recorded cell assigns {', '.join(self.missing)}; nothing was re-run."
        return f"Nothing left to rebuild from checkpoint {self.checkpoint}."

    def _aftermath(self) -> list[str]:
        said = []
        if self.discarded:
            them = "it" if len(self.discarded) == 1 else "them"
            said.append(f"Kept the restored {', '.join(self.discarded)}: what {_by(self.discarded)} assigned "
                        f"to {them} was discarded.")
        if self.kept:
            said.append(f"Replaced the restored {', '.join(self.kept)} with what {_by(self.kept)} assigned, "
                        "as asked.")
        if self.removed:
            said.append(f"Removed {', '.join(self.removed)}, which the checkpoint did not have.")
        if self.rng_restored:
            said.append("Put the random number generators back as restored.")
        return said


def _by(cells: dict[str, int]) -> str:
    return _cells(sorted(set(cells.values())))
