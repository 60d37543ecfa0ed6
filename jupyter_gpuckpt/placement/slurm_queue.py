"""What the policy reads of the Slurm cluster: every user's pending and running jobs (GPU
jobs waiting, for on-demand reclaim), and the tag each kernel job carries in its comment (the
GPUs each group's kernels hold, for the floors; a restarted server's untracked jobs), from one
``squeue`` shared by all of a server's kernels, at most once per interval.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .slurm_commands import run

FOR_A_GPU = ("Resources", "Priority")
"""Pending reasons a GPU freed in the job's partition can end (not a hold, a dependency, a
node or partition that is down, a limit of the user's: a suspend would free a GPU for nobody)."""
TAG = "jupyter-gpuckpt"
"""First word of every kernel job's ``--comment`` (see :class:`KernelTag`)."""
_FIELDS = ("JobID", "State", "Reason", "Partition", "UserName", "NumNodes", "NumTasks", "tres-per-node",
           "tres-per-job", "tres-per-task", "Comment")
_GPU = re.compile(r"(?:gres[:/])?gpu(?:[:=](.*))?")
_SPACE = re.compile(r"\s")


@dataclass(frozen=True)
class KernelTag:
    """What a kernel job's ``--comment`` says, for every server to read (squeue ``%k``):
    ``jupyter-gpuckpt group=GROUP kernel=KERNEL_ID store=KEY server=SERVER``. The group lets
    each server count what every group's kernels hold (the policy's floors); the kernel id, the
    key of the server's store and the key of the server's identity let a restarted server find
    the jobs it lost track of, and only its own (or those of a server that is gone). A tag
    without ``server`` (an older server's, or one written before the server held its identity)
    names none."""

    group: str
    kernel_id: str
    store: str
    server: str = ""

    @classmethod
    def of(cls, group: str, kernel_id: str, store_root: Path, server: str | None = None) -> KernelTag:
        """The tag of a kernel job (white space in a word, which would split it, becomes ``_``)."""
        return cls(_SPACE.sub("_", group), _SPACE.sub("_", kernel_id), store_key(store_root),
                   _SPACE.sub("_", server or ""))

    @classmethod
    def parse(cls, comment: str) -> KernelTag | None:
        """The tag a comment holds (None: not a kernel job's)."""
        words = comment.split()
        if not words or words[0] != TAG:
            return None
        fields = {key: value for key, _, value in (w.partition("=") for w in words[1:])}
        if not fields.get("kernel"):
            return None
        return cls(fields.get("group", ""), fields["kernel"], fields.get("store", ""), fields.get("server", ""))

    def __str__(self) -> str:
        server = f" server={self.server}" if self.server else ""
        return f"{TAG} group={self.group} kernel={self.kernel_id} store={self.store}{server}"


def store_key(store_root: Path) -> str:
    """A short key of the server's store: kernel jobs of another server (another store) of the
    same user are not this server's orphans."""
    return hashlib.sha256(os.path.abspath(store_root).encode()).hexdigest()[:12]


def gpu_count(tres: str) -> int:
    """GPUs in one squeue TRES request field: ``gres:gpu:2`` (Slurm 22.05), ``gres/gpu:2`` or
    ``gres/gpu=2`` (24.11), with or without a type (``gres/gpu:h200:2``, a count of 1 when
    none is given); ``N/A``, other TRES: 0."""
    total = 0
    for item in tres.split(","):
        match = _GPU.fullmatch(item.strip())
        if match:
            count = (match.group(1) or "").split(":")[-1]
            total += int(count) if count.isdigit() else 1
    return total


def _number(text: str) -> int:
    return int(text) if text.isdigit() else 1


@dataclass(frozen=True)
class QueuedJob:
    """A job of any user, as the policy reads the cluster."""

    job_id: str
    state: str
    reason: str
    partitions: tuple[str, ...]
    """One, or those it was submitted to while it pends (``-p a,b``)."""
    user: str
    gpus: int
    """GPUs it asks for (per node times nodes, per job, or per task times tasks)."""
    tag: KernelTag | None

    @classmethod
    def of_line(cls, line: str) -> QueuedJob | None:
        parts = line.removesuffix("|").split("|", len(_FIELDS) - 1)  # the comment may hold a '|'
        if len(parts) != len(_FIELDS):
            return None
        job_id, state, reason, partition, user, nodes, tasks, per_node, per_job, per_task, comment = parts
        gpus = max(gpu_count(per_node) * _number(nodes), gpu_count(per_job), gpu_count(per_task) * _number(tasks))
        return cls(job_id, state, reason, tuple(partition.split(",")), user, gpus, KernelTag.parse(comment))

    @property
    def waits_for_gpus(self) -> bool:
        """It pends for GPUs that a GPU freed in its partition could give it."""
        return self.state == "PENDING" and self.reason in FOR_A_GPU and self.gpus > 0


async def queued_jobs(*args: str) -> list[QueuedJob]:
    """``squeue ARGS`` of every field :class:`QueuedJob` needs (the same in Slurm 22.05 and 24.11)."""
    out = await run("squeue", "-a", "-h", *args, "-O", ",".join(f"{f}:|" for f in _FIELDS))
    return [job for line in out.splitlines() if (job := QueuedJob.of_line(line)) is not None]


async def own_kernel_jobs() -> list[QueuedJob]:
    """This user's kernel jobs that hold or wait for a node (not those ending)."""
    return [job for job in await queued_jobs("-u", getpass.getuser())
            if job.tag is not None and job.state != "COMPLETING"]


class ClusterQueue:
    """Every user's pending and running jobs, from one ``squeue`` at most every ``interval``
    seconds whatever the number of kernels asking: what the policy reads of the cluster."""

    _instance: ClusterQueue | None = None

    def __init__(self) -> None:
        self.jobs: list[QueuedJob] = []
        self.read_at = float("-inf")
        self._default: str | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def instance(cls) -> ClusterQueue:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    async def read(self, interval: float) -> list[QueuedJob]:
        """The jobs, read again if the last read is older than ``interval`` s."""
        async with self._lock:
            if time.monotonic() - self.read_at >= interval:
                self.jobs = await queued_jobs("--states=PENDING,RUNNING")
                self.read_at = time.monotonic()
        return self.jobs

    async def default_partition(self) -> str:
        """The cluster's default partition (sinfo marks it ``*``), where a job asking for none goes."""
        if self._default is None:
            out = await run("sinfo", "-h", "-o", "%P")
            self._default = next((p.removesuffix("*") for p in out.split() if p.endswith("*")), "")
        return self._default
