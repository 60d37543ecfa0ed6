"""The store package on its own: garbage collection of what dead saves left, ids, modes.

No kernel is needed: these drive ``gpuckpt_store`` directly on real files, as both the
kernel and the server do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuckpt_store import (
    BufferRecord,
    CheckpointNotFound,
    CheckpointStore,
    SaveJournal,
    SigningKey,
    collect_garbage,
    collect_leftovers,
)
from gpuckpt_store.store import FORMAT_VERSION

HOUR = 3600


def _store(tmp_path: Path) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "store", key=SigningKey(tmp_path / "key"))
    store.prepare()
    return store


def _blob(store: CheckpointStore, byte: int, age: float = 0.0) -> str:
    name = f"{byte:02x}" * 32
    path = store.blobs_dir / name
    path.write_bytes(bytes([byte]) * 100)
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return name


def _checkpoint(store: CheckpointStore, blob: str) -> str:
    """A published checkpoint whose pickle lies in ``blob``."""
    record = BufferRecord(100, 100, ["ab" * 32], [blob], [(0, 0, 1)])
    checkpoint_id = store.new_id()
    store.commit({"format": FORMAT_VERSION, "id": checkpoint_id, "owner": store.owner,
                  "pickle": record.to_json(), "buffers": []})
    return checkpoint_id


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _journal(store: CheckpointStore, pid: int, blobs: list[str], host: str | None = None) -> Path:
    """A journal as a save of process ``pid`` on ``host`` (this one) leaves it."""
    import socket

    path = store.writers_dir / f"{host or socket.gethostname()}-{pid}-0123456789ab"
    path.write_text("".join(f"{b}\n" for b in blobs))
    return path


def _blobs(store: CheckpointStore) -> set[str]:
    return set(os.listdir(store.blobs_dir))


def test_blobs_of_a_dead_save_go_at_once_and_live_saves_keep_theirs(tmp_path: Path) -> None:
    store = _store(tmp_path)
    kept = _blob(store, 1)
    _checkpoint(store, kept)
    orphan = _blob(store, 2)  # published by a save killed before its manifest
    dead = _journal(store, _dead_pid(), [orphan])
    live = SaveJournal(store)  # a save in progress in this process...
    in_progress = _blob(store, 3)
    live.add(in_progress)  # ...which published this one
    recent = _blob(store, 4)  # no journal names it, and it is new: a live save may reuse it
    old = _blob(store, 5, age=2 * HOUR)  # no journal names it, and it is old

    collect_garbage(store)

    assert _blobs(store) == {kept, in_progress, recent}
    assert not dead.exists() and live.path.exists()
    live.close()
    collect_garbage(store)  # no save in progress: whatever no manifest names goes
    assert _blobs(store) == {kept}
    assert old not in _blobs(store)


def test_another_hosts_journal_protects_its_blobs_until_it_is_stale(tmp_path: Path) -> None:
    store = _store(tmp_path)
    theirs = _blob(store, 6)
    journal = _journal(store, 1, [theirs], host="other-node")
    collect_garbage(store)
    assert _blobs(store) == {theirs}  # a save on another node may still need it
    os.utime(journal, (time.time() - 7 * HOUR, time.time() - 7 * HOUR))
    collect_garbage(store)
    assert _blobs(store) == set() and not journal.exists()


def test_the_next_save_collects_what_a_dead_save_left(tmp_path: Path) -> None:
    store = _store(tmp_path)
    orphan = _blob(store, 7)
    temporary = store.blobs_dir / f".tmp-{os.uname().nodename}-{_dead_pid()}-0a1b2c"
    temporary.write_bytes(b"half a pack")
    _journal(store, _dead_pid(), [orphan])
    collect_leftovers(store)
    assert _blobs(store) == set()
    assert list(store.writers_dir.iterdir()) == []


def test_a_temporary_file_published_while_leftovers_are_listed_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    temporary = store.blobs_dir / f".tmp-{os.uname().nodename}-{os.getpid()}-0a1b2c"
    temporary.write_bytes(b"a pack")
    listed = list(os.scandir(store.blobs_dir))
    temporary.rename(store.blobs_dir / ("ab" * 32))  # its live writer publishes it after the listing
    monkeypatch.setattr("gpuckpt_store.collect.os.scandir", lambda folder: iter(listed))
    collect_leftovers(store)
    assert _blobs(store) == {"ab" * 32}


def test_ids_are_ascii_and_bad_ones_are_not_repeated_whole(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for bad in ("２０２４０１０１-０００００００-deadbeef", "٢٠٢٤٠١٠١-٠٠٠٠٠٠-deadbeef", "x" * 5000):
        with pytest.raises(CheckpointNotFound) as raised:
            store.read_manifest(bad)
        assert len(str(raised.value)) < 200, str(raised.value)
    assert "(5000 characters)" in str(raised.value)


def test_a_new_store_root_is_not_open_to_others_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        store = CheckpointStore(tmp_path / "new" / "store", key=SigningKey(tmp_path / "key"))
        store.prepare()
    finally:
        os.umask(previous)
    mode = {path: path.stat().st_mode & 0o777 for path in (store.root.parent, store.root, store.base,
                                                           store.blobs_dir, store.checkpoints)}
    assert mode == {store.root.parent: 0o700, store.root: 0o711, store.base: 0o700, store.blobs_dir: 0o700,
                    store.checkpoints: 0o700}
