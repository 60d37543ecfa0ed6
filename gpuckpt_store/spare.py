"""Spare files: memory a host-memory store keeps for its next save to write over.

Writing into pages a process has not touched yet ran 5 to 45 times slower than into pages
already there (a new ``/dev/shm`` file at 1.5 GB/s against 19 for one written before, issue
29's table), so a staged suspend that allocates its copy anew pays for the memory, not for
the bytes. A store with a ``spare/`` folder therefore moves the files of the blobs it
recycles there instead of deleting them, and a save claims one (a rename: atomic, so two
writers never get the same) and writes its pack over it.

Each spare file is named for the kernel whose copy it was (``<kernel-id>.<token>``), or
``reserve.<token>``: a kernel's save writes over its own first, then the reserve, then any; the
server frees the files of kernels that are gone (:func:`settle`), so what is kept is at most
the last staged size of each kernel that may suspend again, plus the reserve.

A spare file is never written while someone holds it: a reader of a blob holds a shared
``flock`` on it for as long as it reads or maps it (:func:`lock_shared`), and a save claims only
a file it can lock exclusively at once (a blob mapped by a restored kernel waits, in the spare
folder, for that kernel's process to end).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
from collections.abc import Collection
from pathlib import Path

SPARE = "spare"
"""The folder beside ``blobs/`` that holds spare files (only a host-memory store has one)."""
FILL_BYTES = 128 << 20
"""Size of each file a reserve is made of: a pack's (``kernel_hooks.blobs.sizes.PACK_BYTES``),
so one pack claims one file."""


RESERVE = "reserve"
"""The tag of the files a reserve is made of."""
_TAG_RE = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)


def tag_of(name: str) -> str:
    """Whose spare file ``name`` is: a kernel id, :data:`RESERVE`, or "" (unknown)."""
    tag, dot, _ = name.partition(".")
    return tag if dot and _TAG_RE.fullmatch(tag) else ""


def _name(tag: str) -> str:
    if not _TAG_RE.fullmatch(tag):
        raise ValueError(f"{tag!r} cannot name a spare file")
    return f"{tag}.{secrets.token_hex(8)}"


def recycle(blob: Path, spare: Path, tag: str) -> bool:
    """Move ``blob`` into ``spare`` for a later save (of kernel ``tag`` first); True if moved."""
    name = _name(tag)
    try:
        os.rename(blob, spare / name)
    except FileNotFoundError:  # gone already, or the spare folder went: nothing to keep
        blob.unlink(missing_ok=True)
        return False
    return True


def claim(spare: Path, dest: Path, tag: str = "") -> tuple[int, int] | None:
    """Move a spare file that nobody holds to ``dest`` (a save's temporary name), kernel
    ``tag``'s own first, then the reserve's, then any: ``(fd, size)``, the file open for
    writing and locked exclusively until the fd is closed; None if there is none."""
    try:
        entries = list(os.scandir(spare))
    except FileNotFoundError:
        return None
    rank = {tag: 0, RESERVE: 1} if tag else {RESERVE: 1}
    entries.sort(key=lambda e: (rank.get(tag_of(e.name), 2), e.name))
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_WRONLY)
        except FileNotFoundError:  # another writer claimed it first
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(entry.path).st_ino != os.fstat(fd).st_ino:
                raise FileNotFoundError(entry.path)  # claimed and replaced between the listing and the lock
            os.rename(entry.path, dest)
        except (BlockingIOError, FileNotFoundError):  # held by a reader, or claimed meanwhile
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return fd, os.fstat(fd).st_size
    return None


def lock_shared(fd: int, path: Path) -> bool:
    """Hold a shared lock on the open blob ``fd`` while it is read; False if ``path`` no
    longer names it (it was recycled between the open and the lock: treat it as missing).
    The lock goes with the descriptor."""
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def held(folder: Path, tag: str | None = None) -> int:
    """Bytes the files in ``folder`` take (the spare files of ``tag`` only, if given)."""
    total = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if tag is not None and tag_of(entry.name) != tag:
            continue
        try:
            total += entry.stat(follow_symlinks=False).st_blocks * 512
        except FileNotFoundError:
            continue
    return total


def settle(spare: Path, kernels: Collection[str], reserve: int, room: int) -> int:
    """Free the spare files of kernels not in ``kernels`` (gone: they suspend no more), reserve
    files beyond ``reserve`` bytes, then the largest until at most ``room`` bytes are left;
    returns the bytes freed."""
    try:
        entries = list(os.scandir(spare))
    except FileNotFoundError:
        return 0
    files = []
    for entry in entries:
        try:
            files.append((entry.stat(follow_symlinks=False).st_blocks * 512, tag_of(entry.name), entry.path))
        except FileNotFoundError:
            continue
    freed, reserved, kept = 0, 0, []
    for size, tag, path in sorted(files, reverse=True):
        if tag == RESERVE and reserved + size <= reserve:
            reserved += size
        elif tag not in kernels or tag == RESERVE:
            freed += _unlink(path, size)
            continue
        kept.append((size, path))
    total = sum(size for size, _ in kept)
    for size, path in kept:
        if total <= room:
            break
        total -= size
        freed += _unlink(path, size)
    return freed


def _unlink(path: str, size: int) -> int:
    try:
        os.unlink(path)
    except FileNotFoundError:  # claimed by a save since the listing
        return 0
    return size


def fill(spare: Path, nbytes: int) -> int:
    """Add spare files until they hold ``nbytes``, each allocated whole (``posix_fallocate``:
    on tmpfs the pages exist once it returns); returns the bytes added. A full file system
    stops it where it is (what was made is kept)."""
    added, have = 0, held(spare, RESERVE)
    while have + added + FILL_BYTES // 2 < nbytes:
        path = spare / _name(RESERVE)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, FILL_BYTES)
        except OSError as e:
            os.close(fd)
            path.unlink(missing_ok=True)
            if e.errno in (errno.ENOSPC, errno.ENOMEM):
                break
            raise
        os.close(fd)
        added += FILL_BYTES
    return added
