"""The project's import graph, read from the source (every import, TYPE_CHECKING and
function-level ones included): ``python -m import_graph`` (from ``tests/``) prints it by
package and exits 1 on a cycle, between modules or between the server side's packages.

Usage: ``python -m import_graph [--modules]``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpuckpt_store", "kernel_hooks", "jupyter_gpuckpt")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project's modules that ``name`` imports (``from pkg import mod`` counts as ``mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, set(known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def server_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the server side's parts: its subpackages, and its top-level modules."""
    def part(module: str) -> str | None:
        parts = module.split(".")
        if parts[0] != "jupyter_gpuckpt" or len(parts) < 2:
            return None
        return ".".join(parts[:2])

    between: dict[str, set[str]] = {}
    for source, targets in edges.items():
        if (here := part(source)) is None:
            continue
        between.setdefault(here, set()).update(
            there for t in targets if (there := part(t)) is not None and there != here)
    return between


def show(edges: dict[str, set[str]]) -> Iterable[str]:
    for source in sorted(edges):
        yield f"{source} -> {', '.join(sorted(edges[source])) or '-'}"


def main(argv: list[str]) -> int:
    edges = graph()
    parts = server_packages(edges)
    print("\n".join(show(edges if "--modules" in argv else parts)))
    problems = [("modules", c) for c in cycles(edges)] + [("packages", c) for c in cycles(parts)]
    for kind, cycle in problems:
        print(f"cycle between {kind}: {' <-> '.join(cycle)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
