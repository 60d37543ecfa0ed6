"""Content-addressed blobs holding chunks: what a save writes and a restore reads back.

Every buffer (and the namespace pickle) is cut into small chunks, each named by its
BLAKE3 hash, so a chunk that any checkpoint of the owner already stored costs nothing, and
a small change to a big array rewrites only the chunks it touched. New chunks are appended
to a few *pack* blobs, one per I/O thread, rather than written one file each: a file per
256 KiB chunk ran at 0.31 GB/s where 2 MiB files ran at 1.16 (ext4, 4 threads, 500 MB),
and packs keep that speed with the small chunks incremental saves need. A pack is named by
the hash of its chunks' hashes and offsets, so it is content-addressed like any blob; the
manifest says where each chunk lies, as extents of consecutive chunks within a pack.

Hashing and writing run on a small thread pool (both release the GIL), so they overlap and
the disk stays busy; buffers are read and written straight from the caller's memory, never
copied whole.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import secrets
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from .errors import IntegrityError

CHUNK_BYTES = 256 << 10
"""Hash and deduplication granularity. A contiguous change of L bytes rewrites about L plus
one chunk: with 256 KiB chunks a 1% change of workload (d) in benchmarks/bench_peers.py (four
columns of a 1 GB frame) rewrites 1.4% of it, with 2 MiB chunks it rewrote 6.7%."""
PICKLE_CHUNK_BYTES = 16 << 10
"""Chunk size of the namespace pickle: changing 1% of 25,000 small objects changes a run of
the pickle (15 kB of 2.9 MB) that chunks of 256, 64 and 16 KiB made 18%, 4.5% and 1.1% of
it to rewrite (benchmarks/bench_peers.py, (c)); its hashes add 0.4% to the manifest."""
SEGMENT_BYTES = 8 << 20
"""What one I/O task hashes and writes (or reads and verifies): big enough that the thread
pool's overhead is small, small enough that four threads share a buffer of a few MB."""
DEVICE_CHUNK_BYTES = SEGMENT_BYTES
"""Size of the pinned host staging slots that device (GPU) buffers move through."""
PACK_BYTES = 128 << 20
"""A pack is published (synced and named) once this big, so a long save publishes as it
goes and garbage collection can free space in pieces of this size."""
ALIGN = 4096
"""Appends to a pack start at multiples of this, so restores can read with ``O_DIRECT``."""
WRITEBACK_WINDOW = 32 << 20
"""Bytes behind a pack's end whose cached pages are dropped at each append."""
DEFAULT_WORKERS = 4
"""I/O threads of a save: hashing keeps them busy, more than cores gain nothing."""
READ_WORKERS = 8
"""I/O threads of a restore: they mostly wait for the disk, and more reads in flight kept it
busier (a 0.76 GB torch model, 2 cores: 1.08 GB/s with 4 threads, 1.34 with 8)."""
LANE_BYTES = 16 << 20
"""Bytes made for a save (packed strings) that may wait to be written: without a bound, the
strings of a 1 GB frame queued up to 98 MB."""
_HEX = frozenset("0123456789abcdef")

Progress = Callable[[int], None]
Claimed = tuple[list[str], list[tuple[str, bytes, memoryview]]]
"""Chunk hashes of a view, and the new chunks among them as (hash, digest, bytes)."""


def digest_of(data: memoryview | bytes) -> str:
    return blake3.blake3(data).hexdigest()


