"""What the server reads of Slurm's queue, shared by all of its kernels and read at most once
per interval however many of them ask (jupyter_client's restarter polls each kernel every few
seconds; a server with many kernels must not load ``slurmctld``):

- :class:`JobQueue`: the state of this server's kernel jobs and of their nodes;
- :class:`ClusterQueue`: every user's pending and running jobs, for the policy (GPU jobs
  waiting, for on-demand reclaim; the GPUs each group's kernel jobs hold, for the floors).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from .slurm_commands import SlurmCommands
from .slurm_jobs import SlurmJob


class JobQueue:
    """Job states of this server's Slurm kernels, from one ``squeue`` (and one ``sinfo``)."""

    _instance: JobQueue | None = None

    def __init__(self) -> None:
        self.jobs: dict[str, SlurmJob] = {}
        self.tracked: set[str] = set()
        self.kernels: set[str] = set()
        """Kernels this server has launched or taken over: their jobs are never orphans."""
        self.read_at = 0.0
        self._lock = asyncio.Lock()

    @classmethod
    def instance(cls) -> JobQueue:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def track(self, job_id: str) -> None:
        self.tracked.add(job_id)

    def forget(self, job_id: str) -> None:
        self.tracked.discard(job_id)
        self.jobs.pop(job_id, None)

    def cached(self, job_id: str) -> SlurmJob | None:
        """The job as last read (None before the first read)."""
        return self.jobs.get(job_id)

    async def job(self, job_id: str, interval: float, commands: SlurmCommands) -> SlurmJob:
        """The job's state, read again if the last read is older than ``interval`` s."""
        self.track(job_id)
        async with self._lock:
            if job_id not in self.jobs or time.monotonic() - self.read_at >= interval:
                await self._read(commands)
        return self.jobs[job_id]

    async def _read(self, commands: SlurmCommands) -> None:
        # All of this user's jobs, not `--jobs=IDS`: squeue fails as a whole when one id is gone.
        seen = {job.job_id: job for job in await commands.own_jobs()}
        states = {name: node.states for name, node in (await commands.read_nodes()).items()}
        self.jobs = {i: replace(seen[i], node_state=states.get(seen[i].node, frozenset())) if i in seen
                     else SlurmJob(i, "GONE") for i in sorted(self.tracked)}
        self.read_at = time.monotonic()


class ClusterQueue:
    """Every user's pending and running jobs, from one ``squeue`` at most every ``interval``
    seconds whatever the number of kernels asking: what the policy reads of the cluster."""

    _instance: ClusterQueue | None = None

    def __init__(self) -> None:
        self.jobs: list[SlurmJob] = []
        self.read_at = float("-inf")
        self._default: str | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def instance(cls) -> ClusterQueue:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    async def read(self, interval: float, commands: SlurmCommands) -> list[SlurmJob]:
        """The jobs, read again if the last read is older than ``interval`` s."""
        async with self._lock:
            if time.monotonic() - self.read_at >= interval:
                jobs = await commands.read_jobs("--states=PENDING,RUNNING")
                self.jobs = [job for job in jobs if job.state in ("PENDING", "RUNNING")]
                self.read_at = time.monotonic()
        return self.jobs

    async def default_partition(self, commands: SlurmCommands) -> str:
        """The cluster's default partition, where a job asking for none goes."""
        if self._default is None:
            self._default = await commands.default_partition()
        return self._default
