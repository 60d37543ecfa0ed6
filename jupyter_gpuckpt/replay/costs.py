"""What a suspend and a restore cost in the replay: seconds from the state's size.

The defaults are the project's own measurements on the 2-core development VM (README), the
slower of the machines measured, so the replay does not flatter the policy; ``--write-gbps``,
``--read-gbps`` and the fixed costs set others (the H200 figures are in the README too:
2.2 GB/s write, about 1.6 GB/s read, 3.4 s of torch import and CUDA start).
"""

from __future__ import annotations

from dataclasses import dataclass

GBPS = 1e9
"""Bandwidths are in GB/s of 10^9 bytes, as the benchmarks print them."""


@dataclass(frozen=True)
class CostModel:
    write_bandwidth: float = 0.4 * GBPS
    """Bytes/s a suspend writes. README, "The GPU free in seconds": bench_suspend.py's staged and
    direct suspends of 1 GB "both run at 0.4 GB/s" (suspend answered in 2.48-2.65 s)."""
    read_bandwidth: float = 0.8 * GBPS
    """Bytes/s a restore reads. README, "Kernels as Slurm jobs": bench_slurm.py reads the 1 GiB
    state at "about 0.8 GB/s" (1.36 s); bench_suspend.py's direct resume of 1 GB took 2.72 s in all."""
    suspend_fixed: float = 0.45
    """Seconds a suspend takes beyond writing. README, bench_slurm.py: "without that, ours is 0.45 s
    (suspend)"."""
    restore_fixed: float = 1.64
    """Seconds a restore takes beyond reading: bench_slurm.py's 0.58 s of ours ("0.58 s (resume)")
    plus 1.06 s of kernel start (its table); with 1 GB read that gives bench_suspend.py's 2.7-2.9 s."""
    start_fixed: float = 1.07
    """Seconds a new kernel takes to answer (after a cull). README, bench_slurm.py: "kernel start"
    1.07 s."""

    def suspend_seconds(self, state_bytes: int) -> float:
        """From the decision until the GPUs are free."""
        return self.suspend_fixed + state_bytes / self.write_bandwidth

    def restore_seconds(self, state_bytes: int) -> float:
        """From the GPUs taken until the kernel answers with its state back."""
        return self.restore_fixed + state_bytes / self.read_bandwidth