def is_digest(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


def temp_prefix() -> str:
    """Prefix of this process's temporary files, so cleanup can tell whose they are."""
    return f".tmp-{socket.gethostname()}-{os.getpid()}-"


def _drop_cache(fd: int, offset: int = 0, length: int = 0) -> None:
    """Start writeback of written pages and drop the clean ones: saving gigabytes then
    reuses a few cache pages instead of growing the cache (and evicting the user's files);
    about 2x faster where new pages are costly (benchmarks/bench_checkpoint.py)."""
    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


# -- where chunks lie ----------------------------------------------------------------------

Extent = tuple[int, int, int]
"""``(blob index, offset in the blob, number of chunks)``: consecutive chunks of a buffer
stored one after another in one blob."""


@dataclass
class BufferRecord:
    """Where one buffer's bytes live: its size, chunk size, chunk hashes and extents."""

    nbytes: int
    chunk: int
    hashes: list[str]
    blobs: list[str]
    extents: list[Extent]

    def to_json(self) -> dict[str, Any]:
        return {"nbytes": self.nbytes, "chunk": self.chunk, "hashes": self.hashes,
                "blobs": self.blobs, "extents": [list(e) for e in self.extents]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BufferRecord:
        try:
            nbytes, chunk = int(data["nbytes"]), int(data["chunk"])
            hashes, blobs = [str(h) for h in data["hashes"]], [str(b) for b in data["blobs"]]
            extents = [(int(b), int(o), int(n)) for b, o, n in data["extents"]]
        except (KeyError, TypeError, ValueError):
            raise IntegrityError("a buffer record in the manifest is malformed") from None
        if (chunk <= 0 or nbytes < 0 or len(hashes) != -(-nbytes // chunk)
                or not all(is_digest(h) for h in hashes + blobs)
                or sum(n for _, _, n in extents) != len(hashes)
                or not all(0 <= b < len(blobs) and o >= 0 and n > 0 for b, o, n in extents)):
            raise IntegrityError("a buffer record in the manifest is malformed")
        return cls(nbytes, chunk, hashes, blobs, extents)

    @classmethod
    def build(cls, nbytes: int, chunk: int, hashes: list[str],
              locate: Callable[[str], tuple[str, int]]) -> BufferRecord:
        """The record of ``hashes``, with ``locate(hash) -> (blob, offset)``."""
        blobs: list[str] = []
        index: dict[str, int] = {}
        extents: list[list[int]] = []
        end = (-1, -1)  # (blob index, offset) right after the last extent
        for i, digest in enumerate(hashes):
            blob, offset = locate(digest)
            b = index.setdefault(blob, len(index))
            if b == len(blobs):
                blobs.append(blob)
            if (b, offset) == end:
                extents[-1][2] += 1
            else:
                extents.append([b, offset, 1])
            end = (b, offset + min(chunk, nbytes - i * chunk))
        return cls(nbytes, chunk, hashes, blobs, [(b, o, n) for b, o, n in extents])

    def locations(self) -> Iterator[tuple[str, str, int, int]]:
        """(chunk hash, blob, offset in the blob, length) of each chunk, in order."""
        i = 0
        for b, offset, count in self.extents:
            for _ in range(count):
                length = min(self.chunk, self.nbytes - i * self.chunk)
                yield self.hashes[i], self.blobs[b], offset, length
                offset += length
                i += 1

    def pieces(self, limit: int) -> Iterator[Piece]:
        """The buffer as reads of at most ``limit`` bytes, each within one extent."""
        per_piece = max(1, limit // self.chunk)
        i = 0
        for b, offset, count in self.extents:
            for first in range(0, count, per_piece):
                n = min(per_piece, count - first)
                start = (i + first) * self.chunk
                lengths = [min(self.chunk, self.nbytes - (i + first + k) * self.chunk) for k in range(n)]
                yield Piece(self.blobs[b], offset + first * self.chunk, start,
                            list(zip(self.hashes[i + first:i + first + n], lengths, strict=True)))
            i += count


@dataclass
class Piece:
    """One read: consecutive chunks of a blob, for bytes ``start`` on of a buffer."""

    blob: str
    offset: int
    start: int
    chunks: list[tuple[str, int]]
    """(hash, length) of each chunk."""

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.chunks)


# -- writing -------------------------------------------------------------------------------

class Pack:
    """A blob being written: chunks appended to a temporary file, named when published."""

    def __init__(self, directory: Path) -> None:
        self.tmp = directory / f"{temp_prefix()}{secrets.token_hex(6)}"
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.size = 0
        self._lock = threading.Lock()  # the pickle's two buffers may be stored at once
        self._naming = blake3.blake3()
        """Hashes each chunk's hash and offset: the same name means the same bytes."""
        self.name: str | None = None
        """The blob's name once published."""

    def append(self, views: list[memoryview], digests: list[bytes]) -> int:
        """Write ``views`` after the end, from the next multiple of :data:`ALIGN` (the gap
        reads as zeros); returns the offset of the first."""
        total = sum(len(v) for v in views)
        with self._lock:
            offset = -(-self.size // ALIGN) * ALIGN
            self.size = offset + total
            at = offset
            for view, digest in zip(views, digests, strict=True):
                self._naming.update(digest + at.to_bytes(8, "little"))
                at += len(view)
        done = 0
        while done < total:
            done += os.pwritev(self.fd, _after(views, done), offset + done)
        start = max(0, offset - WRITEBACK_WINDOW)
        _drop_cache(self.fd, start, offset + total - start)
        return offset

    def publish(self, directory: Path) -> bool:
        """fsync and name the pack; False if an identical blob was already there."""
        os.fsync(self.fd)
        _drop_cache(self.fd)  # now clean, the pages can go
        os.close(self.fd)
        self.fd = -1
        self.name = self._naming.hexdigest()
        final = directory / self.name
        try:
            if os.stat(final).st_size == self.size:
                os.utime(final)
                self.tmp.unlink()
                return False
        except FileNotFoundError:
            pass
        os.replace(self.tmp, final)
        return True

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.tmp.unlink(missing_ok=True)


def _after(views: list[memoryview], skip: int) -> list[memoryview]:
    """What is left of ``views`` once ``skip`` bytes of them went out (after a short write)."""
    if not skip:
        return views
    for i, view in enumerate(views):
        if skip < len(view):
            return [view[skip:], *views[i + 1:]]
        skip -= len(view)
    return []


class BlobWriter:
    """What one save writes: new chunks into packs (one per I/O thread), and its counts.

    ``known`` maps the chunks the owner's checkpoints already hold to ``(blob, offset)``;
    those are not written again.
    """

    def __init__(self, blobs: BlobStore, known: dict[str, tuple[str, int]] | None = None) -> None:
        self.blobs = blobs
        self.known = known or {}
        self.new: dict[str, tuple[Pack, int]] = {}
        self.packs: list[Pack] = []
        self.created: dict[str, int] = {}
        """Blobs this save published, with their mtime (ns): what a failed save takes back."""
        self.bytes_written = 0
        self.bytes_reused = 0
        self._claimed: set[str] = set()
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
        pack = Pack(self.blobs.directory)
        with self._lock:
            self.packs.append(pack)
        return pack

    def publish(self, pack: Pack) -> None:
        if pack.name is not None:
            return
        if not pack.size:  # every chunk was stored already: no blob needed
            pack.discard()
            pack.name = ""
        elif pack.publish(self.blobs.directory):
            assert pack.name is not None
            with self._lock:
                self.created[pack.name] = os.stat(self.blobs.path(pack.name)).st_mtime_ns

    def finish(self, io: ParallelIO | None = None) -> None:
        """Publish every pack not published yet (on ``io``'s threads if given). Call it
        once all chunks are written and before a manifest refers to them."""
        for pack in list(self.packs):
            if pack.name is None:
                if io is None:
                    self.publish(pack)
                else:
                    io.submit(self.publish, pack)
        if io is not None:
            io.wait()

    def forget(self, pack: Pack) -> None:
        """Drop ``pack`` and the chunks in it (a pickling pass that was abandoned)."""
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
            raise RuntimeError("a chunk's pack is not published yet")
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


class PickleStream(io.RawIOBase):
    """The namespace pickle as the pickler writes it: chunked and stored like a buffer,
    into a pack of its own (so an abandoned pass can be dropped whole).

    Two buffers take turns: while the I/O pool hashes and writes one, the pickler fills the
    other (hashing and writing on the pickling thread cost 25-70 ms of a 1 s save of
    200,000 small objects). A write error is kept in ``error``, so a caller can tell a full
    disk from an object that could not be pickled.
    """

    def __init__(self, writer: BlobWriter, pool: ParallelIO, buffer_bytes: int = 1 << 20) -> None:
        self.writer = writer
        self.pool = pool
        self.pack = writer.new_pack()
        self.count = 0
        self.error: OSError | None = None
        self._buffers = [bytearray(buffer_bytes), bytearray(buffer_bytes)]  # whole chunks, never resized
        self._busy: list[Future[list[str]] | None] = [None, None]
        self._current = 0
        self._fill = 0
        self._stored: list[Future[list[str]]] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            buffer = self._buffers[self._current]
            n = min(len(view) - done, len(buffer) - self._fill)
            buffer[self._fill:self._fill + n] = view[done:done + n]
            self._fill += n
            done += n
            if self._fill == len(buffer):
                self._store()
        self.count += len(view)
        return len(view)

    def _store(self) -> None:
        view = memoryview(self._buffers[self._current])[:self._fill]
        future = self.pool.submit(self.writer.store, view, self.pack, PICKLE_CHUNK_BYTES)
        self._busy[self._current] = future
        self._stored.append(future)
        self._current ^= 1
        self._fill = 0
        previous = self._busy[self._current]
        if previous is not None:  # the other buffer is free once its turn is stored
            self._result(previous)

    def _result(self, future: Future[list[str]]) -> list[str]:
        try:
            return future.result()
        except OSError as e:
            self.error = e
            raise

    def finish(self) -> list[str]:
        """Store what is buffered; returns the pickle's chunk hashes. The pack is published
        with the others, by :meth:`BlobWriter.finish`."""
        if self._fill:
            self._store()
        return [digest for future in self._stored for digest in self._result(future)]

    def discard(self) -> None:
        if self.pack.name is None:
            wait(self._stored)  # no store may still be writing to the pack
            self.writer.forget(self.pack)


# -- the folder ----------------------------------------------------------------------------

class BlobStore:
    """The ``blobs/`` folder of one owner's store."""

    def __init__(self, directory: Path, *, chunk_bytes: int = CHUNK_BYTES, workers: int = DEFAULT_WORKERS,
                 read_workers: int = READ_WORKERS) -> None:
        if SEGMENT_BYTES % chunk_bytes:
            raise ValueError(f"the chunk size must divide {SEGMENT_BYTES}")
        self.directory = directory
        self.chunk_bytes = chunk_bytes
        self.workers = workers
        self.read_workers = read_workers

    def path(self, blob: str) -> Path:
        if not is_digest(blob):
            raise IntegrityError(f"{blob!r} is not a blob hash")
        return self.directory / blob

    def read_piece(self, piece: Piece, dest: memoryview, what: str) -> None:
        """Read ``piece`` into ``dest`` and check each chunk's hash; ``what`` names it in errors."""
        path = self.path(piece.blob)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise IntegrityError(f"blob {path} of {what} is missing") from None
        try:
            if os.fstat(fd).st_size < piece.offset + len(dest):
                raise IntegrityError(f"blob {path} of {what} is truncated")
            _read(fd, path, dest, piece.offset, what)
        finally:
            os.close(fd)
        start = 0
        for digest, length in piece.chunks:
            if digest_of(dest[start:start + length]) != digest:
                raise IntegrityError(f"blob {path} of {what} is corrupt: its content does not match its hash")
            start += length


def fsync_dir(path: Path) -> None:
    """Make the names in folder ``path`` durable (a rename or link into it, say)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(fd: int, path: Path, dest: memoryview, offset: int, what: str) -> None:
    """Fill ``dest`` from ``offset``: aligned, the bulk with ``O_DIRECT`` (the disk writes
    straight into ``dest``; 1.16 against 0.82 GB/s buffered, 500 MB in 2 MiB pieces, 4
    threads, hashes checked), the rest through the page cache."""
    done = 0
    bulk = len(dest) // ALIGN * ALIGN
    if bulk and offset % ALIGN == 0 and _address(dest) % ALIGN == 0:
        try:
            direct = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:  # a file system without O_DIRECT (tmpfs)
            direct = -1
        if direct >= 0:
            try:
                while done < bulk:
                    n = os.preadv(direct, [dest[done:bulk]], offset + done)
                    if not n:
                        break
                    done += n
            except OSError as e:
                if e.errno != errno.EINVAL:  # EINVAL: alignment refused; read it buffered
                    raise
            finally:
                os.close(direct)
    while done < len(dest):
        n = os.preadv(fd, [dest[done:]], offset + done)
        if not n:
            raise IntegrityError(f"blob {path} of {what} is truncated")
        done += n


def _address(view: memoryview) -> int:
    """Address of ``view``'s first byte (views here are writable: read targets)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view)) if len(view) else 0


class ParallelIO:
    """A thread pool that hashes, writes and reads chunks while the caller goes on.

    Queued chunks are views of memory that exists anyway; staged device chunks are
    bounded by their staging ring. Bytes made for the save alone (packed strings) go to a
    lane of their own, ahead of the queue, so each is freed as soon as it is written
    instead of waiting behind gigabytes of arrays. The first error is re-raised by ``wait``.
    """

    def __init__(self, workers: int, progress: Progress | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuckpt-io")
        self._lane: ThreadPoolExecutor | None = None
        self._queued: deque[tuple[Future[Any], int]] = deque()
        self._queued_bytes = 0
        self._futures: list[Future[Any]] = []
        self._progress = progress
        self._progress_lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0, ahead: bool = False) -> Future[Any]:
        """Run ``fn(*args)`` on the pool, or with ``ahead`` on the lane for made bytes."""
        pool = self._pool
        if ahead:
            if self._lane is None:
                self._lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuckpt-io-made")
            pool = self._lane
        future = pool.submit(fn, *args)
        if self._progress is not None:
            future.add_done_callback(lambda f: self._finished(f, nbytes))
        self._futures.append(future)
        if ahead:
            self._hold_back(future, nbytes)
        return future

    def _hold_back(self, future: Future[Any], nbytes: int) -> None:
        """Wait while the lane has more than :data:`LANE_BYTES` to write: the thread that
        makes the bytes (holding the GIL) otherwise outruns the one writing them."""
        self._queued.append((future, nbytes))
        self._queued_bytes += nbytes
        while self._queued and (self._queued[0][0].done() or self._queued_bytes > LANE_BYTES):
            oldest, n = self._queued.popleft()
            wait([oldest])
            self._queued_bytes -= n

    def _finished(self, future: Future[Any], nbytes: int) -> None:
        if self._progress is not None and not future.cancelled() and future.exception() is None:
            with self._progress_lock:  # callers keep running totals
                self._progress(nbytes)

    def wait(self) -> None:
        try:
            for future in self._futures:
                future.result()
        finally:
            self._futures.clear()

    def close(self) -> None:
        """Cancel what has not started, wait for what has, and stop the threads."""
        for future in self._futures:
            future.cancel()
        self._pool.shutdown(wait=True)
        if self._lane is not None:
            self._lane.shutdown(wait=True)
