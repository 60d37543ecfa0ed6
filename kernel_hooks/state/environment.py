"""The environment a checkpoint was taken in, and whether a kernel can restore it.

Pickles name classes and functions by module, and code objects are tied to a Python
version, so a checkpoint is only loaded where Python's major.minor and every library
whose objects it holds have the same major.minor release; a patch-level difference loads
with a warning that names it.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..errors import IncompatibleError


class _Installed:
    """One installed distribution's metadata, read as bytes: through ``importlib.metadata``'s
    paths and text, looking up numpy's provider and ours among 180 distributions took a
    process's first save 23 to 88 ms, 9 to 12 ms so."""

    def __init__(self, folder: str | None = None, dist: metadata.Distribution | None = None) -> None:
        self._folder = folder
        self._dist = dist

    def read(self, name: str) -> bytes | None:
        if self._dist is not None:
            text = self._dist.read_text(name)
            return None if text is None else text.encode()
        assert self._folder is not None
        try:
            with open(os.path.join(self._folder, name), "rb") as f:
                return f.read()
        except OSError:
            return None

    def files(self) -> list[str]:
        dist = self._dist or metadata.PathDistribution(Path(str(self._folder)))
        return [str(f) for f in dist.files or ()]

    def named(self) -> str:
        """The distribution's name, as its folder gives it (``name-version.dist-info``, as
        ``importlib.metadata`` finds it too) or, from a zip file, as its metadata does."""
        if self._dist is not None:
            return str(self._dist.metadata["Name"] or "")
        return os.path.basename(str(self._folder)).rpartition(".")[0].partition("-")[0]


def _installed() -> Iterator[_Installed]:
    """The distributions on ``sys.path``, in its order, as ``metadata.distributions()``
    finds them: the ``*.dist-info`` and ``*.egg-info`` folders of each folder on it; a zip
    file on it is left to ``importlib.metadata``."""
    for entry in sys.path:
        try:
            children = list(os.scandir(entry or "."))
        except NotADirectoryError:
            yield from (_Installed(dist=dist) for dist in metadata.distributions(path=[entry]))
            continue
        except OSError:
            continue
        for child in children:
            if child.name.endswith((".dist-info", ".egg-info")) and child.is_dir():
                yield _Installed(folder=child.path)


def _provided(dist: _Installed, roots: set[str]) -> set[str]:
    """Which of the top-level modules ``roots`` ``dist`` provides, as
    ``metadata.packages_distributions`` finds them, but from the text of ``top_level.txt``
    or ``RECORD``: it parses no distribution's METADATA or file list into paths, which took
    0.2 to 1.7 s on a kernel's first save (measured by benchmarks/bench_peers.py). A
    ``RECORD`` is searched for lines of ``roots``' Python files rather than parsed: the
    RECORDs that merely mention numpy (pandas', say) took 20 ms more to parse."""
    declared = dist.read("top_level.txt")
    if declared:
        return roots.intersection(declared.decode("utf-8", "replace").split())
    record = dist.read("RECORD")
    if record is not None:
        record = b"\n" + record
        return {root for root in roots
                if (b"\n" + root.encode() in record or b'\n"' + root.encode() in record)
                and _record_line(root).search(record)}
    paths = dist.files()
    return roots & {path.split("/", 1)[0] if "/" in path else path[:-3] for path in paths if path.endswith(".py")}


def _record_line(root: str) -> re.Pattern[bytes]:
    """A ``RECORD`` line (CSV, the path first) of a Python file ``root.py`` or under ``root/``."""
    return re.compile(rb'^"?' + re.escape(root.encode()) + rb'(?:/[^\n]*?)?\.py"?,', re.MULTILINE)


def _headers(text: str) -> dict[str, str]:
    """``Name`` and ``Version`` from the head of a METADATA file, read as plain text:
    ``metadata.version`` parses all of it as e-mail (5.8 ms for torch's, 0.3 ms so)."""
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
    for dist in _installed():
        provided = _provided(dist, missing)
        if not provided:
            continue
        headers = _headers((dist.read("METADATA") or dist.read("PKG-INFO") or b"").decode("utf-8", "replace"))
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
    here = _versions(saved["libraries"])
    for dist, version in saved["libraries"].items():
        if (warning := _compare(dist, version, here[dist])) is not None:
            warnings.append(warning)
    return warnings


def _normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares names (``Foo.Bar`` and ``foo_bar`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _versions(names: Iterable[str]) -> dict[str, str | None]:
    """{name: the version installed here, or None} for the distributions ``names``: the first
    on ``sys.path`` of each, found in one pass over its folders by their names, then the
    ``Version`` of its METADATA. ``metadata.distribution`` builds a path for every file of
    every folder on ``sys.path`` for each name: numpy and ours took a restore 7 to 10 ms so,
    1.1 to 2.2 ms this way. A name not found in the folders is asked of ``importlib.metadata``,
    which knows the distributions of other finders too; None if it does not find it either."""
    wanted = {_normalized(name): name for name in names}
    found: dict[str, str | None] = {}
    for dist in _installed():
        if not wanted:
            break
        name = wanted.pop(_normalized(dist.named()), None)
        if name is not None:
            found[name] = _headers((dist.read("METADATA") or dist.read("PKG-INFO") or b"").decode(
                "utf-8", "replace")).get("Version")
    for name in wanted.values():
        try:
            installed = metadata.distribution(name)
            found[name] = _headers(installed.read_text("METADATA") or installed.read_text("PKG-INFO") or "").get(
                "Version")
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
