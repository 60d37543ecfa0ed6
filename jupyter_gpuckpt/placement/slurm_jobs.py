"""Slurm's jobs and nodes as its JSON output gives them (``squeue --json``, ``sinfo --json``).

The shape changed between Slurm versions, so both are read: Slurm 22.05 (data_parser
v0.0.38, Debian 12) gives a job's state as a string and its numbers plain, its nodes under
``nodes`` with ``state`` and ``state_flags``; 23.02 and later (v0.0.39 to v0.0.42, Debian 13's
24.11) give states as lists, numbers as ``{"set", "infinite", "number"}`` and nodes under
``sinfo``. 22.05's ``squeue --json`` also ignores the filters it is given (``--user``,
``--states``), so callers filter what is read here.

Each kernel job carries a tag in its ``--comment`` (:class:`KernelTag`), which every server
reads back from the queue.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PlacementError

ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT", "GONE"})
"""Job states after which the job's kernel no longer runs (GONE: Slurm forgot the job)."""
UNPLACEABLE = ("PartitionConfig", "BadConstraints", "PartitionNodeLimit", "PartitionTimeLimit", "InvalidQOS",
               "InvalidAccount", "Unschedulable")
"""Pending reasons that mean no node can ever take the job as it is asked for: refused at once.
(Temporary ones, such as ``ReqNodeNotAvail`` for a reservation or ``PartitionDown``, wait, up
to ``queue_timeout``.)"""
FOR_A_GPU = ("Resources", "Priority")
"""Pending reasons a GPU freed in the job's partition can end (not a hold, a dependency, a
node or partition that is down, a limit of the user's: a suspend would free a GPU for nobody)."""
TAG = "jupyter-gpuckpt"
"""First word of every kernel job's ``--comment`` (see :class:`KernelTag`)."""
_GPU = re.compile(r"(?:gres[:/])?gpu(?:[:=](.*))?")
_SPACE = re.compile(r"\s")
_UNHEARD = frozenset({"NOT_RESPONDING", "DOWN"})


class SlurmOutputError(PlacementError):
    """Slurm's output is not the JSON it should be, or it reports errors of its own."""


@dataclass(frozen=True)
class KernelTag:
    """What a kernel job's ``--comment`` says, for every server to read:
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
    """GPUs in one TRES request field: ``gres:gpu:2`` (Slurm 22.05), ``gres/gpu:2`` or
    ``gres/gpu=2`` (24.11), with or without a type (``gres/gpu:h200:2``, a count of 1 when
    none is given); ``N/A``, other TRES: 0."""
    total = 0
    for item in tres.split(","):
        match = _GPU.fullmatch(item.strip())
        if match:
            count = (match.group(1) or "").split(":")[-1]
            total += int(count) if count.isdigit() else 1
    return total


@dataclass(frozen=True)
class SlurmJob:
    """A job of any user as ``squeue`` sees it, and the state of its node as ``sinfo`` does."""

    job_id: str
    state: str
    reason: str = ""
    partitions: tuple[str, ...] = ()
    """One, or those it was submitted to while it pends (``-p a,b``)."""
    user: str = ""
    gpus: int = 0
    """GPUs it asks for (per node times nodes, per job, or per task times tasks)."""
    tag: KernelTag | None = None
    node: str = ""
    node_state: frozenset[str] = field(default_factory=frozenset)
    """The node's base state and flags, upper case (``MIXED``, ``NOT_RESPONDING``, ...)."""

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def suspect(self) -> bool:
        """The job may be gone though Slurm does not say so yet: it is completing, or Slurm
        has stopped hearing from its node (NOT_RESPONDING; Slurm declares the node dead only
        after ``SlurmdTimeout``)."""
        return self.state == "COMPLETING" or (self.state == "RUNNING" and bool(self.node_state & _UNHEARD))

    @property
    def waits_for_gpus(self) -> bool:
        """It pends for GPUs that a GPU freed in its partition could give it."""
        return self.state == "PENDING" and self.reason in FOR_A_GPU and self.gpus > 0


