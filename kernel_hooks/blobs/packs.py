"""Pack blobs: chunks appended to a temporary file, published under the hash of their hashes.

A file per 256 KiB chunk ran at 0.31 GB/s where 2 MiB files ran at 1.16 (ext4, 4 threads,
500 MB); packs keep that speed with the small chunks incremental saves need. A pack is named
by the hash of its chunks' hashes and offsets, so it is content-addressed like any blob.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

import blake3

from gpuckpt_store.layout import temp_prefix
from gpuckpt_store.spare import claim

from .sizes import ALIGN, WRITEBACK_WINDOW


def digest_of(data: memoryview | bytes) -> str:
    return blake3.blake3(data).hexdigest()


def _drop_cache(fd: int, offset: int = 0, length: int = 0) -> None:
    """Start writeback of written pages and drop the clean ones: saving gigabytes then
    reuses a few cache pages instead of growing the cache (and evicting the user's files);
    about 2x faster where new pages are costly (benchmarks/bench_checkpoint.py)."""
    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)



class Pack:
    """A blob being written: chunks appended to a temporary file, named when published.

    With ``spare`` (a host-memory store's spare folder), the file is a spare one if there is
    one (kernel ``tag``'s own first), written over in place: its pages exist already, and a
    file written before took writes at 19 GB/s where a new one's first write ran at 1.5
    (:mod:`gpuckpt_store.spare`).
    """

    def __init__(self, directory: Path, spare: Path | None = None, tag: str = "") -> None:
        self.tmp = directory / f"{temp_prefix()}{secrets.token_hex(6)}"
        claimed = claim(spare, self.tmp, tag) if spare is not None else None
        self.reused = -1
        """Size of the spare file this pack writes over, or -1 (a new file)."""
        if claimed is not None:
            self.fd, self.reused = claimed
            os.fchmod(self.fd, 0o600)  # private whatever it was made with
        else:
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
            gap = (self.size, offset - self.size)
            self.size = offset + total
            at = offset
            for view, digest in zip(views, digests, strict=True):
                self._naming.update(digest + at.to_bytes(8, "little"))
                at += len(view)
        if self.reused > gap[0] and gap[1]:  # a spare file's old bytes are not left in the gap
            os.pwrite(self.fd, bytes(gap[1]), gap[0])
        done = 0
        while done < total:
            done += os.pwritev(self.fd, _after(views, done), offset + done)
        start = max(0, offset - WRITEBACK_WINDOW)
        _drop_cache(self.fd, start, offset + total - start)
        return offset

    def publish(self, directory: Path, announce: Callable[[str], None] | None = None) -> bool:
        """fsync and name the pack; False if an identical blob was already there.

        ``announce(name)`` is called before the blob appears under its name (a save's
        journal notes it, so no moment exists where the blob is published but unnoted).
        """
        if self.reused > self.size:
            os.ftruncate(self.fd, self.size)
        os.fsync(self.fd)
        _drop_cache(self.fd)  # now clean, the pages can go
        os.close(self.fd)
        self.fd = -1
        self.name = self.final_name()
        if announce is not None:
            announce(self.name)
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

    def final_name(self) -> str:
        """The name :meth:`publish` gives the pack, once nothing more is appended."""
        return self._naming.hexdigest()

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

