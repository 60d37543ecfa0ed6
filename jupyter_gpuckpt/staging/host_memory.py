"""Host memory that outlives a kernel: where a staged suspend puts the kernel's state.

A staged suspend has the kernel save into a store on ``/dev/shm`` (whole, signed, private
to the owner), ends the kernel, and writes the checkpoint into the durable store afterwards
(:mod:`.write_behind`). This module is that area: where it is, whether it can be used, how
much of it a suspend may take (``GPUCheckpointApp.host_memory_limit``), and which staged
copies go when room is needed (those already durable, oldest first).
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from gpuckpt_store import CheckpointNotFound, CheckpointStore, SaveError

_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(%|[KMGT]i?B?|B)?\s*", re.IGNORECASE)
GROWTH_BYTES = 64 << 20
"""What a staged suspend may write beyond twice its last checkpoint's size."""
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def default_root() -> Path:
    """``/dev/shm/jupyter-gpuckpt-<user>`` (memory, gone with the node), else a temporary
    folder where there is no ``/dev/shm``."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() else Path(tempfile.gettempdir())
    return base / f"jupyter-gpuckpt-{getpass.getuser()}"


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_limit(text: str) -> int:
    """``"25%"`` of physical memory, ``"8G"`` / ``"8GiB"`` / ``"512M"`` / ``"1000000"`` bytes."""
    m = _SIZE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a size: write bytes (8G, 512M, 1000000) or a share of memory (25%)")
    number, unit = float(m[1]), (m[2] or "").upper()
    if unit == "%":
        if number > 100:
            raise ValueError(f"{text!r}: a share of memory is at most 100%")
        return int(physical_memory() * number / 100)
    return int(number * _UNITS[unit[:1]])


class HostMemory:
    """The staging area of one user's server.

    Parameters
    ----------
    root
        A store root in host memory (see :func:`default_root`).
    limit
        Bytes the staged copies may take in all; a suspend that would pass it is written
        straight to the store instead.
    """

    def __init__(self, root: Path, limit: int) -> None:
        self.root = root
        self.limit = limit
        self.reserved = 0
        """Bytes promised to staged saves under way (each may write up to its share)."""
        self._taking = threading.Lock()  # held while a take walks and drops (in a thread)
        self._counting = threading.Lock()  # held only to change ``reserved``: the event loop gives back

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.root)

    def problem(self) -> str | None:
        """Why staging cannot be used now (suspends then go straight to the store), or None."""
        if self.limit <= 0:
            return "staging is turned off (GPUCheckpointApp.host_memory_limit is 0)"
        try:
            # /dev/shm is shared by every user: a folder planted there under this name is not used
            if self.root.exists() and self.root.lstat().st_uid != os.getuid():
                return f"{self.root} belongs to another user"
            self.store().prepare()
        except SaveError as e:
            return str(e)
        except OSError as e:
            return f"{self.root} cannot be used: {e.strerror or e}"
        return None

    def used(self) -> int:
        """Bytes the staged copies take now."""
        total = 0
        try:
            entries = list(os.scandir(self.store().blobs_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            try:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
            except FileNotFoundError:
                continue
        return total

    def has(self, checkpoint_id: str) -> bool:
        try:
            return self.store().manifest_path(checkpoint_id).is_file()
        except CheckpointNotFound:
            return False

    def ids(self) -> list[str]:
        return self.store().ids()

    def drop(self, checkpoint_id: str) -> None:
        """Remove a staged copy (and the blobs no other staged copy uses)."""
        try:
            self.store().delete(checkpoint_id)
        except CheckpointNotFound:
            pass

    def take(self, needed: Collection[str], wanted: int, *, durable: Callable[[str], bool]) -> int:
        """Reserve room for a new staged copy of a state whose last checkpoint took ``wanted``
        bytes (0: unknown), after dropping copies that are ``durable`` (in the store: kept as a
        cache) and not in ``needed`` (being read by a resume, say), oldest first, until that much
        is free. A copy not yet in the store is never dropped: it may be another server's, whose
        write-behind has yet to copy it (the staging folder is shared by the user's servers).
        Returns the bytes it may write (0: it does not fit; nothing is reserved);
        :meth:`give_back` them after."""
        with self._taking:  # suspends at the same time must not each count on the same free memory
            free = self.limit - self.used() - self.reserved
            for checkpoint_id in self.ids():
                if free >= wanted:
                    break
                if checkpoint_id not in needed and durable(checkpoint_id):
                    self.drop(checkpoint_id)
                    free = self.limit - self.used() - self.reserved
            if free <= 0 or free < wanted:
                return 0
            # a state seldom doubles between two suspends: the rest stays for other kernels'
            share = free if not wanted else min(free, 2 * wanted + GROWTH_BYTES)
            with self._counting:
                self.reserved += share
            return share

    def give_back(self, share: int) -> None:
        """The staged save that :meth:`take` reserved ``share`` for has ended (called on the event
        loop: it never waits for a :meth:`take` walking the staged copies)."""
        with self._counting:
            self.reserved -= share
