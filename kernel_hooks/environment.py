"""The environment a checkpoint was taken in, and whether a kernel can restore it.

Pickles name classes and functions by module, and code objects are tied to a Python
version, so a checkpoint is only loaded where Python's major.minor and every library
whose objects it holds have the same major.minor release; a patch-level difference loads
with a warning that names it.
"""

from __future__ import annotations

import functools
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from packaging.version import InvalidVersion, Version

from .errors import IncompatibleError


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


def libraries(module_names: Iterable[str]) -> dict[str, str]:
    """{distribution: version} for the installed packages providing ``module_names``."""
    found: dict[str, str] = {}
    stdlib = sys.stdlib_module_names
    for root in {name.split(".")[0] for name in module_names if name}:
        if root in stdlib or root in ("__main__", "builtins", "__mp_main__"):
            continue
        for dist in _distributions().get(root, []):
            try:
                found[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
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
