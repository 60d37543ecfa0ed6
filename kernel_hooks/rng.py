"""Random number generator states, so that training resumes with the same draws.

Saved for ``random``, numpy's global generator, torch on the CPU and on each GPU, for each
library the kernel has imported; restored after the variables.
"""

from __future__ import annotations

import random
import sys
from typing import Any


def capture() -> dict[str, Any]:
    states: dict[str, Any] = {"random": random.getstate()}
    if "numpy" in sys.modules:
        import numpy as np

        states["numpy"] = np.random.get_state()
    if "torch" in sys.modules:
        import torch

        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["torch.cuda"] = torch.cuda.get_rng_state_all()
    return states


def apply(states: dict[str, Any]) -> None:
    random.setstate(states["random"])
    if "numpy" in states:
        import numpy as np

        np.random.set_state(states["numpy"])
    if "torch" in states:
        import torch

        torch.set_rng_state(states["torch"])
        if "torch.cuda" in states:
            for index, state in enumerate(states["torch.cuda"][: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(state, index)
