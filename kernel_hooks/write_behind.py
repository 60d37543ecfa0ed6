"""Writing a staged checkpoint into the store: the second half of a staged suspend.

A staged suspend has the kernel save into a store in host memory (``/dev/shm``, owner-only,
whole and signed) and ends the kernel at once; the server then runs this module as a process
of its own::

    python -m kernel_hooks.write_behind --staged ROOT --store ROOT --checkpoint ID [--bandwidth B]

It copies the checkpoint into the durable store as a save would write it: chunks the store
holds already are not written again, every chunk read from host memory is checked against
its hash (the hashing the store needs anyway), and the manifest is signed and published last.
A writer killed at any moment leaves the staged copy and every durable checkpoint as they
were; the next attempt collects what it left (its journal names a dead writer).

It prints one JSON line per half second, ``{"done": B, "total": B}``, and last
``{"ok": true, "id": ..., "bytes_written": ..., "seconds": ...}`` or ``{"ok": false,
"error": ..., "kind": ..., "permanent": ...}`` (``permanent``: the staged copy is damaged, see
:func:`gpuckpt_store.protocol.failed_with`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuckpt_store import (
    CheckpointError,
    CheckpointStore,
    IntegrityError,
    Piece,
    SaveJournal,
    collect_leftovers,
    protocol,
)
from gpuckpt_store.records import records_of

from .blobs import BlobStore, BlobWriter, ParallelIO
from .blobs.sizes import SEGMENT_BYTES

PROGRESS_SECONDS = 0.5
Progress = Callable[[int, int], None]


def write_behind(staged: CheckpointStore, store: CheckpointStore, checkpoint_id: str, *,
                 bandwidth: float = 0.0, progress: Progress | None = None) -> dict[str, Any]:
    """Copy checkpoint ``checkpoint_id`` from ``staged`` into ``store``; what was written.

    ``bandwidth`` (bytes per second, 0 for no limit) keeps the copy from taking the whole
    file system from the running kernels that share it.
    """
    started = time.perf_counter()
    manifest = staged.read_manifest(checkpoint_id)  # signed by this owner, or refused
    if checkpoint_id in store.ids():  # an earlier attempt published it: nothing to do
        store.read_manifest(checkpoint_id)
        return {"id": checkpoint_id, "bytes_written": 0, "seconds": time.perf_counter() - started}
    store.prepare()
    collect_leftovers(store)
    journal = SaveJournal(store)
    try:
        source = BlobStore(staged.blobs_dir, spare=staged.spare())
        written = _copy(manifest, source, store, journal, bandwidth, progress)
    finally:
        journal.close()
    return {"id": checkpoint_id, "bytes_written": written, "seconds": time.perf_counter() - started}


def _copy(manifest: dict[str, Any], source: BlobStore, store: CheckpointStore, journal: SaveJournal,
          bandwidth: float, progress: Progress | None) -> int:
    records = records_of(manifest)
    total = sum(r.nbytes for r in records)
    blobs = BlobStore(store.blobs_dir)
    writer = BlobWriter(blobs, store.chunk_locations(), journal)
    done = [0]

    def on_bytes(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    io = ParallelIO(blobs.workers, on_bytes)
    try:
        start = time.monotonic()
        submitted = 0
        for record in records:
            for piece in record.pieces(SEGMENT_BYTES):
                io.submit(_copy_piece, source, writer, piece, record.chunk, nbytes=piece.nbytes)
                submitted += piece.nbytes
                if bandwidth > 0:
                    time.sleep(max(0.0, start + submitted / bandwidth - time.monotonic()))
        io.wait()
        writer.finish(io)
        copied = [writer.record(r.nbytes, r.hashes, r.chunk) for r in records]
        out = {k: v for k, v in manifest.items() if k != "signature"}
        out["pickle"] = copied[0].to_json()
        out["buffers"] = [{**buffer, **record.to_json()}
                          for buffer, record in zip(manifest["buffers"], copied[1:], strict=True)]
        store.commit(out)
    except BaseException:
        io.close()
        writer.remove_created()
        raise
    finally:
        io.close()
    return writer.bytes_written


def _copy_piece(source: BlobStore, writer: BlobWriter, piece: Piece, chunk: int) -> None:
    """Read one piece of a staged blob and store its chunks that the store lacks."""
    path = source.path(piece.blob)
    data = bytearray(piece.nbytes)
    try:
        with open(path, "rb", buffering=0) as f:
            if os.preadv(f.fileno(), [data], piece.offset) != len(data):
                raise IntegrityError(f"the staged blob {path} is truncated")
    except FileNotFoundError:
        raise IntegrityError(f"the staged blob {path} is missing") from None
    claimed = writer.claim(memoryview(data), chunk)
    if claimed[0] != [digest for digest, _ in piece.chunks]:
        raise IntegrityError(f"the staged blob {path} is corrupt: its content does not match its hash")
    writer.write(claimed)


class _Lines:
    """Progress as JSON lines on stdout, at most every :data:`PROGRESS_SECONDS`."""

    def __init__(self) -> None:
        self.last = 0.0
        self.done = -1
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        with self.lock:
            if done == self.done or (now - self.last < PROGRESS_SECONDS and done < total):
                return
            self.last, self.done = now, done
            print(json.dumps({"done": done, "total": total}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernel_hooks.write_behind",
                                     description="Write a checkpoint staged in host memory into the store.")
    parser.add_argument("--staged", type=Path, required=True, help="root of the store in host memory")
    parser.add_argument("--store", type=Path, required=True, help="root of the durable store")
    parser.add_argument("--checkpoint", required=True, help="the checkpoint's id")
    parser.add_argument("--bandwidth", type=float, default=0.0, help="bytes per second at most (0: no limit)")
    args = parser.parse_args(argv)
    try:
        result = write_behind(CheckpointStore(args.staged), CheckpointStore(args.store), args.checkpoint,
                              bandwidth=args.bandwidth, progress=_Lines())
    except CheckpointError as e:
        print(json.dumps(protocol.failed_with(e)), flush=True)
        return 1
    except OSError as e:
        print(json.dumps(protocol.failed(f"writing to {args.store} failed: {e.strerror or e}")), flush=True)
        return 1
    print(json.dumps(protocol.succeeded(**result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
