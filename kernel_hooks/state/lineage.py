"""Which recorded cells rebuild a name: its lineage, traced back through the cells that ran.

As ElasticNotebook and Kishu do, at the granularity of cells: a name comes from the last
cell before its use that bound it; what that cell reads comes from the namespace if it is
there (a restored value is used as it is), else from the last cell before it that bound it,
and so on. The cells found are the fewest that rebuild the names, in the order they ran; a
cell that only ever touched a name, before the one that made it last, is not among them.

Conservative where code cannot tell: a cell that may bind names it never spells (a star
import, ``%run``, ``exec``) is taken as the source of a name no cell binds by name; a
function's body counts for the cells that call it, or pass it to a call (what it reads, the
globals it assigns, its effects), not for one that only names it (``f = make``); a cell that
deletes a name is not its source.
"""

from __future__ import annotations

import bisect
import builtins
from collections.abc import Collection, Iterable, Sequence

from ..report import CellEffect, PlannedCell, RebuildPlan
from .cell_effects import call_effects, in_place
from .history import CallSite, CellCode, FunctionCode, Mutation, analyse

_BUILTINS = frozenset(dir(builtins))


class _History:
    """The analysed cells of ``In``, with an index of which cells bind each name."""

    def __init__(self, history: Sequence[str]) -> None:
        self.cells: list[CellCode] = [analyse(code) if count and code else CellCode()
                                      for count, code in enumerate(history)]
        self.binders: dict[str, list[int]] = {}
        self.opaque: list[int] = []
        for count, cell in enumerate(self.cells):
            for name in cell.binds:
                self.binders.setdefault(name, []).append(count)
            if cell.opaque:
                self.opaque.append(count)
            # a function that assigns globals binds them in the cell that calls it
            for function in self.functions(cell.called, count + 1):
                for name in function.binds - cell.binds:
                    self.binders.setdefault(name, []).append(count)

    def binder(self, name: str, before: int, explicit: bool = False) -> int | None:
        """The last cell before ``before`` that bound ``name``; else the last one that may have."""
        cells = self.binders.get(name, [])
        index = bisect.bisect_left(cells, before)
        if index:
            return cells[index - 1]
        if explicit:
            return None
        index = bisect.bisect_left(self.opaque, before)
        return self.opaque[index - 1] if index else None

    def function(self, name: str, before: int) -> FunctionCode | None:
        """What ``name`` does when called, if the cell that last bound it defined it."""
        cell = self.binder(name, before, explicit=True)
        return self.cells[cell].functions.get(name) if cell is not None else None

    def functions(self, names: Iterable[str], before: int) -> list[FunctionCode]:
        """The functions ``names`` are, and those they use in turn."""
        found: dict[str, FunctionCode] = {}
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            function = self.function(name, before)
            if function is not None:
                found[name] = function
                todo += function.reads
        return list(found.values())

    def aliases(self, before: int) -> dict[str, str]:
        """What each import alias bound by the cells before ``before`` stands for."""
        aliases: dict[str, str] = {}
        for cell in self.cells[:before]:
            aliases.update(cell.imports)
            for name in cell.binds - cell.imports.keys():
                aliases.pop(name, None)
        return aliases

    def lineage(self, name: str, available: Collection[str]) -> tuple[set[int], dict[int, set[str]]]:
        """The cells that rebuild ``name``, and for each the names it reads that nothing has."""
        needed: set[int] = set()
        unbound: dict[int, set[str]] = {}
        seen: set[tuple[str, int]] = set()
        todo = [(name, len(self.cells))]
        while todo:
            wanted, before = todo.pop()
            if (wanted, before) in seen:
                continue
            seen.add((wanted, before))
            if wanted in available:
                continue
            cell = self.binder(wanted, before, explicit=wanted in _BUILTINS)  # len is no star import's
            if cell is None:
                if wanted != name and wanted not in _BUILTINS and before < len(self.cells):
                    unbound.setdefault(before, set()).add(wanted)
                continue
            if cell not in needed:
                needed.add(cell)
                todo += [(read, cell) for read in self.inputs(cell)]
        return needed, unbound

    def inputs(self, count: int) -> set[str]:
        """What cell ``count`` reads, with what the functions it calls read when they run."""
        cell = self.cells[count]
        called = {read for function in self.functions(cell.called, count + 1) for read in function.reads}
        return cell.reads | (called - cell.binds)

    def effects(self, count: int, restored: set[str]) -> list[CellEffect]:
        """What re-running cell ``count`` does beyond binding names."""
        cell = self.cells[count]
        aliases = self.aliases(count + 1)
        used = self.functions(cell.called, count + 1)
        calls: list[CallSite] = [*cell.calls, *(c for f in used for c in f.calls)]
        mutations: list[Mutation] = [*cell.mutations, *(m for f in used for m in f.mutations)]
        found: dict[tuple[str, str], None] = {}
        for call in calls:
            found.update(dict.fromkeys(call_effects(call, aliases)))
        for mutation in mutations:
            what = in_place(mutation, restored, aliases)
            if what is not None:
                found[("in_place", what)] = None
        return [CellEffect(kind, what) for kind, what in found]


