"""The on-disk checkpoint store (contract: layout and manifest are versioned).

::

    <root>/<owner>/checkpoints/<checkpoint-id>/manifest.json   written last, atomically
    <root>/<owner>/blobs/<hash>                                content-addressed, shared

A checkpoint exists only once its folder, holding a complete signed manifest, has been
renamed into place; a crash at any earlier moment leaves temporary files that
:meth:`CheckpointStore.clean_stale` removes later, and every earlier checkpoint intact.
"""

from __future__ import annotations

import errno
import getpass
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir

from .blobs import BlobStore, BufferRecord, fsync_dir, is_digest, temp_prefix
from .errors import IntegrityError, RestoreError, SaveError
from .signing import SigningKey

FORMAT_VERSION = 4
"""4: each run of strings pickled with its own set-aside elements, repeated strings stored
once with codes; 3: string arrays as ``strings`` buffers; 2: chunks packed into blobs,
located by extents; 1: a blob per chunk."""
MANIFEST = "manifest.json"
_ID_RE = re.compile(r"\d{8}-\d{6}-[0-9a-f]{8}")
_OWNER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
_TMP_RE = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]+")
STALE_SECONDS = 6 * 3600
"""Temporary files of another host are only removed once this old."""


def default_root() -> Path:
    """``$JUPYTER_GPUCKPT_STORE``, else ``<jupyter data dir>/gpuckpt/store``."""
    env = os.environ.get("JUPYTER_GPUCKPT_STORE")
    return Path(env) if env else Path(jupyter_data_dir()) / "gpuckpt" / "store"


def default_key_path() -> Path:
    """``$JUPYTER_GPUCKPT_KEY_FILE``, else ``<jupyter data dir>/gpuckpt/signing.key``."""
    env = os.environ.get("JUPYTER_GPUCKPT_KEY_FILE")
    return Path(env) if env else Path(jupyter_data_dir()) / "gpuckpt" / "signing.key"


def is_checkpoint_id(text: object) -> bool:
    return isinstance(text, str) and bool(_ID_RE.fullmatch(text))


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


class CheckpointStore:
    """One owner's checkpoints and blobs under a store root.

    Parameters
    ----------
    root
        The store root; defaults to :func:`default_root`.
    owner
        Whose checkpoints these are; defaults to the current user. Only this owner's
        manifests, signed with ``key``, are ever loaded.
    key
        The owner's signing key; defaults to :func:`default_key_path`.
    """

    def __init__(self, root: Path | str | None = None, *, owner: str | None = None,
                 key: SigningKey | None = None) -> None:
        self.root = Path(root).expanduser() if root else default_root()
        self.owner = owner or getpass.getuser()
        if not _OWNER_RE.fullmatch(self.owner):
            raise SaveError(f"{self.owner!r} is not a valid owner name")
        self.key = key or SigningKey(default_key_path())
        self.base = self.root / self.owner
        self.checkpoints = self.base / "checkpoints"
        self.blobs = BlobStore(self.base / "blobs")

    # -- writing -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the owner's folders, private to the owner, and check they are writable."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for path in (self.base, self.checkpoints, self.blobs.directory):
                path.mkdir(mode=0o700, exist_ok=True)
            os.chmod(self.base, 0o700)
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

    def commit(self, manifest: dict[str, Any]) -> Path:
        """Sign ``manifest`` and publish it atomically as checkpoint ``manifest['id']``."""
        checkpoint_id: str = manifest["id"]
        if not is_checkpoint_id(checkpoint_id):
            raise SaveError(f"{checkpoint_id!r} is not a checkpoint id")
        manifest["signature"] = self.key.sign(manifest)
        staging = self.checkpoints / f"{temp_prefix()}{secrets.token_hex(6)}"
        final = self.checkpoints / checkpoint_id
        try:
            fsync_dir(self.blobs.directory)
            staging.mkdir(mode=0o700)
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

    def clean_stale(self) -> None:
        """Remove temporary files left by saves that died (this host's dead pids, or old ones)."""
        now = time.time()
        host = socket.gethostname()
        for folder in (self.blobs.directory, self.checkpoints):
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            for entry in entries:
                m = _TMP_RE.fullmatch(entry.name)
                if not m:
                    continue
                mine = m["host"] == host
                if (mine and not _pid_alive(int(m["pid"]))) or (
                    not mine and now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS
                ):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        Path(entry.path).unlink(missing_ok=True)

    # -- reading -------------------------------------------------------------------------

    def manifest_path(self, checkpoint_id: str) -> Path:
        if not is_checkpoint_id(checkpoint_id):
            raise RestoreError(f"{checkpoint_id!r} is not a checkpoint id (expected YYYYMMDD-HHMMSS-xxxxxxxx)")
        return self.checkpoints / checkpoint_id / MANIFEST

    def read_manifest(self, checkpoint_id: str) -> dict[str, Any]:
        """The manifest of ``checkpoint_id``, only if it is signed by this owner's key."""
        path = self.manifest_path(checkpoint_id)
        try:
            if path.parent.stat().st_uid != os.getuid():
                raise IntegrityError(f"{path.parent} belongs to another user; refusing to load it")
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise RestoreError(f"no checkpoint {checkpoint_id} in {self.base}") from None
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
                os.utime(self.blobs.path(blob))
                alive[blob] = True
            except FileNotFoundError:
                alive[blob] = False
        return {digest: where for digest, where in found.items() if alive[where[0]]}

    # -- removing ------------------------------------------------------------------------

    def delete(self, checkpoint_id: str) -> None:
        """Remove a checkpoint, then the blobs that no remaining checkpoint uses."""
        path = self.manifest_path(checkpoint_id).parent
        if not path.is_dir():
            raise RestoreError(f"no checkpoint {checkpoint_id} in {self.base}")
        shutil.rmtree(path)
        self.collect_garbage()

    def collect_garbage(self, min_age: float = 3600.0) -> int:
        """Delete blobs no signed manifest references and not touched for ``min_age`` s.

        The age guard protects blobs a concurrent save has just written or reused (a
        reused blob's mtime is refreshed) but whose manifest is not published yet.
        """
        live: set[str] = set()
        for _, manifest, _problem in self.manifests():
            if manifest is not None:
                live.update(referenced_blobs(manifest))
        removed = 0
        now = time.time()
        try:
            entries = list(os.scandir(self.blobs.directory))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if is_digest(entry.name) and entry.name not in live:
                try:
                    if now - entry.stat().st_mtime >= min_age:
                        os.unlink(entry.path)
                        removed += 1
                except OSError as e:
                    if e.errno != errno.ENOENT:
                        raise
        return removed


_LOCATIONS: dict[Path, dict[str, tuple[str, int]]] = {}
"""Chunk locations of each manifest read by :meth:`CheckpointStore.chunk_locations`."""


def records_of(manifest: dict[str, Any]) -> list[BufferRecord]:
    """The pickle's and every buffer's record."""
    return [BufferRecord.from_json(manifest["pickle"])] + [BufferRecord.from_json(b) for b in manifest["buffers"]]


def referenced_blobs(manifest: dict[str, Any]) -> set[str]:
    return {blob for record in records_of(manifest) for blob in record.blobs}