def _document(text: str, command: str) -> dict[str, Any]:
    """A Slurm JSON document, after its own ``errors``."""
    try:
        document = json.loads(text)
    except ValueError:
        first = text.strip().splitlines()[0] if text.strip() else "nothing"
        raise SlurmOutputError(f"{command} --json gave no JSON (it printed {first[:200]!r}): is its "
                               "serializer/json plugin installed?") from None
    if not isinstance(document, dict):
        raise SlurmOutputError(f"{command} --json gave {type(document).__name__}, not an object")
    errors = [str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
              for e in document.get("errors") or ()]
    if errors:
        raise SlurmOutputError(f"{command} reports: {'; '.join(errors)}")
    return document


def _entries(document: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [e for e in document.get(key) or [] if isinstance(e, dict)]


def _number(value: Any, unset: int = 0) -> int:
    """A count, plain (22.05) or ``{"set", "infinite", "number"}`` (23.02 on)."""
    if isinstance(value, dict):
        return int(value.get("number", unset)) if value.get("set", True) and not value.get("infinite") else unset
    return int(value) if isinstance(value, int | float) else unset


def _words(value: Any) -> list[str]:
    """A state as a list of upper-case words: a string (22.05) or a list (23.02 on)."""
    items = value if isinstance(value, list) else [value] if value else []
    return [str(item).upper() for item in items]


def _job_state(value: Any) -> str:
    """One state word, as ``squeue --format=%T`` says it: COMPLETING while that flag is set."""
    words = _words(value)
    return "COMPLETING" if "COMPLETING" in words else (words[0] if words else "UNKNOWN")


def _job(entry: Mapping[str, Any]) -> SlurmJob:
    nodes, tasks = _number(entry.get("node_count"), 1), _number(entry.get("tasks"), 1)
    gpus = max(gpu_count(str(entry.get("tres_per_node") or "")) * max(nodes, 1),
               gpu_count(str(entry.get("tres_per_job") or "")),
               gpu_count(str(entry.get("tres_per_task") or "")) * max(tasks, 1))
    partition = str(entry.get("partition") or "")
    return SlurmJob(str(entry.get("job_id")), _job_state(entry.get("job_state")), str(entry.get("state_reason") or ""),
                    tuple(p for p in partition.split(",") if p), str(entry.get("user_name") or ""), gpus,
                    KernelTag.parse(str(entry.get("comment") or "")), str(entry.get("nodes") or ""))


def read_jobs(text: str) -> list[SlurmJob]:
    """The jobs of ``squeue --json``'s output.

    Raises
    ------
    SlurmOutputError
        Not Slurm's JSON, or Slurm reports errors in it.
    """
    return [_job(entry) for entry in _entries(_document(text, "squeue"), "jobs")]


@dataclass(frozen=True)
class SlurmNode:
    """A node as ``sinfo`` sees it."""

    states: frozenset[str]
    """Its base state and flags, upper case (``MIXED``, ``NOT_RESPONDING``, ...)."""
    partitions: frozenset[str]


def read_nodes(text: str) -> dict[str, SlurmNode]:
    """Node name -> the node, from ``sinfo --json``'s output (22.05: ``nodes``; later:
    ``sinfo``, one entry per node and partition with ``--Node``).

    Raises
    ------
    SlurmOutputError
        Not Slurm's JSON, or Slurm reports errors in it.
    """
    document = _document(text, "sinfo")
    key = "sinfo" if "sinfo" in document else "nodes"
    nodes: dict[str, SlurmNode] = {}
    for entry in _entries(document, key):
        if key == "nodes":
            nodes[str(entry.get("name"))] = SlurmNode(
                frozenset(_words(entry.get("state")) + _words(entry.get("state_flags"))),
                frozenset(str(p) for p in entry.get("partitions") or ()))
            continue
        states = frozenset(_words((entry.get("node") or {}).get("state")))
        partition = str((entry.get("partition") or {}).get("name") or "")
        for name in (entry.get("nodes") or {}).get("nodes") or ():
            known = nodes.get(str(name), SlurmNode(frozenset(), frozenset()))
            nodes[str(name)] = SlurmNode(known.states | states, known.partitions | ({partition} - {""}))
    return nodes