def plan_rebuild(history: Sequence[str], names: Iterable[str], available: Collection[str]) -> RebuildPlan:
    """The fewest recorded cells that rebuild ``names``, in order, and what running them does.

    Parameters
    ----------
    history
        IPython's ``In``: entry ``n`` is the (transformed) code of cell ``n``.
    names
        The variables to rebuild (not in the namespace).
    available
        The names the namespace has: their values are used as they are, not rebuilt.

    .. versionadded:: 0.2
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return RebuildPlan(names=[])
    cells = _History(history)
    have = set(available) - set(wanted)
    needs, unbound = _needs(cells, wanted, have)
    order = sorted({count for counts in needs.values() for count in counts})
    planned = []
    for position, count in enumerate(order):
        cell = cells.cells[count]
        later = set().union(*(cells.inputs(c) for c in order[position + 1:]))
        reassigns = sorted(cell.binds & have)
        rebuilds = sorted(cell.binds & set(wanted), key=wanted.index)
        made_from = {name: sorted(cell.derived.get(name, set()) & set(reassigns)) for name in rebuilds}
        planned.append(PlannedCell(
            cell=count, rebuilds=rebuilds, feeds=sorted((cell.binds & later) - have - set(wanted)),
            reassigns=reassigns, made_from={name: sources for name, sources in made_from.items() if sources},
            effects=cells.effects(count, have), unbound=sorted(unbound.get(count, set())),
        ))
    return RebuildPlan(names=wanted, cells=planned, needs=needs,
                       unresolved=[name for name in wanted if not needs[name]])


def cells_to_rebuild(history: Sequence[str], names: Iterable[str], available: Collection[str]
                     ) -> dict[str, list[int]]:
    """For each of ``names``, the cells that rebuild it (as :func:`plan_rebuild` plans them).

    .. versionadded:: 0.2
    """
    wanted = list(names)
    if not wanted:
        return {}  # every save asks, mostly for nothing: 200 cells take 50 ms to parse
    return _needs(_History(history), wanted, set(available) - set(wanted))[0]


def _needs(cells: _History, wanted: list[str], have: set[str]) -> tuple[dict[str, list[int]], dict[int, set[str]]]:
    """The cells each of ``wanted`` needs, and the names cells read that nothing has."""
    needs: dict[str, list[int]] = {}
    unbound: dict[int, set[str]] = {}
    for name in wanted:
        needed, missing_inputs = cells.lineage(name, have)
        needs[name] = sorted(needed)
        for count, inputs in missing_inputs.items():
            unbound.setdefault(count, set()).update(inputs)
    return needs, unbound
