"""Content-addressed blobs: big buffers cut into chunks, hashed and written in parallel.

A buffer is stored as fixed-size chunks named by their BLAKE3 hash, so a chunk that an
earlier checkpoint already wrote costs a ``stat`` instead of a write, and a small change to
a big array rewrites only the chunks it touched. Hashing and writing run on a small thread
pool (both release the GIL), so the two overlap and the disk stays busy; buffers are read
and written straight from the caller's memory, never copied whole.
"""

from __future__ import annotations

import io
import os
import secrets
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from .errors import IntegrityError

DEFAULT_CHUNK_BYTES = 2 << 20
"""Chunk size of host buffers. A contiguous change of L bytes rewrites about L plus one
chunk, so small chunks keep incremental saves small (a 1% change to 1 GB of arrays in 4
places wrote 6.7% of it with 8 MiB chunks, 1.5% with 1 MiB; benchmarks/bench_peers.py)
with no measurable loss of throughput on the machine that measured it."""
DEFAULT_WHOLE_BYTES = 4 << 20
"""Host buffers up to this size are one blob: splitting them saves little and costs files."""
DEVICE_CHUNK_BYTES = 8 << 20
"""Chunk size of device (GPU) buffers: the size of their pinned host staging slots."""
DEFAULT_WORKERS = 4
HASH_NAME = "blake3"
_HEX = frozenset("0123456789abcdef")

Progress = Callable[[int], None]


def digest_of(data: memoryview | bytes) -> str:
    return blake3.blake3(data).hexdigest()


