"""The environment a checkpoint was taken in, and whether a kernel can restore it.

Pickles name classes and functions by module, and code objects are tied to a Python
version, so a checkpoint is only loaded where Python's major.minor and every library
whose objects it holds have the same major.minor release; a patch-level difference loads
with a warning that names it.
"""

from __future__ import annotations

import csv
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from packaging.version import InvalidVersion, Version

from ..errors import IncompatibleError


def _provided(dist: metadata.Distribution, roots: set[str]) -> set[str]:
    """Which of the top-level modules ``roots`` ``dist`` provides, as
    ``metadata.packages_distributions`` finds them, but from the text of ``top_level.txt``
    or ``RECORD``: it parses no distribution's METADATA or file list into paths, which took
    0.2 to 1.7 s on a kernel's first save (measured by benchmarks/bench_peers.py), and a
    ``RECORD`` only if it names one of ``roots``."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return roots.intersection(declared)
    record = dist.read_text("RECORD")
    if record is not None:
        if not any(root in record for root in roots):
            return set()
        paths = [row[0] for row in csv.reader(record.splitlines()) if row]
    else:
        paths = [str(f) for f in dist.files or ()]
    return roots & {path.split("/", 1)[0] if "/" in path else path[:-3] for path in paths if path.endswith(".py")}


def _headers(dist: metadata.Distribution) -> dict[str, str]:
    """``Name`` and ``Version`` from the head of ``dist``'s METADATA, read as plain text:
    ``metadata.version`` parses all of it as e-mail (5.8 ms for torch's, 0.3 ms so)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key in ("Name", "Version"):
            found.setdefault(key, value.strip())
    return found


_providers: dict[str, list[tuple[str, str]]] = {}
"""{top-level module: (name, version) of each distribution providing it}, in ``sys.path``
order, for the modules looked up so far in this process. Only strings are kept: holding on
to ``Distribution`` objects until the interpreter exits made it crash there (with torch
loaded)."""


def _find_providers(roots: set[str]) -> None:
    """Add ``roots`` to :data:`_providers`, in one pass over the installed distributions
    that reads the METADATA of their providers only: a kernel's first save with torch,
    numpy and pandas spent 60 to 220 ms here mapping every module installed, 15 ms so."""
    missing = roots - _providers.keys()
    if not missing:
        return
    found: dict[str, list[tuple[str, str]]] = {root: [] for root in missing}
    for dist in metadata.distributions():
        provided = _provided(dist, missing)
        headers = _headers(dist) if provided else {}
        if "Name" in headers and "Version" in headers:
            for root in provided:
                found[root].append((headers["Name"], headers["Version"]))
    _providers.update(found)


def libraries(module_names: Iterable[str]) -> dict[str, str]:
    """{distribution: version} for the installed packages providing ``module_names``."""
    stdlib = sys.stdlib_module_names
    roots = {name.split(".")[0] for name in module_names if name}
    roots = {root for root in roots if root not in stdlib and root not in ("__main__", "builtins", "__mp_main__")}
    _find_providers(roots)
    found: dict[str, str] = {}
    for root in roots:
        for name, version in _providers[root]:
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
            here = _headers(metadata.distribution(dist)).get("Version")
        except metadata.PackageNotFoundError:
            here = None
        if (warning := _compare(dist, version, here)) is not None:
            warnings.append(warning)
    return warnings
