"""The environment a checkpoint was taken in, and whether a kernel can restore it.

Pickles name classes and functions by module, and code objects are tied to a Python
version, so a checkpoint is only loaded where Python's major.minor and every library
whose objects it holds have the same major.minor release; a patch-level difference loads
with a warning that names it.
"""

from __future__ import annotations

import csv
import functools
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from packaging.version import InvalidVersion, Version

from .errors import IncompatibleError


def _top_levels(dist: metadata.Distribution) -> set[str]:
    """The top-level modules ``dist`` provides, as ``metadata.packages_distributions`` finds
    them, but from the text of ``top_level.txt`` or ``RECORD``: it parses neither every
    distribution's METADATA nor its file list into paths, which took 0.2 to 1.7 s on a
    kernel's first save (measured by benchmarks/bench_peers.py)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    record = dist.read_text("RECORD")
    paths = ([row[0] for row in csv.reader(record.splitlines()) if row] if record is not None
             else [str(f) for f in dist.files or ()])
    return {path.split("/", 1)[0] if "/" in path else path[:-3] for path in paths if path.endswith(".py")}


def _name_version(dist: metadata.Distribution) -> tuple[str, str] | None:
    """``Name`` and ``Version`` from the head of ``dist``'s METADATA, read as plain text."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key in ("Name", "Version"):
            found.setdefault(key, value.strip())
    return (found["Name"], found["Version"]) if len(found) == 2 else None


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[tuple[str, str]]]:
    """{top-level module: (name, version) of each distribution providing it}, in ``sys.path``
    order. Only strings are kept: holding on to ``Distribution`` objects until the
    interpreter exits made it crash there (with torch loaded)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for dist in metadata.distributions():
        roots = _top_levels(dist)
        named = _name_version(dist) if roots else None
        if named is not None:
            for root in roots:
                found.setdefault(root, []).append(named)
    return found


def libraries(module_names: Iterable[str]) -> dict[str, str]:
    """{distribution: version} for the installed packages providing ``module_names``."""
    found: dict[str, str] = {}
    stdlib = sys.stdlib_module_names
    for root in {name.split(".")[0] for name in module_names if name}:
        if root in stdlib or root in ("__main__", "builtins", "__mp_main__"):
            continue
        for name, version in _distributions().get(root, []):
            found.setdefault(name, version)  # the first on sys.path is the one imported
    return dict(sorted(found.items()))


def record(module_names: Iterable[str]) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "libraries": libraries(module_names),
    }


def _release(text: str) -> tuple[int, ...] | None:
    try:
        return Version(text).release + (0, 0)
    except InvalidVersion:
        return None


def _compare(what: str, saved: str, here: str | None) -> str | None:
    """None if equal, a warning for a patch difference; raises for anything bigger."""
    if here is None:
        raise IncompatibleError(f"the checkpoint needs {what} {saved}, which this kernel does not have")
    if saved == here:
        return None
    old, new = _release(saved), _release(here)
    if old is None or new is None or old[:2] != new[:2]:
        raise IncompatibleError(
            f"the checkpoint was taken with {what} {saved}; this kernel has {what} {here}. "
            f"Restore it in a kernel with {what} {'.'.join(map(str, old[:2])) if old else saved}.x"
        )
    return f"{what} differs by a patch release: checkpoint {saved}, this kernel {here}"


def check(saved: dict[str, Any]) -> list[str]:
    """Raise :class:`IncompatibleError` if ``saved`` cannot load here; return warnings."""
    if saved.get("implementation") != sys.implementation.name:
        raise IncompatibleError(
            f"the checkpoint was taken with {saved.get('implementation')}, this kernel runs "
            f"{sys.implementation.name}"
        )
    warnings = [w for w in [_compare("Python", saved["python"], platform.python_version())] if w]
    for dist, version in saved["libraries"].items():
        try:
            here: str | None = metadata.version(dist)
        except metadata.PackageNotFoundError:
            here = None
        if (warning := _compare(dist, version, here)) is not None:
            warnings.append(warning)
    return warnings
