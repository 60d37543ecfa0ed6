"""Random number generator states, so that training resumes with the same draws.

Saved for ``random``, numpy's global generator, torch on the CPU and on each GPU, for each
library the kernel has imported, as plain bytes: unpickling them imports nothing. On
restore a state is applied at once if its library is loaded by then (the variables needed
it), else the moment the library is first imported (:mod:`.on_import`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import Any

from .on_import import when_imported


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
        when_imported("numpy.random", lambda np_random: _set_numpy(np_random, states["numpy"]))
    if "torch" in states:
        when_imported("torch", lambda torch: _set_torch(torch, states["torch"], states.get("torch.cuda", ())))


def _set_numpy(np_random: Any, state: tuple[str, bytes, int, int, float]) -> None:
    import numpy as np

    kind, keys, pos, has_gauss, gauss = state
    np_random.set_state((kind, np.frombuffer(keys, np.uint32).copy(), pos, has_gauss, gauss))


def _set_torch(torch: Any, cpu: bytes, cuda: Sequence[bytes]) -> None:
    # on the CPU whatever the default device: the restored settings may have set one
    torch.set_rng_state(torch.tensor(list(cpu), dtype=torch.uint8, device="cpu"))
    for index, state in enumerate(list(cuda)[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(torch.tensor(list(state), dtype=torch.uint8, device="cpu"), index)
