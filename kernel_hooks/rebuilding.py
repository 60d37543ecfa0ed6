"""Rebuilding what a restore did not bring back, by re-running the cells that assigned it.

Behind ``%gpuckpt rebuild`` and the server's ``rebuild`` call. The cells are the restored
history's (``In``), run in order against the restored namespace without entering the
history; the first that fails stops the rebuild, so no later cell runs on what it left.
"""

from __future__ import annotations

from typing import Any

from .report import RebuildResult, error_text
from .state.session import KernelSession


def rebuild(shell: Any, session: KernelSession) -> RebuildResult:
    """Re-run the cells that assigned the variables the last restore left out.

    After a rebuild whose cells all ran, the session forgets those variables: another
    rebuild has nothing to do. After a failure they stay, to rebuild once it is fixed.

    Parameters
    ----------
    shell
        The kernel's ``InteractiveShell``; the cells run in its namespace.
    session
        The process's :class:`KernelSession`, which holds the last restore.

    .. versionadded:: 0.1
    """
    report = session.last_restore
    if report is None:
        return RebuildResult(checkpoint=None)
    wanted = session.to_rebuild
    cells = sorted({cell for variable in wanted for cell in variable.cells})
    history = shell.history_manager.input_hist_parsed
    ran: list[int] = []
    failed: dict[str, Any] | None = None
    for cell in cells:
        code = history[cell] if cell < len(history) else ""
        if not code:
            failed = {"cell": cell, "error": "its code is not in this kernel's history"}
            break
        outcome = shell.run_cell(code, store_history=False)
        error = outcome.error_before_exec or outcome.error_in_exec
        if error is not None:
            failed = {"cell": cell, "error": error_text(error)}
            break
        ran.append(cell)
    if failed is None and ran:
        session.to_rebuild = []
    return RebuildResult(
        checkpoint=report.id, cells=ran,
        names=[v.name for v in wanted if v.name in shell.user_ns],
        missing=[v.name for v in wanted if v.name not in shell.user_ns],
        failed=failed,
    )
