"""The records of the kernels the server knows, and the ledger that keeps them across
server restarts."""

from __future__ import annotations

from collections.abc import Iterator

from .ledger import Ledger
from .lifecycle import KernelRecord, State


class KernelRecords:
    """One :class:`KernelRecord` per kernel, made on first use; the ledger keeps those that
    a restarted server must know again (suspended ones, and the last checkpoint of each)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._records: dict[str, KernelRecord] = {}

    def get(self, kernel_id: str) -> KernelRecord | None:
        return self._records.get(kernel_id)

    def make(self, kernel_id: str, kernelspec: str) -> KernelRecord:
        record = self._records.get(kernel_id)
        if record is None:
            record = self._records[kernel_id] = KernelRecord(kernel_id, kernelspec=kernelspec)
        return record

    def __iter__(self) -> Iterator[KernelRecord]:
        return iter(list(self._records.values()))

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self._records

    def forget(self, kernel_id: str) -> KernelRecord | None:
        """Drop a kernel that was shut down (its checkpoints stay until retention removes them)."""
        record = self._records.pop(kernel_id, None)
        if record is not None:
            self.save()
        return record

    def save(self) -> None:
        self.ledger.save({r.kernel_id: r.ledger_entry() for r in self._records.values()
                          if r.state in (State.SUSPENDED, State.RESTORING) or r.last_checkpoint
                          or r.placement_info})
