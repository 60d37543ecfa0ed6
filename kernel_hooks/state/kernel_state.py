"""The kernel's own state beside the variables: cell count and code, cwd, sys.path, env.

Stored as JSON in the manifest (nothing here needs unpickling). Environment variables and
``sys.path`` entries are saved as the difference from the kernel's start, so the restored
kernel keeps its own launch settings (connection files, GPU assignment) and gets the
user's additions on top.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Set per kernel process by its launcher (or, WANDB_SERVICE, by wandb for the service process it
# started); carrying them over would point the restored kernel at the old one's GPUs, connection
# or service, which ended with it.
_LAUNCH_ONLY = frozenset({"CUDA_VISIBLE_DEVICES", "JPY_PARENT_PID", "JPY_SESSION_NAME", "PWD",
                          "OLDPWD", "_", "WANDB_SERVICE"})


@dataclass
class Baseline:
    """The kernel's environment and ``sys.path`` when the hooks were loaded."""

    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    path: list[str] = field(default_factory=lambda: list(sys.path))


@dataclass
class KernelState:
    execution_count: int
    history: list[str]
    cwd: str
    path_added: list[str]
    path_prepended: list[str]
    env_set: dict[str, str]
    env_unset: list[str]
    outputs: int = 0
    """Cells whose result is in ``Out``, which is not saved (0 in older checkpoints)."""

    @property
    def next_cell(self) -> int:
        """The number the cell after the checkpoint gets: ``In`` holds every cell so far."""
        return len(self.history)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelState:
        return cls(**data)


def capture(shell: Any, baseline: Baseline) -> KernelState:
    history = list(shell.history_manager.input_hist_parsed)
    first_known = next((i for i, p in enumerate(sys.path) if p in baseline.path), len(sys.path))
    added = [p for p in sys.path if p not in baseline.path]
    return KernelState(
        execution_count=int(shell.execution_count),
        history=history,
        cwd=os.getcwd(),
        path_added=[p for p in added if sys.path.index(p) > first_known],
        path_prepended=[p for p in added if sys.path.index(p) < first_known],
        env_set={k: v for k, v in os.environ.items()
                 if baseline.environ.get(k) != v and k not in _LAUNCH_ONLY},
        env_unset=[k for k in baseline.environ if k not in os.environ and k not in _LAUNCH_ONLY],
        outputs=len(shell.history_manager.output_hist),
    )


def apply(shell: Any, state: KernelState) -> list[str]:
    """Restore ``state`` into ``shell``; return warnings.

    The next cell gets the number it would have had in the saving kernel. IPython 8 adds
    one to ``execution_count`` when a counted cell ends, IPython 9 when it starts; the gap
    between ``In`` and the count now (1 inside a counted cell on IPython 8, else 0) tells
    which increment is still to come.
    """
    warnings = []
    hist = shell.history_manager
    pending = len(hist.input_hist_parsed) - int(shell.execution_count)
    if state.next_cell < len(hist.input_hist_parsed):
        # The cells to come would repeat line numbers this session already wrote to the
        # history database: a new session. Else the session goes on, without the two
        # commits a new one costs (35 to 50 ms of a restore into a fresh kernel).
        hist.reset(new_session=True)
    else:
        hist.output_hist.clear()
        hist.dir_hist[:] = [Path.cwd()]
    hist.input_hist_parsed[:] = state.history
    hist.input_hist_raw[:] = state.history
    shell.execution_count = state.next_cell - pending
    try:
        os.chdir(state.cwd)
    except OSError as e:
        warnings.append(f"could not return to the working directory {state.cwd}: {e.strerror}")
    for entry in reversed(state.path_prepended):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    sys.path.extend(p for p in state.path_added if p not in sys.path)
    os.environ.update(state.env_set)
    for name in state.env_unset:
        os.environ.pop(name, None)
    return warnings
