"""Host memory that outlives a kernel: where a staged suspend puts the kernel's state.

A staged suspend has the kernel save into a store on ``/dev/shm`` (whole, signed, private
to the owner), ends the kernel, and writes the checkpoint into the durable store afterwards
(:mod:`.write_behind`). This module is that area: where it is, whether it can be used, how
much of it a suspend may take (``GPUCheckpointApp.host_memory_limit``), and which staged
copies go when room is needed (those already durable, oldest first). A kernel shut down
keeps none: its copies go as soon as they are in the store (``WriteBehind.tidy``).

Memory, not bytes, bounds a staged copy: a new ``/dev/shm`` file took the first write at 1.5
GB/s where one written before took 19 (issue 29). So the copies a suspend lets go are not
freed but recycled: their files move to the store's spare folder and the suspend's kernel
writes over them (:mod:`gpuckpt_store.spare`); a reserve (``staging_reserve``) can be
allocated there at server start, so even the first suspend writes into memory that exists.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from gpuckpt_store import CheckpointNotFound, CheckpointStore, SaveError, list_checkpoints
from gpuckpt_store import spare as spare_files
from gpuckpt_store.files import make_dir
from gpuckpt_store.store import PRIVATE_MODE

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
    reserve
        Bytes of spare files kept for suspends to write over (within ``limit``): made by
        :meth:`settle`, which also frees the spare files of kernels that are gone.
    """

    def __init__(self, root: Path, limit: int, reserve: int = 0) -> None:
        self.root = root
        self.limit = limit
        self.reserve = reserve
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
            store = self.store()
            store.prepare()
            make_dir(store.spare_dir, PRIVATE_MODE)  # this store's saves write over recycled files
        except SaveError as e:
            return str(e)
        except OSError as e:
            return f"{self.root} cannot be used: {e.strerror or e}"
        return None

    def used(self) -> int:
        """Bytes the staged copies take now (the spare files not counted: a save writes over them)."""
        return spare_files.held(self.store().blobs_dir)

    def spare(self, tag: str | None = None) -> int:
        """Bytes the spare files take now (those of ``tag`` only, if given: a kernel id, or
        :data:`gpuckpt_store.spare.RESERVE`)."""
        return spare_files.held(self.store().spare_dir, tag)

    def settle(self, kernels: Collection[str], elsewhere: int = 0) -> None:
        """Keep the spare files of ``kernels`` (those that may suspend again), the reserve, and
        no more than the limit leaves beside ``elsewhere`` bytes (parked kernels'); then
        allocate the reserve back to its size (a save takes spare files for its blobs). Called
        at server start, after each staged save and at each policy pass; makes the staging
        folder only for a reserve."""
        folder = self.store().spare_dir
        if not folder.is_dir() and (not self.reserve or self.problem() is not None):
            return
        with self._taking:
            room = max(0, self.limit - self.used() - self.reserved - elsewhere)
            spare_files.settle(folder, kernels, self.reserve, room)
            if self.reserve:
                spare_files.fill(folder, min(self.reserve, room - spare_files.held(folder)
                                             + spare_files.held(folder, spare_files.RESERVE)))

    def has(self, checkpoint_id: str) -> bool:
        try:
            return self.store().manifest_path(checkpoint_id).is_file()
        except CheckpointNotFound:
            return False

    def ids(self) -> list[str]:
        return self.store().ids()

    def drop(self, checkpoint_id: str, *, recycle_for: str | None = None) -> None:
        """Remove a staged copy (and the blobs no other staged copy uses); with ``recycle_for``
        (a kernel id) their files become that kernel's spare ones, for its next save to write over."""
        try:
            self.store().delete(checkpoint_id, recycle_for=recycle_for)
        except CheckpointNotFound:
            pass

    def take(self, needed: Collection[str], wanted: int, *, durable: Callable[[str], bool],
             kernel_id: str | None = None) -> int:
        """Reserve room for a new staged copy of a state whose last checkpoint took ``wanted``
        bytes (0: unknown). Copies that are ``durable`` (in the store: kept as a cache) and not
        in ``needed`` (being read by a resume, say) are recycled for it: those of ``kernel_id``
        (the kernel suspending, whose new copy supersedes them) always, others oldest first
        until that much is free. A copy not yet in the store is never dropped: it may be another
        server's, whose write-behind has yet to copy it (the staging folder is shared by the
        user's servers). Returns the bytes it may write (0: it does not fit; nothing is
        reserved); :meth:`give_back` them after."""
        with self._taking:  # suspends at the same time must not each count on the same free memory
            if kernel_id is not None:
                for info in list_checkpoints(self.store()):
                    if info.kernel_id == kernel_id and info.id not in needed and durable(info.id):
                        self.drop(info.id, recycle_for=kernel_id)
            free = self.limit - self.used() - self.reserved
            for checkpoint_id in self.ids():
                if free >= wanted:
                    break
                if checkpoint_id not in needed and durable(checkpoint_id):
                    self.drop(checkpoint_id, recycle_for=kernel_id or spare_files.RESERVE)
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
