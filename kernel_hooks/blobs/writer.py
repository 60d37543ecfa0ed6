"""What one save writes: new chunks into packs, and what it wrote, so a failed save can
take it back."""

from __future__ import annotations

import os
import threading

import blake3

from gpuckpt_store import BufferRecord, SaveJournal, SaveTooLarge

from .folder import BlobStore
from .packs import Pack
from .parallel import ParallelIO
from .sizes import PACK_BYTES

Claimed = tuple[list[str], list[tuple[str, bytes, memoryview]]]
"""Chunk hashes of a view, and the new chunks among them as (hash, digest, bytes)."""


class BlobWriter:
    """What one save writes: new chunks into packs (one per I/O thread), and its counts.

    ``known`` maps the chunks the owner's checkpoints already hold to ``(blob, offset)``;
    those are not written again. ``journal`` (the save's) is told of every blob published,
    so the blobs of a save that dies before its manifest are found and removed. ``limit``
    bounds the bytes written: a chunk beyond it raises :class:`SaveTooLarge`.
    """

    def __init__(self, blobs: BlobStore, known: dict[str, tuple[str, int]] | None = None,
                 journal: SaveJournal | None = None, limit: int | None = None) -> None:
        self.blobs = blobs
        self.known = known or {}
        self.journal = journal
        self.new: dict[str, tuple[Pack, int]] = {}
        self.packs: list[Pack] = []
        self.created: dict[str, int] = {}
        """Blobs this save published, with their mtime (ns): what a failed save takes back."""
        self.bytes_written = 0
        self.bytes_reused = 0
        self.limit = limit
        self.exceeded = False
        """Whether a chunk was refused for ``limit`` (whatever error it then became)."""
        self._claimed: set[str] = set()
        self._publishing: set[Pack] = set()
        """Packs :meth:`finish` is publishing on I/O threads."""
        self._lock = threading.Lock()
        self._local = threading.local()

    def store(self, view: memoryview, pack: Pack | None = None, chunk: int = 0) -> list[str]:
        """Hash ``view``'s chunks (of ``chunk`` bytes, by default the store's) and append
        those not stored yet to ``pack`` (by default this thread's); returns their hashes."""
        return self.write(self.claim(view, chunk), pack)

    def claim(self, view: memoryview, chunk: int = 0) -> Claimed:
        """The first half of :meth:`store`: hash ``view``'s chunks and claim those not
        stored yet, which the caller then passes to :meth:`write`."""
        chunk = chunk or self.blobs.chunk_bytes
        hashes: list[str] = []
        fresh: list[tuple[str, bytes, memoryview]] = []
        for offset in range(0, len(view), chunk):
            part = view[offset:offset + chunk]
            digest = blake3.blake3(part).digest()
            hashes.append(digest.hex())
            if self._claim(hashes[-1], len(part)):
                fresh.append((hashes[-1], digest, part))
        return hashes, fresh

    def write(self, claimed: Claimed, pack: Pack | None = None) -> list[str]:
        """The second half of :meth:`store`: append the chunks ``claimed`` found new;
        returns the hashes of all."""
        hashes, fresh = claimed
        if fresh:
            self._append(fresh, pack)
        return hashes

    def _claim(self, digest: str, nbytes: int) -> bool:
        """True if this chunk is new (the caller writes it), False if it is stored already."""
        with self._lock:
            if digest in self.known or digest in self._claimed:
                self.bytes_reused += nbytes
                return False
            if self.limit is not None and self.bytes_written + nbytes > self.limit:
                self.exceeded = True
                raise SaveTooLarge(f"the checkpoint needs more than the {self.limit} bytes it may take")
            self._claimed.add(digest)
            self.bytes_written += nbytes
            return True

    def _append(self, fresh: list[tuple[str, bytes, memoryview]], pack: Pack | None) -> None:
        own = pack is None
        if own:
            pack = getattr(self._local, "pack", None)
            if pack is None:
                pack = self._local.pack = self.new_pack()
        assert pack is not None
        try:
            offset = pack.append([v for _, _, v in fresh], [d for _, d, _ in fresh])
        except BaseException:
            with self._lock:
                self._claimed.difference_update(h for h, _, _ in fresh)
            raise
        with self._lock:
            for digest, _, view in fresh:
                self.new[digest] = (pack, offset)
                offset += len(view)
        if own and pack.size >= PACK_BYTES:
            self._local.pack = None
            self.publish(pack)

    def new_pack(self) -> Pack:
        pack = Pack(self.blobs.directory, self.blobs.spare, self.blobs.spare_tag)
        with self._lock:
            self.packs.append(pack)
        return pack

    def publish(self, pack: Pack) -> None:
        if pack.name is not None:
            return
        if not pack.size:  # every chunk was stored already: no blob needed
            pack.discard()
            pack.name = ""
            return
        if pack.publish(self.blobs.directory, self._announce):
            assert pack.name is not None
            with self._lock:
                self.created[pack.name] = os.stat(self.blobs.path(pack.name)).st_mtime_ns

    def _announce(self, blob: str) -> None:
        if self.journal is not None:
            with self._lock:  # packs are published from several I/O threads
                self.journal.add(blob)

    def finish(self, io: ParallelIO | None = None, *, wait: bool = True) -> None:
        """Publish every pack not published yet (on ``io``'s threads if given). Call it
        once all chunks are written and before a manifest refers to them.

        With ``wait`` False (and ``io``) it returns at once, and chunks are located in the
        packs being published (:meth:`locate`): the manifest can be written while their
        data is synced, and ``io.wait()`` must return before it is published."""
        for pack in list(self.packs):
            if pack.name is None:
                if io is None:
                    self.publish(pack)
                else:
                    with self._lock:
                        self._publishing.add(pack)
                    io.submit(self.publish, pack)
        if io is not None and wait:
            io.wait()

    def forget(self, pack: Pack) -> None:
        """Drop ``pack`` and the chunks in it (a pickling pass that was abandoned), unless
        :meth:`finish` is publishing it (the pass that succeeded)."""
        if pack in self._publishing:
            return
        pack.discard()
        with self._lock:
            if pack not in self.packs:
                return
            gone = [digest for digest, (p, _) in self.new.items() if p is pack]
            for digest in gone:
                del self.new[digest]
                self._claimed.discard(digest)
            self.packs.remove(pack)
            self.bytes_written -= pack.size

    def locate(self, digest: str) -> tuple[str, int]:
        """(blob, offset) of a chunk this save stored or found stored."""
        hit = self.new.get(digest)
        if hit is None:
            return self.known[digest]
        pack, offset = hit
        if pack.name is None:
            if pack not in self._publishing:
                raise RuntimeError("a chunk's pack is not published yet")
            return pack.final_name(), offset
        return pack.name, offset

    def record(self, nbytes: int, hashes: list[str], chunk: int = 0) -> BufferRecord:
        return BufferRecord.build(nbytes, chunk or self.blobs.chunk_bytes, hashes, self.locate)

    def remove_created(self) -> None:
        """Delete what a failed save wrote, unless another save has reused it since."""
        for pack in self.packs:
            if pack.name is None:
                pack.discard()
        for name, mtime in self.created.items():
            path = self.blobs.path(name)
            try:
                if os.stat(path).st_mtime_ns == mtime:
                    path.unlink()
            except FileNotFoundError:
                pass
