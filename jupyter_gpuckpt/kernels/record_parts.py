"""The typed parts of a kernel's record (:class:`~.lifecycle.KernelRecord`): the checkpoint it
resumes from, the write-behind of a staged one, the notebook's session.

Each turns into the JSON that the REST model and the ledger have always had (contracts: the
README's REST table, DESIGN.md), and an entry of an earlier version's ledger reads back into it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuckpt_store import CheckpointInfo

STAGED = "staged"
"""A checkpoint in host memory only, until its write-behind ends."""
DURABLE = "durable"
"""A checkpoint in the store."""
TAKEN_BY_KERNEL = "the kernel, as it was told to end"
"""``taken_by`` of the checkpoint a kernel took itself before its placement ended it."""

_NUMBER = (int, float)
_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "durability": (str,), "time": _NUMBER, "bytes_total": (int,), "bytes_written": (int,),
    "variables": (int,), "last_cell": (int,), "parent": (str,), "skipped": (list,), "seconds": _NUMBER,
    "taken_by": (str,),
}
"""The JSON types of the keys :class:`CheckpointRef` knows (each may also be null, but ``id``)."""


@dataclasses.dataclass(frozen=True)
class CheckpointRef:
    """The checkpoint a kernel resumes from: the model's and the ledger's ``last_checkpoint``.

    Its JSON has the keys its origin gave it, in their order: a save's (``SaveResult.to_json``
    with ``time`` and ``durability``), a listing's (the newest checkpoint went, an older one
    is the fallback), the id alone (the store could not list the fallback), or the kernel's own
    (taken as its placement ended it). Keys this version does not know are kept as they were.
    One built with the constructor has the keys it was given (``id`` and those not None).
    """

    id: str
    durability: str | None = None
    """:data:`STAGED` or :data:`DURABLE`; None for the one a kernel took itself (in the store)."""
    time: float | None = None
    """When it was taken (seconds since the epoch), if known."""
    bytes_total: int | None = None
    bytes_written: int | None = None
    variables: int | None = None
    """How many variables it saved."""
    last_cell: int | None = None
    """The last cell whose effects it holds, if known."""
    parent: str | None = None
    skipped: list[dict[str, Any]] | None = None
    """The variables it left out (``SkippedVariable`` as JSON)."""
    seconds: float | None = None
    taken_by: str | None = None
    keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    """Its JSON's keys, in order."""
    unknown: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """The values of keys this version does not know (a later version's ledger)."""

    def __post_init__(self) -> None:
        if not self.keys:
            given = tuple(key for key in _TYPES if key == "id" or getattr(self, key) is not None)
            object.__setattr__(self, "keys", given)  # frozen: set once, as it is made

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckpointRef:
        """Read what :meth:`to_json` wrote (a ledger's entry, of this version or an earlier one).

        Parameters
        ----------
        data
            The JSON object: an ``id`` at least.

        Raises
        ------
        ValueError
            It is not an object, it has no ``id``, or a key it has is of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a last checkpoint must be a JSON object, not {type(data).__name__}")
        if not isinstance(data.get("id"), str) or not data["id"]:
            raise ValueError(f"a last checkpoint needs an id: {dict(data)!r}")
        known: dict[str, Any] = {}
        for key, value in data.items():
            types = _TYPES.get(key)
            if types is None:
                continue
            if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
                raise ValueError(f"the last checkpoint {data['id']}'s {key} is {value!r}, "
                                 f"not {' or '.join(t.__name__ for t in types)}")
            known[key] = value
        return cls(**known, keys=tuple(data), unknown={k: v for k, v in data.items() if k not in _TYPES})

    @classmethod
    def saved(cls, result: Mapping[str, Any], durability: str, at: float) -> CheckpointRef:
        """The checkpoint a save just took (``result``: its ``SaveResult.to_json``), at ``at``."""
        return cls.from_json({**result, "time": at, "durability": durability})

    @classmethod
    def listed(cls, info: CheckpointInfo) -> CheckpointRef:
        """A durable checkpoint of the store that a kernel falls back to (its newest went): what
        the listing says of it."""
        created = datetime.fromisoformat(info.created).timestamp() if info.created else None
        return cls.from_json({"id": info.id, "bytes_total": info.nbytes, "variables": info.variables,
                              "time": created, "last_cell": None, "durability": DURABLE})

    @classmethod
    def durable_id(cls, checkpoint_id: str) -> CheckpointRef:
        """A durable checkpoint known by its id alone (the store could not list it)."""
        return cls.from_json({"id": checkpoint_id, "durability": DURABLE, "time": None})

    @classmethod
    def taken_by_kernel(cls, checkpoint_id: str, last_cell: int | None, at: float) -> CheckpointRef:
        """The checkpoint a kernel took itself as its placement ended it (preemption)."""
        return cls.from_json({"id": checkpoint_id, "last_cell": last_cell, "time": at, "taken_by": TAKEN_BY_KERNEL})

    def made_durable(self) -> CheckpointRef:
        """This checkpoint, now in the store (its write-behind ended)."""
        return self.from_json({**self.to_json(), "durability": DURABLE})

    @property
    def staged(self) -> bool:
        """Whether it is in host memory only: the write-behind must still write it."""
        return self.durability == STAGED

    def to_json(self) -> dict[str, Any]:
        return {key: self.unknown[key] if key in self.unknown else getattr(self, key) for key in self.keys}


@dataclasses.dataclass(frozen=True)
class WriteBehindStatus:
    """The durable write of a staged checkpoint under way: the model's ``write_behind``, either
    the bytes written so far or, between attempts, the last attempt's error."""

    checkpoint_id: str
    bytes_done: int = 0
    bytes_total: int = 0
    attempts: int = 0
    error: str | None = None

    @classmethod
    def writing(cls, checkpoint_id: str, bytes_done: int, bytes_total: int) -> WriteBehindStatus:
        return cls(checkpoint_id, bytes_done=bytes_done, bytes_total=bytes_total)

    @classmethod
    def failed(cls, checkpoint_id: str, attempts: int, error: str) -> WriteBehindStatus:
        """Attempt ``attempts`` failed with ``error``; another follows."""
        return cls(checkpoint_id, attempts=attempts, error=error)

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"checkpoint_id": self.checkpoint_id, "attempts": self.attempts, "error": self.error}
        return {"checkpoint_id": self.checkpoint_id, "bytes_done": self.bytes_done, "bytes_total": self.bytes_total}


