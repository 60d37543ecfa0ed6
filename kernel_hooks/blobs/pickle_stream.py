"""The namespace pickle, stored chunk by chunk as the pickler writes it."""

from __future__ import annotations

import io
from concurrent.futures import Future, wait
from typing import Any

from .parallel import ParallelIO
from .sizes import PICKLE_CHUNK_BYTES
from .writer import BlobWriter


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
        # Whole chunks, never resized; from the heap, whose memory the process mostly has
        # already: fresh mapped buffers put 2 MB of new memory on every save (a save of 50,000
        # small objects took 2.1 MB beyond pickle 5's 0.0), heap ones none (0.0 against 0.0).
        self._buffers = [bytearray(buffer_bytes), bytearray(buffer_bytes)]
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

