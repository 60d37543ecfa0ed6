"""Each kernel's lifecycle state, guarded so concurrent requests cannot double it.

::

    RUNNING --checkpoint--> RUNNING
    RUNNING --suspend--> CHECKPOINTING --> SUSPENDED
    SUSPENDED --resume / first execute--> RESTORING --> RUNNING
    RUNNING --process lost--> RESTORING --> RUNNING
    any --error--> the previous safe state, with the reason kept
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from typing import Any


class State(str, enum.Enum):
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    SUSPENDED = "suspended"
    RESTORING = "restoring"
    FAILED = "failed"


@dataclass
class KernelRecord:
    """What the server knows about one kernel beside jupyter_server's own model."""

    kernel_id: str
    kernelspec: str = ""
    state: State = State.RUNNING
    last_checkpoint: dict[str, Any] | None = None
    last_error: str | None = None
    notice: str | None = None
    suspended_at: float | None = None
    kernel_info: dict[str, Any] | None = None
    session: dict[str, Any] | None = None
    """The notebook's session (path, name, type), to attach it again after a server restart."""
    progress: float | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    resumed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.kernel_id,
            "kernelspec": self.kernelspec,
            "state": self.state.value,
            "progress": self.progress,
            "last_checkpoint": self.last_checkpoint,
            "last_error": self.last_error,
            "notice": self.notice,
            "suspended_for": None if self.suspended_at is None else time.time() - self.suspended_at,
        }

    def ledger_entry(self) -> dict[str, Any]:
        return {"kernelspec": self.kernelspec, "state": self.state.value,
                "last_checkpoint": self.last_checkpoint, "suspended_at": self.suspended_at,
                "kernel_info": self.kernel_info, "session": self.session}
