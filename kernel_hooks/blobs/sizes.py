"""Sizes that shape a save and a restore, each with the measurement that chose it."""

import os

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
DEFAULT_WORKERS = max(4, min(16, os.cpu_count() or 1))
"""I/O threads of a save: hashing keeps them busy, so one per core (more gain nothing), and at
least 4, which overlap the disk's waits on small machines (2 cores: 4 threads were fastest). A
staged suspend is bound by this hashing, not by a disk: on a GPU host's 16 cores it may run
4x as many."""
READ_WORKERS = 8
"""I/O threads of a restore: they mostly wait for the disk, and more reads in flight kept it
busier (a 0.76 GB torch model, 2 cores: 1.08 GB/s with 4 threads, 1.34 with 8)."""
READER_BYTES = 16 << 20
"""A restore of fewer bytes than this per thread starts fewer threads (see :func:`readers`)."""
LANE_BYTES = 16 << 20
"""Bytes made for a save (packed strings) that may wait to be written: without a bound, the
strings of a 1 GB frame queued up to 98 MB."""


def readers(nbytes: int, most: int) -> int:
    """Threads for a restore of ``nbytes``: 2, 4, ... up to ``most``, at least
    :data:`READER_BYTES` each. A fresh kernel starts them at its first restore, each start
    waiting for the new thread to run: 20 MB restored from the page cache under load (2
    cores, load 4), medians of 9 runs, 45.5 ms with 8 threads, 32.5 ms with 2 (pickle 5:
    18.6 ms); from the disk, 49.9 against 50.8 ms."""
    threads = 2
    while threads < most and threads * READER_BYTES < nbytes:
        threads *= 2
    return min(threads, most)
