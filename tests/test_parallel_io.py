"""The save's I/O pool: bytes made for the save alone (packed strings) are written ahead of
the bulk queue, and the thread making them waits once too many are unwritten, so a big
string column never sits in memory whole."""

from __future__ import annotations

import threading

from kernel_hooks.blobs import LANE_BYTES, ParallelIO

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
