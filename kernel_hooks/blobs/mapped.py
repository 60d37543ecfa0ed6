"""Host buffers restored from a host-memory store by mapping its files instead of copying them.

A staged copy's pages hold the bytes already: reading them into new memory pays for that memory
(its first write ran several times slower than a copy into pages that exist, issue 29) and
holds the state twice. Here each extent of a buffer is mapped privately (copy on write: what
the kernel then writes never reaches the file) at its place in one range reserved for the
buffer, and every chunk's hash is checked through the mapping, on the read pool, before the
buffer is used (1.5 GB on the development VM, ``benchmarks/bench_suspend.py``: a resume from
host memory in 1.09-1.28 s mapped, 2.47-2.87 s copied).

While a buffer is mapped its blobs stay open with a shared ``flock``: a save never writes over
a spare file someone holds (:func:`gpuckpt_store.spare.claim`), because a private mapping still
shows the file's later writes on the pages the kernel has not written.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from concurrent.futures import Future

from gpuckpt_store import BufferRecord, IntegrityError

from .folder import BlobStore, address_of
from .parallel import ParallelIO
from .sizes import SEGMENT_BYTES

_MAP_FIXED = 0x10
"""Linux's ``MAP_FIXED`` (not in Python's ``mmap`` module): map at this address, replacing
what the reserved range had there."""
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_FAILED = ctypes.c_void_p(-1).value


def mappable(record: BufferRecord) -> bool:
    """Whether every extent starts on a page in its blob and in the buffer (saves align
    them; a checkpoint written otherwise is read, not mapped)."""
    start = 0
    for _, offset, count in record.extents:
        if offset % mmap.PAGESIZE or start % mmap.PAGESIZE:
            return False
        start += count * record.chunk
    return record.nbytes > 0


class MappedBuffers:
    """Maps stored buffers of a host-memory store into the kernel, verified by hash."""

    def __init__(self, blobs: BlobStore, io: ParallelIO) -> None:
        self.blobs = blobs
        self.io = io

    def load(self, record: BufferRecord, what: str) -> tuple[mmap.mmap, list[Future[None]]]:
        """``record``'s bytes as a private mapping of the staged pages, and the hash checks
        queued on the pool (the buffer may be used once they all succeed)."""
        memory = mmap.mmap(-1, record.nbytes, flags=mmap.MAP_PRIVATE)  # the range the extents fill
        held: dict[str, int] = {}
        try:
            base, start = address_of(memoryview(memory)), 0
            for b, offset, count in record.extents:
                blob = record.blobs[b]
                fd = held.get(blob)
                if fd is None:
                    fd = held[blob] = self.blobs.open_held(blob, what)
                length = min(count * record.chunk, record.nbytes - start)
                if os.fstat(fd).st_size < offset + length:  # a mapping past the end faults
                    raise IntegrityError(f"blob {self.blobs.path(blob)} of {what} is truncated")
                _map(base + start, length, fd, offset)
                start += length
        except BaseException:
            memory.close()
            _close(list(held.values()))
            raise
        weakref.finalize(memory, _close, list(held.values()))  # the locks go with the mapping
        view = memoryview(memory)
        checks = [self.io.submit(self.blobs.check, piece, view[piece.start:piece.start + piece.nbytes], what,
                                 nbytes=piece.nbytes)
                  for piece in record.pieces(SEGMENT_BYTES)]
        return memory, checks


def _map(address: int, length: int, fd: int, offset: int) -> None:
    got = _libc.mmap(address, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | _MAP_FIXED, fd, offset)
    if got == _FAILED or got != address:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mapping a staged blob failed: {os.strerror(errno)}")


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
