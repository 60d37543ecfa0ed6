"""One owner's checkpoints in a store root (contract: layout and manifest are versioned).

A checkpoint exists only once its folder, holding a complete signed manifest, has been
renamed into place; a crash at any earlier moment leaves temporary files, and blobs no
manifest names, that :mod:`.collect` removes later, and every earlier checkpoint intact.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .collect import collect_garbage
from .errors import CheckpointNotFound, IntegrityError, RestoreError, SaveError
from .files import InBackground, fsync_dir, make_dir
from .layout import MANIFEST, default_key_path, default_root, is_checkpoint_id, is_owner, shown, temp_prefix
from .records import records_of
from .signing import SigningKey
from .spare import SPARE

FORMAT_VERSION = 4
"""4: each run of strings pickled with its own set-aside elements, repeated strings stored
once with codes; 3: string arrays as ``strings`` buffers; 2: chunks packed into blobs,
located by extents; 1: a blob per chunk."""
ROOT_MODE = 0o711
"""A store root this package creates: other users reach their own folders, list nothing."""
PRIVATE_MODE = 0o700


@functools.cache
def _user() -> str:
    """This process's user: ``getpass.getuser`` looks it up in the password database where
    no variable names it (a kernel's), 1 to 2 ms of every save and restore."""
    return getpass.getuser()


def writable_problem(root: Path) -> str | None:
    """Why checkpoints cannot be written under ``root`` by this user, or None if they can.

    Cheap (no file is written), so the server asks it at start and before every operation
    rather than learning it from a failed save.
    """
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory, so the checkpoint store {root} cannot be used"
    owner_dir = root / getpass.getuser()
    target = owner_dir if owner_dir.is_dir() else existing
    if not os.access(target, os.W_OK | os.X_OK):
        return f"{target} is not writable by this user, so the checkpoint store {root} cannot be used"
    return None


class CheckpointStore:
    """One owner's checkpoints and blobs under a store root.

    Parameters
    ----------
    root
        The store root; defaults to :func:`~.layout.default_root`.
    owner
        Whose checkpoints these are; defaults to the current user. Only this owner's
        manifests, signed with ``key``, are ever loaded.
    key
        The owner's signing key; defaults to :func:`~.layout.default_key_path`.
    """

    def __init__(self, root: Path | str | None = None, *, owner: str | None = None,
                 key: SigningKey | None = None) -> None:
        self.root = Path(root).expanduser() if root else default_root()
        self.owner = owner or _user()
        if not is_owner(self.owner):
            raise SaveError(f"{shown(self.owner)} is not a valid owner name")
        self.key = key or SigningKey(default_key_path())
        self.base = self.root / self.owner
        self.checkpoints = self.base / "checkpoints"
        self.blobs_dir = self.base / "blobs"
        self.writers_dir = self.base / "writers"
        """One journal per save in progress (see :class:`~.collect.SaveJournal`)."""
        self.jobs_dir = self.base / "jobs"
        """A Slurm kernel's job files, one folder per kernel (written by the server)."""
        self.spare_dir = self.base / SPARE
        """Files kept for the next save to write over (:mod:`.spare`; a host-memory store's)."""

    def spare(self) -> Path | None:
        """The spare folder, if this store keeps one (its saves then write over spare files)."""
        return self.spare_dir if self.spare_dir.is_dir() else None

    # -- writing -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the owner's folders, private to the owner, and check they are writable."""
        try:
            missing = []
            parent = self.root
            while not parent.exists():
                missing.append(parent)
                parent = parent.parent
            for path in reversed(missing):
                make_dir(path, ROOT_MODE if path == self.root else PRIVATE_MODE)
            make_dir(self.base, PRIVATE_MODE)
            os.chmod(self.base, PRIVATE_MODE)
            for path in (self.checkpoints, self.blobs_dir, self.writers_dir):
                make_dir(path, PRIVATE_MODE)
        except OSError as e:
            raise SaveError(f"cannot use checkpoint store {self.root}: {e.strerror or e}") from e
        if self.base.stat().st_uid != os.getuid():
            raise SaveError(f"{self.base} belongs to another user; refusing to write there")
        try:
            self.key.check()
        except IntegrityError as e:
            raise SaveError(str(e)) from e

    def new_id(self) -> str:
        """``YYYYMMDD-HHMMSS-mmmmmrrr``: microseconds then random, so ids sort by time."""
        now = datetime.now(timezone.utc)
        return f"{now:%Y%m%d-%H%M%S}-{now.microsecond:05x}{secrets.token_hex(2)[:3]}"

    def commit(self, manifest: dict[str, Any], blobs_written: Callable[[], None] | None = None) -> Path:
        """Sign ``manifest`` and publish it atomically as checkpoint ``manifest['id']``.

        ``blobs_written()``, if given, returns once the blobs the manifest names are synced
        and named (it raises if they could not be): it runs while the manifest is written,
        and the manifest is published only after it.
        """
        checkpoint_id: str = manifest["id"]
        if not is_checkpoint_id(checkpoint_id):
            raise SaveError(f"{shown(checkpoint_id)} is not a checkpoint id")
        manifest["signature"] = self.key.sign(manifest)
        staging = self.checkpoints / f"{temp_prefix()}{secrets.token_hex(6)}"
        final = self.checkpoints / checkpoint_id
        try:
            # The blobs and their names, and the manifest, must all be durable before the
            # rename publishes it, in any order: synced at once, one journal commit of the
            # file system can take several (a small save: 3 syncs one after another, not 4).
            with InBackground(self._sync_blobs, blobs_written):
                staging.mkdir(mode=PRIVATE_MODE)
                fd = os.open(staging / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump(manifest, f, separators=(",", ":"), sort_keys=True)  # thousands of hashes
                    f.flush()
                    os.fsync(f.fileno())
            os.rename(staging, final)
            fsync_dir(self.checkpoints)
        except OSError as e:
            shutil.rmtree(staging, ignore_errors=True)
            raise SaveError(f"could not write the manifest of {checkpoint_id}: {e.strerror or e}") from e
        return final

    def _sync_blobs(self, blobs_written: Callable[[], None] | None) -> None:
        if blobs_written is not None:
            blobs_written()
        fsync_dir(self.blobs_dir)

    # -- reading -------------------------------------------------------------------------

    def manifest_path(self, checkpoint_id: str) -> Path:
        if not is_checkpoint_id(checkpoint_id):
            raise CheckpointNotFound(
                f"{shown(checkpoint_id)} is not a checkpoint id (expected YYYYMMDD-HHMMSS-xxxxxxxx)")
        return self.checkpoints / checkpoint_id / MANIFEST

    def read_manifest(self, checkpoint_id: str) -> dict[str, Any]:
        """The manifest of ``checkpoint_id``, only if it is signed by this owner's key."""
        path = self.manifest_path(checkpoint_id)
        try:
            if path.parent.stat().st_uid != os.getuid():
                raise IntegrityError(f"{path.parent} belongs to another user; refusing to load it")
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise CheckpointNotFound(f"no checkpoint {checkpoint_id} in {self.base}") from None
        except (OSError, ValueError) as e:
            raise IntegrityError(f"manifest {path} is unreadable: {e}") from e
        if not isinstance(manifest, dict):
            raise IntegrityError(f"manifest {path} is not a JSON object")
        self.key.verify(manifest, f"manifest {path}")
        if manifest.get("owner") != self.owner or manifest.get("id") != checkpoint_id:
            raise IntegrityError(f"manifest {path} belongs to another owner or checkpoint")
        if manifest.get("format") != FORMAT_VERSION:
            raise RestoreError(
                f"checkpoint {checkpoint_id} has format {manifest.get('format')}; "
                f"this version reads format {FORMAT_VERSION}"
            )
        return manifest

    def has(self, checkpoint_id: str) -> bool:
        """Whether checkpoint ``checkpoint_id`` is published here (its manifest written)."""
        return is_checkpoint_id(checkpoint_id) and (self.checkpoints / checkpoint_id / MANIFEST).exists()

    def ids(self) -> list[str]:
        try:
            names = os.listdir(self.checkpoints)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if is_checkpoint_id(n) and (self.checkpoints / n / MANIFEST).exists())

    def manifests(self) -> Iterator[tuple[str, dict[str, Any] | None, str | None]]:
        """(id, manifest or None, problem or None) for each checkpoint, oldest first."""
        for checkpoint_id in self.ids():
            try:
                yield checkpoint_id, self.read_manifest(checkpoint_id), None
            except RestoreError as e:
                yield checkpoint_id, None, str(e)

    def chunk_locations(self) -> dict[str, tuple[str, int]]:
        """Where the chunks of this owner's checkpoints lie: ``{hash: (blob, offset)}``.

        Only blobs that still exist count, and their mtimes are refreshed, so garbage
        collection spares them while a save that reuses them is under way. Manifests never
        change once published, so each is read once per process.
        """
        found: dict[str, tuple[str, int]] = {}
        paths = {self.manifest_path(checkpoint_id) for checkpoint_id in self.ids()}
        for gone in [p for p in _LOCATIONS if p.parent.parent == self.checkpoints and p not in paths]:
            del _LOCATIONS[gone]
        for path in sorted(paths):
            if path not in _LOCATIONS:
                try:
                    records = records_of(self.read_manifest(path.parent.name))
                except RestoreError:
                    continue  # unreadable or another format: its chunks are not reused
                _LOCATIONS[path] = {digest: (blob, offset) for record in records
                                    for digest, blob, offset, _ in record.locations()}
            found.update(_LOCATIONS[path])
        alive: dict[str, bool] = {}
        for blob in {blob for blob, _ in found.values()}:
            try:
                os.utime(self.blobs_dir / blob)
                alive[blob] = True
            except FileNotFoundError:
                alive[blob] = False
        return {digest: where for digest, where in found.items() if alive[where[0]]}

    # -- removing ------------------------------------------------------------------------

    def delete(self, checkpoint_id: str, *, recycle_for: str | None = None) -> None:
        """Remove a checkpoint, then the blobs that no remaining checkpoint uses; with
        ``recycle_for`` (a kernel id) those go to the spare folder, if the store has one, for
        that kernel's next save."""
        path = self.manifest_path(checkpoint_id).parent
        if not path.is_dir():
            raise CheckpointNotFound(f"no checkpoint {checkpoint_id} in {self.base}")
        shutil.rmtree(path)
        collect_garbage(self, recycle_for=recycle_for)


_LOCATIONS: dict[Path, dict[str, tuple[str, int]]] = {}
"""Chunk locations of each manifest read by :meth:`CheckpointStore.chunk_locations`."""
