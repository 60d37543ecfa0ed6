"""Each kernel's lifecycle state, guarded so concurrent requests cannot double it.

::

    RUNNING --checkpoint--> RUNNING
    RUNNING --suspend--> CHECKPOINTING --> SUSPENDED   (staged: durable later, by write-behind)
    RUNNING --suspend, park--> CHECKPOINTING --> PARKED   (CUDA driver; the process stays)
    PARKED --resume--> RESTORING --> RUNNING;  PARKED --convert--> SUSPENDED
    SUSPENDED --resume / first execute--> RESTORING --> RUNNING
    RUNNING, PARKED, RESTORING, FAILED --process lost--> RESTORING --> RUNNING
    RESTORING --not restarted--> FAILED
    any --error--> the previous safe state, with the reason kept

Every change of state goes through the record: :meth:`KernelRecord.enter` for a step above,
:meth:`KernelRecord.fall_back` for an operation that failed. (A record read back from the
ledger takes its state there as it was, :meth:`KernelRecord.load`.)
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import WrongState
from .record_parts import CheckpointRef, NotebookSession, PolicyNote, WriteBehindStatus


class State(str, enum.Enum):
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    SUSPENDED = "suspended"
    PARKED = "parked"
    RESTORING = "restoring"
    FAILED = "failed"


AWAY = (State.CHECKPOINTING, State.SUSPENDED, State.PARKED, State.RESTORING)
"""States in which the kernel's process cannot take the notebook's messages: they wait."""

STEPS: dict[State, frozenset[State]] = {
    State.RUNNING: frozenset({State.RUNNING, State.CHECKPOINTING, State.RESTORING}),
    State.CHECKPOINTING: frozenset({State.SUSPENDED, State.PARKED}),
    State.PARKED: frozenset({State.RESTORING, State.SUSPENDED}),
    State.SUSPENDED: frozenset({State.RESTORING}),
    State.RESTORING: frozenset({State.RUNNING, State.RESTORING}),
    State.FAILED: frozenset({State.RESTORING}),
}
"""The steps of the lifecycle above, from each state (FAILED is one from any): what
:meth:`KernelRecord.enter` allows."""
SAFE = frozenset({State.RUNNING, State.SUSPENDED, State.PARKED, State.RESTORING, State.FAILED})
"""The states an operation that failed may leave the kernel in: any but CHECKPOINTING, which
only a suspend under way holds."""


@dataclass
class KernelRecord:
    """What the server knows about one kernel beside jupyter_server's own model."""

    kernel_id: str
    kernelspec: str = ""
    state: State = State.RUNNING
    last_checkpoint: CheckpointRef | None = None
    last_error: str | None = None
    notice: str | None = None
    suspended_at: float | None = None
    parked_at: float | None = None
    kernel_info: dict[str, Any] | None = None
    """The kernel's last ``kernel_info_reply`` content, answered for it while it is away: a
    message of Jupyter's protocol, kept and sent as it came (so a dict, not a type of ours)."""
    session: NotebookSession | None = None
    """The notebook's session, to attach it again after a server restart."""
    last_activity: float | None = None
    """The user's last activity when the kernel was suspended (seconds since the epoch)."""
    progress: float | None = None
    report: dict[str, Any] | None = None
    """The last restore's report as the kernel side wrote it (``RestoreReport.to_json``), with
    where it came from and any rebuild since: shown as it is in the kernel's model."""
    pending_report: str | None = None
    """A report the notebook has not been shown yet: shown on the next cell it runs."""
    placement_info: dict[str, Any] | None = None
    """Where a kernel that outlives the server runs (its Slurm job), for the ledger: what its
    placement's ``ledger_info()`` gives, which only that placement reads back (a plug-in's own)."""
    durable_checkpoint: str | None = None
    """The newest checkpoint in the store: what the kernel falls back to if a staged one is
    lost before its write-behind ends."""
    write_behind: WriteBehindStatus | None = None
    """The durable write of a staged checkpoint under way: bytes, or the last error."""
    decision: PolicyNote | None = None
    """The policy's last decision for the kernel and why."""
    warned_at: float | None = None
    """When the user was last warned that the policy will suspend the kernel."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _settled: asyncio.Future[str | None] | None = field(default=None, repr=False)
    _changed: asyncio.Event | None = field(default=None, repr=False)

    @property
    def last_checkpoint_id(self) -> str | None:
        """The id of the checkpoint the kernel resumes from, if it has one."""
        return self.last_checkpoint.id if self.last_checkpoint else None

    # -- the lifecycle's steps ------------------------------------------------------------

    def enter(self, state: State) -> None:
        """Take a step of the lifecycle (:data:`STEPS`; FAILED from any state).

        Raises
        ------
        WrongState
            The kernel cannot take that step from where it is (another request, or its
            process lost, moved it meanwhile): nothing changed.
        """
        if state != State.FAILED and state not in STEPS[self.state]:
            raise WrongState(f"kernel {self.kernel_id} is {self.state.value}; it cannot become {state.value} now")
        self._become(state)

    def fall_back(self, state: State, reason: str) -> None:
        """An operation failed for ``reason``: back to the safe ``state`` it chose, with the
        reason kept in ``last_error``."""
        if state not in SAFE:
            raise ValueError(f"{state.value} is no safe state to fall back to")
        self.last_error = reason
        self._become(state)

    def restarted(self) -> None:
        """The user restarted the kernel while it was suspended: a fresh process runs, with no
        state; its checkpoints stay (listed, restorable), but nothing brings them back by itself."""
        self.suspended_at = self.parked_at = None
        self.pending_report = None
        self.last_error = None
        self._become(State.RUNNING)
        self.back()

    def _become(self, state: State) -> None:
        self.state = state
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self, timeout: float) -> None:
        """Wait until the kernel takes its next step or falls back, or ``timeout`` seconds.

        For whoever holds a notebook's messages through a step that does not bring the kernel
        back by itself (a suspend ending, a resume that someone else starts)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # -- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.kernel_id,
            "kernelspec": self.kernelspec,
            "state": self.state.value,
            "progress": self.progress,
            "last_checkpoint": self.last_checkpoint.to_json() if self.last_checkpoint else None,
            "last_error": self.last_error,
            "notice": self.notice,
            "report": self.report,
            "write_behind": self.write_behind.to_json() if self.write_behind else None,
            "policy": self.decision.to_json() if self.decision else None,
            "suspended_for": None if self.suspended_at is None else time.time() - self.suspended_at,
            "parked_for": None if self.parked_at is None else time.time() - self.parked_at,
        }

    def ledger_entry(self) -> dict[str, Any]:
        return {"kernelspec": self.kernelspec, "state": self.state.value,
                "last_checkpoint": self.last_checkpoint.to_json() if self.last_checkpoint else None,
                "suspended_at": self.suspended_at, "kernel_info": self.kernel_info,
                "session": self.session.to_json() if self.session else None, "last_activity": self.last_activity,
                "placement_info": self.placement_info, "durable_checkpoint": self.durable_checkpoint,
                "parked_at": self.parked_at}

    def load(self, entry: dict[str, Any]) -> None:
        """Take back what :meth:`ledger_entry` kept (this version's, or an earlier one's): a
        kernel taken over where it runs, or a suspended one.

        Raises
        ------
        ValueError
            Its last checkpoint or its session is damaged: the record is as it was.
        """
        checkpoint, session = entry.get("last_checkpoint"), entry.get("session")
        self.last_checkpoint, self.session = (None if checkpoint is None else CheckpointRef.from_json(checkpoint),
                                              None if session is None else NotebookSession.from_json(session))
        self.placement_info = entry.get("placement_info")
        running = entry.get("state") == State.RUNNING.value and self.placement_info
        self.state = State.RUNNING if running else State.SUSPENDED
        self.suspended_at = entry.get("suspended_at") or entry.get("parked_at")
        self.kernel_info = entry.get("kernel_info")
        self.last_activity = entry.get("last_activity")
        self.durable_checkpoint = entry.get("durable_checkpoint")

    # -- waiting for the kernel to come back ---------------------------------------------

    def away(self) -> None:
        """The process is going away (suspend, or it died): messages must wait for it."""
        if self._settled is None or self._settled.done():
            self._settled = asyncio.get_running_loop().create_future()

    def back(self, error: str | None = None) -> None:
        """The kernel runs with its state again (``error`` None), or could not be brought
        back: then ``error`` says why, and whoever waited is told."""
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(error)

    async def settled(self) -> str | None:
        """Wait until the kernel runs with its state (None) or could not be brought back
        (the reason). Returns at once if it is not away."""
        if self._settled is None:
            return None
        return await asyncio.shield(self._settled)
