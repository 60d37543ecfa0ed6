"""The records of the kernels the server knows, and the ledger that keeps them across
server restarts.

The ledger is written off the event loop (a write waits for the lock another server may hold,
and syncs the file), by one thread: writes land in the order they were asked for, and one that
waits its turn writes the newest entries then.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from .ledger import Entry, Ledger
from .lifecycle import KernelRecord, State

T = TypeVar("T")


class KernelRecords:
    """One :class:`KernelRecord` per kernel, made on first use; the ledger keeps those that
    a restarted server must know again (suspended ones, and the last checkpoint of each)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._records: dict[str, KernelRecord] = {}
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="gpuckpt-ledger")
        self._guard = threading.Lock()  # the next entries, taken by the writer's thread
        self._next: dict[str, Entry] | None = None
        self._written: Future[None] | None = None

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
        """Have this server's entries, as they are now, written to the ledger (other servers'
        there stay as they are), in the background; :meth:`saved` waits for it. A write that
        fails is logged: the next one writes every entry again."""
        entries = copy.deepcopy({r.kernel_id: r.ledger_entry() for r in self._records.values()
                                 if r.state in (State.SUSPENDED, State.RESTORING) or r.last_checkpoint
                                 or r.placement_info})
        with self._guard:
            waiting, self._next = self._next is not None, entries
        if not waiting:  # else the write that waits its turn takes these
            self._written = self._writer.submit(self._write)

    async def saved(self) -> None:
        """Wait until what :meth:`save` was asked for is in the ledger (or failed, and was logged).
        A waiter cancelled (the server stops) leaves the write to land."""
        if self._written is not None:
            await asyncio.shield(asyncio.wrap_future(self._written))

    async def claim(self) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """:meth:`Ledger.claim`, in turn with the writes."""
        return await self._in_turn(self.ledger.claim)

    async def live_servers(self) -> set[str]:
        """:meth:`Ledger.live_servers`, off the event loop."""
        return await self._in_turn(self.ledger.live_servers)

    async def close(self) -> None:
        """The server stops: the writes asked for land, then :meth:`Ledger.close`."""
        await self._in_turn(self.ledger.close)

    async def _in_turn(self, call: Callable[[], T]) -> T:
        # shielded: a cancelled waiter must not take a queued call, or a write, off the queue
        return await asyncio.shield(asyncio.wrap_future(self._writer.submit(call)))

    def _write(self) -> None:
        with self._guard:
            entries, self._next = self._next, None
        assert entries is not None, "each write is asked for with its entries"
        try:
            self.ledger.save(entries)
        except Exception:  # a full disk, another server holding the lock too long: the next write tries again
            self.ledger.log.exception("gpuckpt: the ledger %s could not be written", self.ledger.path)
