"""What a placement tells the policy of the GPUs wanted: the requests waiting in each pool.

A leaf, so that the pure policy (``policy/decisions.py``) and the placements both use it
without either importing the other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Demand:
    """GPU requests waiting in one pool: kernels of this server waiting in its GPU pool, or
    jobs pending in Slurm for GPUs this server's kernels could vacate."""

    gpus: int = 0
    waiters: Sequence[str] = ()
    """One readable name per waiting request ("kernel 1a2b3c4d", "Slurm job 12 (bob)")."""
