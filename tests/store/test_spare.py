"""Spare files of a host-memory store: recycled blobs, claimed by the kernel's packs and written
over in place, never while someone reads them; a reserve allocated whole and trimmed.

Real files on ``/dev/shm`` (tmpfs, where staged copies live), the kernel's own ``Pack``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuckpt_store import CheckpointStore, SigningKey, collect_garbage, spare
from gpuckpt_store.store import PRIVATE_MODE
from kernel_hooks.blobs.folder import BlobStore
from kernel_hooks.blobs.packs import Pack
from kernel_hooks.blobs.sizes import ALIGN
from kernel_hooks.blobs.writer import BlobWriter


@pytest.fixture
def shm() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _store(root: Path) -> CheckpointStore:
    store = CheckpointStore(root / "staging", key=SigningKey(root / "key"))
    store.prepare()
    os.mkdir(store.spare_dir, PRIVATE_MODE)
    return store


def _blob(store: CheckpointStore, byte: int, size: int = 64 << 10) -> Path:
    path = store.blobs_dir / (f"{byte:02x}" * 32)
    path.write_bytes(bytes([byte]) * size)
    return path


def test_unused_blobs_become_spare_files_and_a_save_never_claims_one_a_reader_holds(shm: Path) -> None:
    store = _store(shm)
    free, read = _blob(store, 1), _blob(store, 2)
    inodes = {free.stat().st_ino: 1, read.stat().st_ino: 2}
    reader = os.open(read, os.O_RDONLY)  # a restored kernel's mapping holds its blob like this
    assert spare.lock_shared(reader, read)
    assert collect_garbage(store, recycle_for="k1") == 2
    assert not free.exists() and not read.exists()
    assert {(store.spare_dir / name).stat().st_ino for name in os.listdir(store.spare_dir)} == set(inodes)
    assert all(spare.tag_of(name) == "k1" for name in os.listdir(store.spare_dir))  # k1's next save first
    claimed = spare.claim(store.spare_dir, store.blobs_dir / "first")
    assert claimed is not None and inodes[os.fstat(claimed[0]).st_ino] == 1  # the free one
    assert spare.claim(store.spare_dir, store.blobs_dir / "second") is None  # the held one waits
    assert os.pread(reader, 4, 0) == bytes([2]) * 4
    os.close(reader)
    again = spare.claim(store.spare_dir, store.blobs_dir / "second")
    assert again is not None and inodes[os.fstat(again[0]).st_ino] == 2
    for fd, _ in (claimed, again):
        os.close(fd)
    _blob(store, 3)
    collect_garbage(store)  # not for a kernel (a deletion, not a suspend's recycling): freed
    assert os.listdir(store.spare_dir) == [] and sorted(os.listdir(store.blobs_dir)) == ["first", "second"]


def test_a_reader_that_opened_a_blob_just_before_it_was_recycled_finds_it_missing(shm: Path) -> None:
    store = _store(shm)
    blob = _blob(store, 4)
    late = os.open(blob, os.O_RDONLY)  # opened, not locked yet
    try:
        assert spare.recycle(blob, store.spare_dir, "k1")
        assert not spare.lock_shared(late, blob)  # its name is gone: it must not be read as the blob
    finally:
        os.close(late)


def test_a_pack_writes_over_a_spare_file_in_place(shm: Path) -> None:
    store = _store(shm)
    old = store.spare_dir / "k1.0a0b"
    old.write_bytes(b"\xff" * (1 << 20))  # a recycled blob's bytes
    inode = old.stat().st_ino
    (store.spare_dir / "k2.0c0d").write_bytes(bytes(1 << 20))  # another kernel's: taken last
    (store.spare_dir / "reserve.0e0f").write_bytes(bytes(1 << 20))
    pack = Pack(store.blobs_dir, store.spare(), "k1")
    assert pack.reused == 1 << 20 and not old.exists()
    first, second = os.urandom(5000), os.urandom(3000)
    pack.append([memoryview(first)], [b"a" * 32])
    offset = pack.append([memoryview(second)], [b"b" * 32])
    assert offset == ALIGN * 2
    assert pack.publish(store.blobs_dir)
    assert pack.name is not None
    published = store.blobs_dir / pack.name
    data = published.read_bytes()
    assert published.stat().st_ino == inode and len(data) == offset + len(second)  # cut to its size
    assert data[:5000] == first and data[offset:] == second
    assert data[5000:offset] == bytes(offset - 5000)  # the gap holds no old bytes
    assert stat.S_IMODE(published.stat().st_mode) == 0o600


def test_a_save_with_no_spare_file_writes_a_new_one(shm: Path) -> None:
    store = _store(shm)
    writer = BlobWriter(BlobStore(store.blobs_dir, spare=store.spare()))
    view = memoryview(os.urandom(3 << 20))
    hashes = writer.store(view)
    writer.finish()
    [pack] = writer.packs
    assert pack.reused == -1 and pack.name is not None
    record = writer.record(len(view), hashes)
    out = bytearray(len(view))
    for piece in record.pieces(1 << 20):
        writer.blobs.read_piece(piece, memoryview(out)[piece.start:piece.start + piece.nbytes], "test")
    assert out == view


def test_two_writers_never_claim_the_same_spare_file(shm: Path) -> None:
    store = _store(shm)
    for i in range(8):
        (store.spare_dir / f"f{i}").write_bytes(bytes([i]) * 4096)
    claimed: list[tuple[int, int] | None] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def claim(n: int) -> None:
        start.wait()
        got = spare.claim(store.spare_dir, store.blobs_dir / f"claimed-{n}")
        with lock:
            claimed.append(got)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = [c for c in claimed if c is not None]
    assert len(got) == 8 and all(size == 4096 for _, size in got)
    contents = {(store.blobs_dir / name).read_bytes()[:1] for name in os.listdir(store.blobs_dir)}
    assert len(contents) == 8  # each spare file went to exactly one writer
    for fd, _ in got:
        os.close(fd)


def test_a_reserve_is_allocated_whole_and_spare_files_go_with_their_kernels(shm: Path) -> None:
    folder = shm / "spare"
    folder.mkdir()
    added = spare.fill(folder, 2 * spare.FILL_BYTES + 1000)
    assert added == 2 * spare.FILL_BYTES
    assert spare.held(folder) >= 2 * spare.FILL_BYTES  # allocated, not sparse
    assert spare.fill(folder, 2 * spare.FILL_BYTES) == 0  # already there
    assert all(stat.S_IMODE((folder / name).stat().st_mode) == 0o600 for name in os.listdir(folder))
    for kernel in ("running", "gone"):
        (folder / f"{kernel}.0a").write_bytes(bytes(1 << 20))
    (folder / "not-a-spare-name").write_bytes(bytes(1 << 20))
    mib = 1 << 20
    assert spare.settle(folder, {"running"}, spare.FILL_BYTES, room=10 * spare.FILL_BYTES) == (
        spare.FILL_BYTES + 2 * mib)  # a reserve file beyond the reserve, the gone kernel's, the unnamed
    assert sorted(spare.tag_of(name) for name in os.listdir(folder)) == ["reserve", "running"]
    assert spare.settle(folder, {"running"}, spare.FILL_BYTES, room=2 * mib) == spare.FILL_BYTES  # largest first
    assert os.listdir(folder) == ["running.0a"]
    with pytest.raises(ValueError, match="cannot name"):
        spare.recycle(folder / "running.0a", folder, "../escape")
