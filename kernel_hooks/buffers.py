"""Moving whole buffers between memory and the blob store, chunk by chunk.

Host buffers are hashed and written straight from the caller's memory. Device buffers
(CUDA tensors, cupy arrays) go through a small ring of host staging slots, pinned by the
device library, so the model is never copied to the host whole: while the pool writes
one chunk, the next is already being copied off the GPU.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from .blobs import BlobStore, BufferRecord, ParallelIO, WriteStats


@dataclass
class StagingSlot:
    """One host staging buffer: ``view`` for file I/O, ``native`` for the device library."""

    view: memoryview
    native: Any


class Staging:
    """A ring of staging slots; ``take`` blocks until one is free again."""

    def __init__(self, slots: list[StagingSlot]) -> None:
        self.size = len(slots[0].view) if slots else 0
        self._free: queue.Queue[StagingSlot] = queue.Queue()
        for slot in slots:
            self._free.put(slot)

    def take(self) -> StagingSlot:
        return self._free.get()

    def give(self, slot: StagingSlot) -> None:
        self._free.put(slot)


CopyOut = Callable[[int, int, StagingSlot], None]
"""``copy_out(offset, length, slot)`` copies device bytes into ``slot.view[:length]``."""
CopyIn = Callable[[int, int, StagingSlot], None]
"""``copy_in(offset, length, slot)`` copies ``slot.view[:length]`` to device bytes."""


class PendingBuffer:
    """A buffer whose chunks are being hashed and written."""

    def __init__(self, nbytes: int, chunk: int, blobs: BlobStore, stats: WriteStats) -> None:
        self.nbytes = nbytes
        self.chunk = chunk
        self.futures: list[Future[str]] = []
        self._blobs = blobs
        self._stats = stats

    def record(self) -> BufferRecord:
        """Where the buffer is stored, once its chunks are written; publishes those chunks
        that :meth:`BlobStore.publish` has not published yet."""
        hashes = [f.result() for f in self.futures]
        self._blobs.publish(self._stats, digests=hashes)
        return BufferRecord(self.nbytes, self.chunk, hashes)


class BufferSink:
    """Stores buffers handed over by the pickler; each buffer is stored once per save."""

    def __init__(self, blobs: BlobStore, io: ParallelIO, stats: WriteStats) -> None:
        self.blobs = blobs
        self.io = io
        self.stats = stats
        self._by_key: dict[Any, tuple[Any, PendingBuffer]] = {}

    def cached(self, key: Any) -> PendingBuffer | None:
        hit = self._by_key.get(key)
        return None if hit is None else hit[1]

    def _remember(self, key: Any, owner: Any, pending: PendingBuffer) -> PendingBuffer:
        # Keeping ``owner`` alive keeps ``key`` (often an id()) from being reused.
        self._by_key[key] = (owner, pending)
        return pending

    def add_host(self, key: Any, owner: Any, view: memoryview) -> PendingBuffer:
        """Store ``view`` (1-D, bytes) straight from memory."""
        if (pending := self.cached(key)) is not None:
            return pending
        chunk = self.blobs.chunk_for(len(view))
        pending = PendingBuffer(len(view), chunk, self.blobs, self.stats)
        for offset in range(0, len(view), chunk):
            part = view[offset:offset + chunk]
            pending.futures.append(
                self.io.submit(self.blobs.store_chunk, part, self.stats, nbytes=len(part))
            )
        return self._remember(key, owner, pending)

    def add_device(self, key: Any, owner: Any, nbytes: int, copy_out: CopyOut,
                   staging: Staging) -> PendingBuffer:
        """Store ``nbytes`` of device memory, staged chunk by chunk through ``staging``."""
        if (pending := self.cached(key)) is not None:
            return pending
        chunk = staging.size
        pending = PendingBuffer(nbytes, chunk, self.blobs, self.stats)
        for offset in range(0, nbytes, chunk):
            length = min(chunk, nbytes - offset)
            slot = staging.take()
            try:
                copy_out(offset, length, slot)
            except BaseException:
                staging.give(slot)
                raise
            pending.futures.append(
                self.io.submit(self._store_staged, slot, length, staging, nbytes=length)
            )
        return self._remember(key, owner, pending)

    def _store_staged(self, slot: StagingSlot, length: int, staging: Staging) -> str:
        try:
            return self.blobs.store_chunk(slot.view[:length], self.stats)
        finally:
            staging.give(slot)


class BufferSource:
    """Reads stored buffers back, verifying every chunk's hash on the way."""

    def __init__(self, blobs: BlobStore, io: ParallelIO) -> None:
        self.blobs = blobs
        self.io = io

    def load_host(self, record: BufferRecord, dest: memoryview, what: str) -> None:
        for digest, offset, length in record.spans():
            self.io.submit(self.blobs.read_chunk, digest, dest[offset:offset + length], what,
                           nbytes=length)

    def load_device(self, record: BufferRecord, copy_in: CopyIn, staging: Staging,
                    what: str) -> None:
        for digest, offset, length in record.spans():
            self.io.submit(self._load_staged, digest, offset, length, copy_in, staging, what,
                           nbytes=length)

    def _load_staged(self, digest: str, offset: int, length: int, copy_in: CopyIn,
                     staging: Staging, what: str) -> None:
        slot = staging.take()
        try:
            self.blobs.read_chunk(digest, slot.view[:length], what)
            copy_in(offset, length, slot)
        finally:
            staging.give(slot)
