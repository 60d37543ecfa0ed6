"""The ``blobs/`` folder of one owner's store, and reading pieces of blobs back, verified."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from gpuckpt_store import IntegrityError, Piece
from gpuckpt_store.layout import is_digest
from gpuckpt_store.spare import lock_shared

from .packs import digest_of
from .sizes import ALIGN, CHUNK_BYTES, DEFAULT_WORKERS, READ_WORKERS, SEGMENT_BYTES


class BlobStore:
    """The ``blobs/`` folder of one owner's store."""

    def __init__(self, directory: Path, *, chunk_bytes: int = CHUNK_BYTES, workers: int = DEFAULT_WORKERS,
                 read_workers: int = READ_WORKERS, spare: Path | None = None, spare_tag: str = "") -> None:
        if SEGMENT_BYTES % chunk_bytes:
            raise ValueError(f"the chunk size must divide {SEGMENT_BYTES}")
        self.directory = directory
        self.spare = spare
        """The store's spare folder, if it keeps one: packs write over its files, and reads
        hold a shared lock so a blob being read is never recycled under them."""
        self.spare_tag = spare_tag
        """Whose spare files packs take first: the saving kernel's id."""
        self.chunk_bytes = chunk_bytes
        self.workers = workers
        self.read_workers = read_workers

    def path(self, blob: str) -> Path:
        if not is_digest(blob):
            raise IntegrityError(f"{blob!r} is not a blob hash")
        return self.directory / blob

    def open_held(self, blob: str, what: str) -> int:
        """``blob`` open for reading; in a host-memory store with a shared ``flock``, so no
        save writes over it while the fd is open (``what`` names it in errors)."""
        path = self.path(blob)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise IntegrityError(f"blob {path} of {what} is missing") from None
        if self.spare is not None and not lock_shared(fd, path):
            os.close(fd)
            raise IntegrityError(f"blob {path} of {what} is missing")
        return fd

    def check(self, piece: Piece, data: memoryview, what: str) -> None:
        """Raise unless each chunk of ``data`` (``piece``'s bytes) matches its hash."""
        start = 0
        for digest, length in piece.chunks:
            if digest_of(data[start:start + length]) != digest:
                raise IntegrityError(f"blob {self.path(piece.blob)} of {what} is corrupt: its content does not "
                                     "match its hash")
            start += length

    def read_piece(self, piece: Piece, dest: memoryview, what: str) -> None:
        """Read ``piece`` into ``dest`` and check each chunk's hash; ``what`` names it in errors."""
        path = self.path(piece.blob)
        fd = self.open_held(piece.blob, what)
        try:
            if os.fstat(fd).st_size < piece.offset + len(dest):
                raise IntegrityError(f"blob {path} of {what} is truncated")
            _read(fd, path, dest, piece.offset, what)
        finally:
            os.close(fd)
        self.check(piece, dest, what)


def _read(fd: int, path: Path, dest: memoryview, offset: int, what: str) -> None:
    """Fill ``dest`` from ``offset``: aligned, the bulk with ``O_DIRECT`` (the disk writes
    straight into ``dest``; 1.16 against 0.82 GB/s buffered, 500 MB in 2 MiB pieces, 4
    threads, hashes checked), the rest through the page cache."""
    done = 0
    bulk = len(dest) // ALIGN * ALIGN
    if bulk and offset % ALIGN == 0 and address_of(dest) % ALIGN == 0:
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


def address_of(view: memoryview) -> int:
    """Address of ``view``'s first byte (views here are writable: read targets)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view)) if len(view) else 0

