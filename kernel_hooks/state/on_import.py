"""Run a callback once a module is imported: at once if it is loaded, else right after its
first import.

A restore applies what belongs to a library (its RNG state, its settings) this way, so a
kernel that had imported torch but whose variables need none of it does not pay torch's
import (2 s and more) to resume, and gets torch's state the moment the user imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType


def when_imported(name: str, apply: Callable[[ModuleType], None]) -> None:
    """``apply(module)`` now if ``name`` is imported, else right after its first import.

    Parameters
    ----------
    name
        The module, which may be a submodule such as ``numpy.random`` (numpy 2 imports it
        on first use: applying numpy's state at once imported it, 25 to 45 ms of a restore).
    apply
        Called with the module once it has executed. Callbacks for one module run in the
        order they were given; one that raises fails the import that ran it, so callers
        catch their own errors.
    """
    module = sys.modules.get(name)
    if module is not None:
        apply(module)
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _AfterImport)), None)
    if finder is None:
        finder = _AfterImport()
        sys.meta_path.insert(0, finder)
    finder.pending.setdefault(name, []).append(apply)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks once a module has executed, on its first import.

    It finds the module's spec as the import system would, then wraps only that spec's
    loader's ``exec_module`` for this one call: the loader stays the same object.
    """

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[ModuleType], None]]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        callbacks = self.pending.pop(fullname, None)
        if callbacks is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            try:
                original(module)
            finally:
                del loader.exec_module
            for apply in callbacks:
                apply(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
