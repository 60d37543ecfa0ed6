"""Random number generator states, so that training resumes with the same draws.

Saved for ``random``, numpy's global generator, torch on the CPU and on each GPU, for each
library the kernel has imported, as plain bytes: unpickling them imports nothing. On
restore a state is applied at once if its library is loaded by then (the variables needed
it), else the moment the library is first imported: a kernel that had imported torch but
holds no tensor does not pay torch's import (2 s and more) to resume.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import random
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


def capture() -> dict[str, Any]:
    states: dict[str, Any] = {"random": random.getstate()}
    # numpy 2 imports numpy.random on first use (25 to 45 ms); until then its global
    # generator does not exist, so there is nothing to save.
    if "numpy.random" in sys.modules:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
        states["numpy"] = (kind, np.asarray(keys).tobytes(), int(pos), int(has_gauss), float(gauss))
    if "torch" in sys.modules:
        import torch

        states["torch"] = bytes(torch.get_rng_state().tolist())
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["torch.cuda"] = [bytes(s.tolist()) for s in torch.cuda.get_rng_state_all()]
    return states


def apply(states: dict[str, Any]) -> None:
    random.setstate(states["random"])
    if "numpy" in states:
        _when_imported("numpy.random", lambda np_random: _set_numpy(np_random, states["numpy"]))
    if "torch" in states:
        _when_imported("torch", lambda torch: _set_torch(torch, states["torch"], states.get("torch.cuda", ())))


def _set_numpy(np_random: Any, state: tuple[str, bytes, int, int, float]) -> None:
    import numpy as np

    kind, keys, pos, has_gauss, gauss = state
    np_random.set_state((kind, np.frombuffer(keys, np.uint32).copy(), pos, has_gauss, gauss))


def _set_torch(torch: Any, cpu: bytes, cuda: Sequence[bytes]) -> None:
    torch.set_rng_state(torch.tensor(list(cpu), dtype=torch.uint8))
    for index, state in enumerate(list(cuda)[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(torch.tensor(list(state), dtype=torch.uint8), index)


def _when_imported(name: str, apply: Callable[[ModuleType], None]) -> None:
    """``apply(module)`` now if ``name`` is imported, else right after its first import
    (``name`` may be a submodule, such as ``numpy.random``, which numpy 2 imports on
    first use: applying numpy's state at once imported it, 25 to 45 ms of a restore)."""
    module = sys.modules.get(name)
    if module is not None:
        apply(module)
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _AfterImport)), None)
    if finder is None:
        finder = _AfterImport()
        sys.meta_path.insert(0, finder)
    finder.pending[name] = apply


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback once a module has executed, on its first import.

    It finds the module's spec as the import system would, then wraps only that spec's
    loader's ``exec_module`` for this one call: the loader stays the same object.
    """

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[ModuleType], None]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        apply = self.pending.pop(fullname, None)
        if apply is None:
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
            apply(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
