"""Slurm's own commands, run by the server's user: the one place that spawns them.

Job states come from one ``squeue`` for every kernel job of this server (and ``sinfo`` for
their nodes), at most once per
``interval`` seconds however many kernels ask (jupyter_client's restarter polls each kernel
every few seconds), so a server with many kernels does not load ``slurmctld``. The policy's
view of the cluster is in :mod:`.slurm_queue`.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import time
from dataclasses import dataclass

from ..errors import PlacementError

COMMAND_TIMEOUT = 30.0
"""Seconds a Slurm command may take (slurmctld answers in milliseconds when it is up)."""
ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT", "GONE"}
"""Job states after which the job's kernel no longer runs (GONE: Slurm forgot the job)."""
UNPLACEABLE = ("PartitionConfig", "BadConstraints", "PartitionNodeLimit", "PartitionTimeLimit", "InvalidQOS",
               "InvalidAccount", "Unschedulable")
"""Pending reasons that mean no node can ever take the job as it is asked for: refused at once.
(Temporary ones, such as ``ReqNodeNotAvail`` for a reservation or ``PartitionDown``, wait, up
to ``queue_timeout``.)"""


class SlurmCommandError(PlacementError):
    """A Slurm command failed; the message is Slurm's own."""


@dataclass(frozen=True)
class Job:
    """A job as ``squeue`` sees it, and the state of its node as ``sinfo`` does."""

    job_id: str
    state: str
    reason: str = ""
    node: str = ""
    node_state: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def suspect(self) -> bool:
        """The job may be gone though Slurm does not say so yet: it is completing, or Slurm
        has stopped hearing from its node (``*`` in sinfo: NOT_RESPONDING; Slurm declares the
        node dead only after ``SlurmdTimeout``)."""
        unheard = "*" in self.node_state or self.node_state.startswith("down")
        return self.state == "COMPLETING" or (self.state == "RUNNING" and unheard)


async def run(*argv: str, env: dict[str, str] | None = None, timeout: float = COMMAND_TIMEOUT) -> str:
    """Run a Slurm command; its stdout.

    Raises
    ------
    PlacementError
        The command is not installed, timed out, or failed (with Slurm's message).
    """
    try:
        process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE, env=env)
    except FileNotFoundError:
        raise PlacementError(f"{argv[0]} is not on the Jupyter server's PATH: Slurm kernels need Slurm's client "
                             "commands (Debian: apt-get install slurm-client) and SLURM_CONF pointing at the "
                             "cluster's slurm.conf") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise SlurmCommandError(f"{argv[0]} did not answer within {timeout:.0f} s (is slurmctld up?)") from None
    except asyncio.CancelledError:
        # the server stops (its policy loop reads the queue often): reap the command now, or
        # its transport is collected after the event loop has closed
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode:
        text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip()
        message = "; ".join(line.strip().removeprefix(f"{argv[0]}: ").removeprefix("error: ")
                            for line in text.splitlines() if line.strip())
        raise SlurmCommandError(f"{argv[0]} failed: {message or f'exit status {process.returncode}'}")
    return out.decode(errors="replace")


async def submit(script: str, args: list[str], env: dict[str, str]) -> str:
    """``sbatch`` ``script`` with ``args``, in environment ``env``; the job id."""
    out = await run("sbatch", "--parsable", *args, script, env=env)
    return out.strip().split(";")[0]


async def cancel(job_id: str, signal: str | None = None) -> None:
    """``scancel`` the job (or send its steps ``signal``); a job already gone is fine."""
    try:
        await run("scancel", *([f"--signal={signal}"] if signal else []), job_id)
    except SlurmCommandError as e:
        if "Invalid job id" not in str(e) and "already completing" not in str(e):
            raise


class JobQueue:
    """Job states of this server's Slurm kernels, from one rate-limited ``squeue``."""

    _instance: JobQueue | None = None

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
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

    def cached(self, job_id: str) -> Job | None:
        """The job as last read (None before the first read)."""
        return self.jobs.get(job_id)

    async def job(self, job_id: str, interval: float) -> Job:
        """The job's state, read again if the last read is older than ``interval`` s."""
        self.track(job_id)
        async with self._lock:
            if job_id not in self.jobs or time.monotonic() - self.read_at >= interval:
                await self._read()
        return self.jobs[job_id]

    async def _read(self) -> None:
        ids = sorted(self.tracked)
        # All of this user's jobs, not `-j IDS`: squeue fails as a whole when one id is gone.
        out = await run("squeue", "-a", "-h", "--states=all", "-o", "%i|%T|%r|%N", "-u", getpass.getuser())
        nodes = dict(line.split("|", 1) for line in (await run("sinfo", "-a", "-h", "-N", "-o", "%N|%t")).splitlines()
                     if "|" in line)
        seen = {}
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 4:
                seen[parts[0]] = Job(parts[0], parts[1], parts[2], parts[3], nodes.get(parts[3], ""))
        self.jobs = {i: seen.get(i, Job(i, "GONE")) for i in ids}
        self.read_at = time.monotonic()
