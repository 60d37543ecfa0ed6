"""Which cells assigned which names, read from the code of the cells that ran.

This runs only when a checkpoint is taken (from ``In``), so it adds nothing to a cell's
run time; it tells the user which cells rebuild a variable that could not be saved.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable


class _Assignments(ast.NodeVisitor):
    """Names bound at a cell's top level (not inside functions or classes)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.names.add(node.id)

    def visit_alias(self, node: ast.alias) -> None:
        self.names.add((node.asname or node.name).split(".")[0])

    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.names.add(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define

    def visit_Lambda(self, node: ast.Lambda) -> None:
        return None


def assigned_names(code: str) -> set[str]:
    """Names a cell binds at top level; empty if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    visitor = _Assignments()
    visitor.visit(tree)
    return visitor.names


def cells_assigning(history: list[str], names: Iterable[str]) -> dict[str, list[int]]:
    """For each of ``names``, the execution counts of the cells that assigned it.

    ``history`` is IPython's ``In``: entry ``n`` is the (transformed) code of cell ``n``.
    """
    wanted = set(names)
    found: dict[str, list[int]] = {name: [] for name in wanted}
    if not wanted:
        return found  # every save asks, mostly for nothing: 200 cells take 50 ms to parse
    for count, code in enumerate(history):
        if not code or count == 0:
            continue
        for name in assigned_names(code) & wanted:
            found[name].append(count)
    return found
