"""A trace of notebook sessions: what the replay feeds through the policy.

Times are seconds from the trace's start. A cell's ``start`` is when the user submitted it
as recorded; replayed, a cell that waits (for a restore, or a free GPU) pushes the rest of
its session back by that wait, since the user's pauses are between cells, not at set times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GB = 1 << 30


@dataclass
class Cell:
    start: float
    """Seconds from the trace's start at which the user submitted it."""
    duration: float
    """Seconds it ran."""
    gpus: int = 1
    vram_bytes: int = 0
    """GPU memory it held."""
    memory_bytes: int = 0
    """Host memory it held."""


@dataclass
class Session:
    """One notebook's kernel, from its start to its shutdown."""

    session_id: str
    start: float
    stop: float
    cells: list[Cell] = field(default_factory=list)
    user: str = ""
    group: str = ""
    returns: list[float] = field(default_factory=list)
    """Times the user came back to the notebook before a cell, where the trace records it
    (a replay may resume ahead of a cell only at these)."""

    @property
    def gpus(self) -> int:
        """GPUs the kernel holds while it runs: the most any of its cells uses."""
        return max((c.gpus for c in self.cells), default=0)

    @property
    def state_bytes(self) -> int:
        """What a checkpoint of it holds: the most GPU plus host memory any cell held."""
        return max((c.vram_bytes + c.memory_bytes for c in self.cells), default=0)


@dataclass
class Trace:
    sessions: list[Session] = field(default_factory=list)
    name: str = ""

    @property
    def end(self) -> float:
        return max((s.stop for s in self.sessions), default=0.0)
