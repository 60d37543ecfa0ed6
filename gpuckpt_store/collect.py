"""Taking back what no checkpoint needs: leftovers of saves that died, and unused blobs.

A save publishes its blobs before its manifest (which names them), so a save killed in
between leaves blobs that no manifest names. Each save therefore keeps a journal, from
before it looks for reusable chunks until it ends, listing every blob it published:

* blobs a *dead* writer's journal lists, and that no manifest names, go at once;
* with no save in progress, every blob no manifest names goes at once;
* while some save is in progress, a blob that no manifest and no live journal names goes
  only once it is ``min_age`` old (that save may be about to reuse it: reused blobs have
  their mtime refreshed, see :meth:`~.store.CheckpointStore.chunk_locations`).

A writer is dead when its host is this one and its pid is gone, or its journal has not
been touched for :data:`STALE_SECONDS` (another host's).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .errors import IntegrityError
from .layout import MANIFEST, is_checkpoint_id, is_digest
from .records import referenced_blobs
from .spare import recycle


class StoreFolders(Protocol):
    """The folders of a :class:`~.store.CheckpointStore` that collection reads (the store
    calls collection, so collection names only what it needs of it)."""

    @property
    def checkpoints(self) -> Path: ...

    @property
    def blobs_dir(self) -> Path: ...

    @property
    def writers_dir(self) -> Path: ...

    @property
    def spare_dir(self) -> Path: ...

STALE_SECONDS = 6 * 3600
"""Temporary files and journals of another host are only taken as dead once this old."""
_TMP_RE = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>[0-9]+)-[0-9a-f]+", re.ASCII)
_JOURNAL_RE = re.compile(r"(?P<host>.+)-(?P<pid>[0-9]+)-[0-9a-f]+", re.ASCII)


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs on this host; a zombie (killed, not yet reaped) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def _writer_alive(host: str, pid: int, mtime: float, now: float) -> bool:
    if host == socket.gethostname():
        return _pid_alive(pid)
    return now - mtime < STALE_SECONDS


class SaveJournal:
    """The journal of one save in progress: the blobs it published, one name per line.

    Created before the save looks for reusable chunks, removed when it ends; a journal
    left behind names a dead writer's blobs, which :func:`collect_garbage` removes.
    """

    def __init__(self, store: StoreFolders) -> None:
        self.path = store.writers_dir / f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(6)}"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "w")

    def add(self, blob: str) -> None:
        """Note ``blob`` as published by this save (call it right after publishing)."""
        self._file.write(f"{blob}\n")
        self._file.flush()

    def close(self) -> None:
        """The save ended (its manifest is published, or it failed and took its blobs back)."""
        self._file.close()
        self.path.unlink(missing_ok=True)


@dataclass
class _Writers:
    """What the journals of an owner say."""

    live: int = 0
    protected: set[str] = field(default_factory=set)
    """Blobs live saves published."""
    orphaned: set[str] = field(default_factory=set)
    """Blobs dead saves published."""
    dead: list[Path] = field(default_factory=list)


def _read_journals(store: StoreFolders, now: float) -> _Writers:
    writers = _Writers()
    try:
        entries = list(os.scandir(store.writers_dir))
    except FileNotFoundError:
        return writers
    for entry in entries:
        m = _JOURNAL_RE.fullmatch(entry.name)
        if not m:
            continue
        try:
            names = {line for line in Path(entry.path).read_text().split() if is_digest(line)}
            mtime = entry.stat().st_mtime
        except FileNotFoundError:
            continue  # that save just ended
        if _writer_alive(m["host"], int(m["pid"]), mtime, now):
            writers.live += 1
            writers.protected |= names
        else:
            writers.orphaned |= names
            writers.dead.append(Path(entry.path))
    return writers


def _named_by_manifests(store: StoreFolders) -> set[str]:
    """Blobs any manifest on disk names, trusted or not: what might still be restored is
    never deleted (a manifest that fails its signature is refused on load, not destroyed)."""
    named: set[str] = set()
    try:
        folders = os.listdir(store.checkpoints)
    except FileNotFoundError:
        return named
    for name in folders:
        if not is_checkpoint_id(name):
            continue
        try:
            named |= referenced_blobs(json.loads((store.checkpoints / name / MANIFEST).read_text()))
        except (OSError, ValueError, KeyError, TypeError, IntegrityError):
            continue  # gone since, or damaged: it names nothing readable
    return named


def collect_garbage(store: StoreFolders, min_age: float = 3600.0, *, recycle_for: str | None = None) -> int:
    """Delete the blobs no checkpoint needs (see the module doc); returns how many. With
    ``recycle_for`` (a kernel id), a store with a spare folder moves them there instead, for
    that kernel's next save to write over (:func:`.spare.recycle`)."""
    spare = store.spare_dir if recycle_for is not None and store.spare_dir.is_dir() else None
    now = time.time()
    writers = _read_journals(store, now)
    keep = _named_by_manifests(store) | writers.protected
    removed = 0
    try:
        entries = list(os.scandir(store.blobs_dir))
    except FileNotFoundError:
        entries = []
    for entry in entries:
        if not is_digest(entry.name) or entry.name in keep:
            continue
        try:
            if entry.name in writers.orphaned or not writers.live or now - entry.stat().st_mtime >= min_age:
                if spare is None:
                    os.unlink(entry.path)
                else:
                    recycle(Path(entry.path), spare, recycle_for or "")
                removed += 1
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
    for journal in writers.dead:
        journal.unlink(missing_ok=True)
    return removed


def collect_leftovers(store: StoreFolders) -> None:
    """Remove what saves that died left: temporary files, and (if a dead writer's journal
    is found) the blobs it published. A save calls it before it starts its own journal."""
    now = time.time()
    for folder in (store.blobs_dir, store.checkpoints):
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            m = _TMP_RE.fullmatch(entry.name)
            if not m:
                continue
            try:  # a live writer may publish (rename) its file between the listing and here
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if _writer_alive(m["host"], int(m["pid"]), mtime, now):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                Path(entry.path).unlink(missing_ok=True)
    if _read_journals(store, now).dead:
        collect_garbage(store)