def is_digest(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


def _drop_cache(fd: int) -> None:
    """Let the kernel drop a written blob's pages: saving gigabytes then reuses a few cache
    pages instead of growing the cache (and evicting the user's files); about 2x faster
    where new pages are costly (measured by benchmarks/bench_checkpoint.py)."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def temp_prefix() -> str:
    """Prefix of this process's temporary files, so cleanup can tell whose they are."""
    return f".tmp-{socket.gethostname()}-{os.getpid()}-"


@dataclass
class BufferRecord:
    """Where one buffer's bytes live: its size, chunk size and chunk hashes in order."""

    nbytes: int
    chunk: int
    hashes: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"nbytes": self.nbytes, "chunk": self.chunk, "hashes": self.hashes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BufferRecord:
        nbytes, chunk, hashes = data["nbytes"], data["chunk"], data["hashes"]
        expected = -(-nbytes // chunk) if nbytes else 0
        if len(hashes) != expected or not all(is_digest(h) for h in hashes):
            raise IntegrityError("a buffer record in the manifest is malformed")
        return cls(nbytes, chunk, list(hashes))

    def spans(self) -> list[tuple[str, int, int]]:
        """(hash, offset, length) of each chunk."""
        return [
            (h, i * self.chunk, min(self.chunk, self.nbytes - i * self.chunk))
            for i, h in enumerate(self.hashes)
        ]


@dataclass
class WriteStats:
    bytes_written: int = 0
    bytes_reused: int = 0
    blobs_written: int = 0
    blobs_reused: int = 0
    created: dict[str, int] = field(default_factory=dict)
    """Blobs this save wrote, with their mtime (ns): what to take back if the save fails."""
    pending: dict[str, tuple[Path, int]] = field(default_factory=dict)
    """Blobs written but not yet synced and named: {hash: (temporary file, size)}."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def claim(self, digest: str) -> bool:
        """True if this save is not already writing a blob ``digest`` (then the caller does)."""
        with self._lock:
            if digest in self.pending:
                return False
            self.pending[digest] = (Path(), 0)
            return True

    def stage(self, digest: str, tmp: Path, nbytes: int) -> None:
        with self._lock:
            self.pending[digest] = (tmp, nbytes)

    def unstage(self, digest: str) -> None:
        with self._lock:
            self.pending.pop(digest, None)

    def add(self, nbytes: int, written: bool, path: Path | None = None) -> None:
        with self._lock:
            if written:
                self.bytes_written += nbytes
                self.blobs_written += 1
                if path is not None:
                    self.created[path.name] = os.stat(path).st_mtime_ns
            else:
                self.bytes_reused += nbytes
                self.blobs_reused += 1


class BlobStore:
    """The ``blobs/`` folder of one owner's store."""

    def __init__(self, directory: Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 whole_bytes: int = DEFAULT_WHOLE_BYTES, workers: int = DEFAULT_WORKERS) -> None:
        self.directory = directory
        self.chunk_bytes = chunk_bytes
        self.whole_bytes = whole_bytes
        self.workers = workers

    def chunk_for(self, nbytes: int) -> int:
        """The chunk size of a host buffer of ``nbytes``."""
        return nbytes if 0 < nbytes <= self.whole_bytes else self.chunk_bytes

    def path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise IntegrityError(f"{digest!r} is not a blob hash")
        return self.directory / digest

    def has(self, digest: str, nbytes: int) -> bool:
        try:
            return os.stat(self.path(digest)).st_size == nbytes
        except FileNotFoundError:
            return False

    def store_chunk(self, view: memoryview, stats: WriteStats) -> str:
        """Hash ``view`` and, unless a blob of that hash exists, write it to a temporary file.

        The file is synced and named by :meth:`publish`, for all of a save's chunks at
        once: an fsync per 1 MiB chunk forced a journal commit each and cost up to 40% of
        the save's speed (measured on ext4 by benchmarks/bench_peers.py). Until then the
        blob is not visible under its hash, so a crash never leaves a named blob that is
        incomplete. ``fadvise(DONTNEED)`` starts the writeback at once.
        """
        digest = digest_of(view)
        if self.has(digest, len(view)):
            # Refresh the mtime so garbage collection spares a blob this save reuses.
            os.utime(self.path(digest))
            stats.add(len(view), written=False)
            return digest
        if not stats.claim(digest):  # the same bytes twice in this save: written once
            stats.add(len(view), written=False)
            return digest
        tmp = self.directory / f"{temp_prefix()}{secrets.token_hex(6)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                done = 0
                while done < len(view):
                    done += os.write(fd, view[done:])
                _drop_cache(fd)
            finally:
                os.close(fd)
        except BaseException:
            tmp.unlink(missing_ok=True)
            stats.unstage(digest)
            raise
        stats.stage(digest, tmp, len(view))
        return digest

    def publish(self, stats: WriteStats, io: ParallelIO | None = None, digests: list[str] | None = None) -> None:
        """fsync the blobs :meth:`store_chunk` wrote and name them (all, or ``digests``).

        Call it once those chunks are written and before a manifest refers to them; on
        ``io``'s threads if given (a save publishes everything at once that way).
        """
        for digest in list(stats.pending) if digests is None else digests:
            tmp, nbytes = stats.pending.get(digest, (Path(), 0))
            if tmp.name:
                if io is None:
                    self._publish_one(digest, tmp, nbytes, stats)
                else:
                    io.submit(self._publish_one, digest, tmp, nbytes, stats)
        if io is not None:
            io.wait()

    def _publish_one(self, digest: str, tmp: Path, nbytes: int, stats: WriteStats) -> None:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
            _drop_cache(fd)  # now clean, the pages can go
        finally:
            os.close(fd)
        os.replace(tmp, self.path(digest))
        stats.unstage(digest)
        stats.add(nbytes, written=True, path=self.path(digest))

    def remove_created(self, stats: WriteStats) -> None:
        """Delete the blobs a failed save wrote, unless another save has reused them since."""
        for tmp, _ in stats.pending.values():
            if tmp.name:
                tmp.unlink(missing_ok=True)
        for digest, mtime in stats.created.items():
            path = self.path(digest)
            try:
                if os.stat(path).st_mtime_ns == mtime:
                    path.unlink()
            except FileNotFoundError:
                pass

    def read_chunk(self, digest: str, dest: memoryview, what: str) -> None:
        """Read blob ``digest`` into ``dest`` and check its hash; ``what`` names it in errors."""
        path = self.path(digest)
        try:
            with open(path, "rb", buffering=0) as f:
                if os.fstat(f.fileno()).st_size != len(dest):
                    raise IntegrityError(f"blob {path} of {what} has the wrong size")
                done = 0
                while done < len(dest):
                    n = f.readinto(dest[done:])
                    if not n:
                        raise IntegrityError(f"blob {path} of {what} is truncated")
                    done += n
        except FileNotFoundError:
            raise IntegrityError(f"blob {path} of {what} is missing") from None
        if digest_of(dest) != digest:
            raise IntegrityError(f"blob {path} of {what} is corrupt: its content does not match its hash")


class ParallelIO:
    """A thread pool that hashes, writes and reads chunks while the caller goes on.

    Queued chunks are views of memory that exists anyway; staged device chunks are
    bounded by their staging ring. The first error is re-raised by ``wait``.
    """

    def __init__(self, workers: int, progress: Progress | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuckpt-io")
        self._futures: list[Future[Any]] = []
        self._progress = progress
        self._progress_lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0) -> Future[Any]:
        future = self._pool.submit(fn, *args)
        if self._progress is not None:
            future.add_done_callback(lambda f: self._finished(f, nbytes))
        self._futures.append(future)
        return future

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


class BlobStream(io.RawIOBase):
    """A blob written as a stream (the pickle), hashed on the way, named when committed.

    A write error is kept in ``error``, so a caller can tell a full disk from an object
    that could not be pickled.
    """

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.count = 0
        self.error: OSError | None = None
        self._hasher = blake3.blake3()
        self._tmp = blobs.directory / f"{temp_prefix()}{secrets.token_hex(6)}"
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._hasher.update(view)
        try:
            done = 0
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError as e:
            self.error = e
            raise
        self.count += len(view)
        return len(view)

    def commit(self, stats: WriteStats) -> str:
        """fsync and publish; returns the hash (an identical blob already stored is kept)."""
        digest = self._hasher.hexdigest()
        os.fsync(self._fd)
        _drop_cache(self._fd)
        os.close(self._fd)
        self._fd = -1
        if self.blobs.has(digest, self.count):
            os.utime(self.blobs.path(digest))
            self._tmp.unlink()
            stats.add(self.count, written=False)
        else:
            os.replace(self._tmp, self.blobs.path(digest))
            stats.add(self.count, written=True, path=self.blobs.path(digest))
        return digest

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._tmp.unlink(missing_ok=True)
