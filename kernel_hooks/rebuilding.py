"""Rebuilding what a restore did not bring back, by re-running the fewest recorded cells.

Behind ``%gpuckpt rebuild`` and the server's ``rebuild`` call. The cells are the restored
history's (``In``), planned by :func:`~kernel_hooks.state.lineage.plan_rebuild` and run in
order against the restored namespace without entering the history; the first that fails
stops the rebuild, so no later cell runs on what it left.

A re-run cell runs whole, but only the names to rebuild come out of it: after each cell the
names the namespace had get their objects back (unless ``keep``), and once the cells are done
the names they made that the namespace did not have are removed and the random number
generators are put back as they were. What a cell changed in place, or did outside the
kernel, cannot be undone: the plan says so before it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .report import PlannedCell, RebuildPlan, RebuildResult, error_text
from .state import compiler_globals, rng
from .state.lineage import plan_rebuild
from .state.namespace import user_variables
from .state.session import KernelSession

_ABSENT = object()


def rebuild(shell: Any, session: KernelSession, *, keep: bool = False, dry_run: bool = False,
            announce: Callable[[RebuildPlan], None] | None = None) -> RebuildResult:
    """Re-run the fewest cells that rebuild the variables the last restore left out.

    After a rebuild whose cells all ran, the session forgets those variables: another
    rebuild has nothing to do. After a failure they stay, to rebuild once it is fixed.

    Parameters
    ----------
    shell
        The kernel's ``InteractiveShell``; the cells run in its namespace.
    session
        The process's :class:`KernelSession`, which holds the last restore.
    keep
        Names the namespace had keep what the cells assign to them instead of their objects
        (the result warns).
    dry_run
        Only plan: the result holds the plan, and nothing runs.
    announce
        Called with the plan before any cell runs (the magic prints it).

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
       ``keep``, ``dry_run`` and ``announce``; the fewest cells; restored names, the
       namespace's other names and the random number generators stay as they were.
    """
    report = session.last_restore
    if report is None:
        return RebuildResult(checkpoint=None)
    namespace = shell.user_ns
    wanted = [v.name for v in session.to_rebuild if v.name not in namespace]
    planned = plan_rebuild(shell.history_manager.input_hist_parsed, wanted, available=namespace.keys())
    result = RebuildResult(checkpoint=report.id, plan=planned, dry_run=dry_run, missing=wanted)
    if dry_run:
        return result
    if not planned.names:
        session.to_rebuild = []
        return result
    if not planned.cells:
        return result
    if announce is not None:
        announce(planned)
    _Run(shell, planned, keep, result).all()
    if result.failed is None:
        session.to_rebuild = []
    return result


class _Run:
    """One rebuild's cells, run against a snapshot of the namespace they must not change."""

    def __init__(self, shell: Any, planned: RebuildPlan, keep: bool, result: RebuildResult) -> None:
        self.shell = shell
        self.namespace: dict[str, Any] = shell.user_ns
        self.planned = planned
        self.keep = keep
        self.result = result
        self.before = dict(self.namespace)
        self.users = set(user_variables(self.before, shell.user_ns_hidden))

    def all(self) -> None:
        history = list(self.shell.history_manager.input_hist_parsed)
        states = rng.capture()
        try:
            for cell in self.planned.cells:
                code = history[cell.cell] if cell.cell < len(history) else ""
                if not code:
                    self.result.failed = {"cell": cell.cell, "error": "its code is not in this kernel's history"}
                    return
                try:
                    outcome = self.shell.run_cell(code, store_history=False)
                finally:
                    self.settle(cell)
                error = outcome.error_before_exec or outcome.error_in_exec
                if error is not None:
                    self.result.failed = {"cell": cell.cell, "error": error_text(error)}
                    return
                self.result.cells.append(cell.cell)
        finally:
            self.tidy()
            if rng.capture() != states:
                rng.apply(states)
                self.result.rng_restored = True

    def settle(self, cell: PlannedCell) -> None:
        """After a cell: the names the namespace had get their objects back, or, with
        ``keep``, keep what the cell assigned to them (not what it deleted)."""
        for name, value in self.before.items():
            now = self.namespace.get(name, _ABSENT)
            if now is value:
                continue
            if self.keep and now is not _ABSENT and name in self.users:
                self.before[name] = now
                self.result.kept[name] = cell.cell
                self.result.discarded.pop(name, None)
                continue
            self.namespace[name] = value
            if name in self.users:
                self.result.discarded[name] = cell.cell

    def tidy(self) -> None:
        """Once the cells are done: remove what they made that was neither there nor wanted,
        and say what came back and what it may hold."""
        wanted = set(self.planned.names)
        made = [name for name in self.namespace if name not in self.before and name not in wanted]
        made_by_user = user_variables({name: self.namespace[name] for name in made}, self.shell.user_ns_hidden)
        # what a compiler installed for the cells' compiled code stays: that code looks it up
        generated = compiler_globals.generated({name: self.namespace[name] for name in made})
        for name in made:
            if name not in generated:
                del self.namespace[name]
        result = self.result
        result.removed = sorted(made_by_user)
        result.names = [name for name in self.planned.names if name in self.namespace]
        result.missing = [name for name in self.planned.names if name not in self.namespace]
        if result.kept:
            result.warnings.append(f"{', '.join(result.kept)} now hold what the cells assigned, not what was "
                                   "restored.")
        for cell in self.planned.cells:
            for name, sources in cell.made_from.items():
                discarded = [s for s in sources if result.discarded.get(s) == cell.cell]
                if discarded and name in result.names:
                    result.warnings.append(f"{name} was made in cell {cell.cell} from the {', '.join(discarded)} "
                                           "that cell made, which was discarded: it may not refer to the "
                                           f"restored {', '.join(discarded)}.")