@dataclasses.dataclass(frozen=True)
class NotebookSession:
    """The notebook session attached to a kernel, kept to attach it again after a server restart
    (the arguments of jupyter_server's ``SessionManager.create_session``)."""

    path: str | None = None
    name: str | None = None
    type: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NotebookSession:
        """Read a session model's, or the ledger's, ``path``, ``name`` and ``type``.

        Parameters
        ----------
        data
            A JSON object; other keys are ignored.

        Raises
        ------
        ValueError
            It is not an object, or one of the three is not a string or null.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a notebook session must be a JSON object, not {type(data).__name__}")
        values = {key: data.get(key) for key in ("path", "name", "type")}
        wrong = {key: value for key, value in values.items() if value is not None and not isinstance(value, str)}
        if wrong:
            raise ValueError(f"a notebook session's path, name and type are strings: {wrong!r}")
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "type": self.type}


@dataclasses.dataclass(frozen=True)
class PolicyNote:
    """The policy's last decision for a kernel and why, as the kernel's model shows it."""

    action: str | None
    """"suspend", "warn", "checkpoint", "convert", or None (kept as it is)."""
    reason: str = ""
    due_in: float | None = None
    """Seconds until a warned suspend falls due."""
    for_demand: bool = False
    """The suspend serves a waiting GPU request (else: idle limit reached)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
