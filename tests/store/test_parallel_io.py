"""The save's I/O pool: bytes made for the save alone (packed strings) are written ahead of
the bulk queue, and the thread making them waits once too many are unwritten, so a big
string column never sits in memory whole."""

from __future__ import annotations

import random
import threading

from kernel_hooks.blobs import CHUNK_BYTES, LANE_BYTES, BlobStore, BlobWriter, Pack, ParallelIO, digest_of
from kernel_hooks.blobs.buffers import BufferSink

PART = 4 << 20


def test_made_bytes_are_written_ahead_of_a_busy_queue():
    io = ParallelIO(2)
    gate = threading.Event()
    try:
        # both workers busy and four more queued behind them
        bulk = [io.submit(gate.wait, nbytes=PART) for _ in range(6)]
        ahead = io.submit(lambda: "written", nbytes=PART, ahead=True)
        assert ahead.result(timeout=30) == "written"
        assert not any(job.done() for job in bulk)
    finally:
        gate.set()
        io.close()


def test_the_maker_waits_while_the_lane_holds_more_than_its_bound():
    io = ParallelIO(2)
    gate = threading.Event()
    submitted: list[int] = []

    def make() -> None:
        for i in range(10):
            io.submit(gate.wait, nbytes=PART, ahead=True)
            submitted.append(i)

    maker = threading.Thread(target=make)
    try:
        maker.start()
        maker.join(timeout=1)
        assert maker.is_alive(), "the maker should be held back while nothing is written"
        assert len(submitted) == LANE_BYTES // PART
        gate.set()
        maker.join(timeout=30)
        assert len(submitted) == 10
        io.wait()
    finally:
        gate.set()
        io.close()


def test_made_bytes_are_hashed_by_their_maker_and_only_written_on_the_lane(tmp_path, monkeypatch):
    """The lane thread hashing made bytes waited for the GIL their maker holds, once per
    chunk: the maker hashes and claims them, the lane only appends."""
    writer = BlobWriter(BlobStore(tmp_path))
    io = ParallelIO(2)
    gate = threading.Event()
    append = Pack.append

    def held(self: Pack, views: list[memoryview], digests: list[bytes]) -> int:
        gate.wait()
        return append(self, views, digests)

    monkeypatch.setattr(Pack, "append", held)
    data = random.Random(0).randbytes(3 * CHUNK_BYTES)
    try:
        pending = BufferSink(writer, io).add_host("key", data, memoryview(data), made=True)
        # nothing is written yet, but every chunk is hashed and claimed already
        assert not any(job.done() for job in pending.futures)
        assert writer.bytes_written == len(data)
        gate.set()
        io.wait()
        writer.finish(io)
        record = pending.record()
        assert record.hashes == [digest_of(memoryview(data)[i:i + CHUNK_BYTES])
                                 for i in range(0, len(data), CHUNK_BYTES)]
        dest = bytearray(len(data))
        for piece in record.pieces(len(data)):
            writer.blobs.read_piece(piece, memoryview(dest)[piece.start:piece.start + piece.nbytes], "test")
        assert dest == data
    finally:
        gate.set()
        io.close()
