"""The ledger: what a restarted server must know again (suspended kernels, Slurm jobs that
outlive it, last checkpoints), in one JSON file ``{kernel_id: entry}`` that every server of the
user sharing the data dir writes (two ``jupyter lab`` on two ports, say).

Each entry names its ``owner``, the ``server_id`` of its server (the same across that server's
restarts, different between servers that run at once). A running server holds a lock on a file
named for its id (``<ledger>.servers/<digest>.lock``), which the system drops when the process
ends, however it ends. An entry is this server's (its id), another live server's (that lock is
held: never touched), or an orphan (that lock is free, or no owner: a ledger from before owners),
which the next server to start adopts. That is safe: its server cannot come back and take it too
(it is the adopter's from then on), and a suspended kernel's state is in the store.

Each write replaces only this server's entries, atomically (mode 0600), under a lock beside the
file (``<ledger>.lock``): servers writing at once lose nothing. Locks need a file system that
has them (a local disk, NFS with its lock service).

What a server leaves outside the ledger names it by its key (:func:`server_key`), which tells
whether that server still runs (:meth:`Ledger.live_servers`): its Slurm jobs carry the key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

Entry = dict[str, Any]

WRITE_TIMEOUT = 10.0
"""Seconds a write waits for another server's (which take milliseconds) before it fails."""


def server_key(owner: str) -> str:
    """A short key of a server's identity, without its white space (a Slurm job's tag carries
    it) and the name of its lock file."""
    return hashlib.sha256(owner.encode()).hexdigest()[:16]


def default_server_id(serverapp: Any) -> str:
    """The identity of a server that sets no ``server_id``: under JupyterHub its prefix
    (``jupyterhub:/user/NAME/`` or ``/user/NAME/SERVER/`` for a named server), the same on every
    start of that server; else this host, the port (or socket) the server listens on, and its
    root dir. A ``jupyter lab`` started again on another port (the first was taken) is another
    server: it adopts its predecessor's kernels as orphans, once that one is gone.

    Parameters
    ----------
    serverapp
        The running ``ServerApp``, its port bound.
    """
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix and os.environ.get("JUPYTERHUB_API_TOKEN"):
        return f"jupyterhub:{prefix}"
    where = serverapp.sock or f"{socket.gethostname()}:{serverapp.port}"
    return f"{where} {serverapp.root_dir}"


class Ledger:
    """The ledger file, shared by the servers of one user; this server's entries in it.

    Parameters
    ----------
    path
        The JSON file; its locks live beside it.
    server_id
        This server's identity, asked for on first use (it may name the port the server binds
        after the extension loads).
    log
        Where adoptions and waits are told.
    wait
        Seconds to wait, on first use, for a server of the same identity to end (one still
        stopping, writing its suspended kernels); past that this server runs under an identity
        of its own and takes none of that one's entries.
    """

    def __init__(self, path: Path, server_id: Callable[[], str], log: logging.Logger, wait: float = 30.0) -> None:
        self.path = path
        self.log = log
        self.wait = wait
        self.owner: str | None = None
        """This server's identity, once it holds its lock."""
        self._server_id = server_id
        self._write_lock = FileLock(path.with_name(f"{path.name}.lock"), timeout=WRITE_TIMEOUT, mode=0o600)
        self._identity: FileLock | None = None
        self._taking = threading.Lock()  # the first claim runs in a thread, a save may come from the loop

    def claim(self) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """As the server starts: its entries, the orphans it adopts among them (theirs from now
        on, in the file too); and every entry of the ledger, other live servers' included."""
        owner = self._own()
        with self._write_lock:
            entries = self._read()
            mine = {k: e for k, e in entries.items() if e.get("owner") == owner}
            orphans = {k: e for k, e in entries.items() if k not in mine and not self._alive(e.get("owner"))}
            for kernel_id, entry in orphans.items():
                self.log.info("gpuckpt: kernel %s is this server's now: its server (%s) is gone",
                              kernel_id, entry.get("owner") or "unnamed, in an older ledger")
                entry["owner"] = owner
            if orphans:
                self._write(entries)
        return {**mine, **orphans}, entries

    def save(self, entries: dict[str, Entry]) -> None:
        """Make ``entries`` this server's entries in the file; other servers' stay as they are.

        Parameters
        ----------
        entries
            Kernel id -> entry, every entry of this server (those not in it are dropped).
        """
        owner = self._own()
        with self._write_lock:
            kept = {k: e for k, e in self._read().items() if e.get("owner") != owner and k not in entries}
            self._write({**kept, **{k: {**e, "owner": owner} for k, e in entries.items()}})

    @property
    def key(self) -> str | None:
        """This server's :func:`server_key`, once it holds its lock."""
        return None if self.owner is None else server_key(self.owner)

    def live_servers(self) -> set[str]:
        """The keys of the other servers sharing the ledger that run now (they hold their locks)."""
        own = server_key(self._own())
        try:
            keys = [lock.stem for lock in self._servers().glob("*.lock")]
        except OSError:
            return set()
        return {key for key in keys if key != own and self._held(key)}

    def close(self) -> None:
        """The server stops: the next one of its identity may take over its entries now."""
        with self._taking:
            if self._identity is not None:
                self._identity.release()
            self._identity = self.owner = None

    # -- identities ----------------------------------------------------------------------

    def _own(self) -> str:
        """This server's identity, its lock taken on first use."""
        with self._taking:
            if self.owner is not None:
                return self.owner
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._servers().mkdir(exist_ok=True, mode=0o700)
            wanted = self._server_id()
            lock = self._identity_lock(wanted)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                self.log.info("gpuckpt: waiting up to %g s for the server that was %r to stop", self.wait, wanted)
                try:
                    lock.acquire(timeout=self.wait)
                except Timeout:
                    unique = f"{wanted} (pid {os.getpid()})"
                    self.log.warning("gpuckpt: another running server is %r (GPUCheckpointApp.server_id): this "
                                     "one is %r and takes none of its kernels", wanted, unique)
                    wanted, lock = unique, self._identity_lock(unique)
                    lock.acquire(timeout=0)
            self._identity, self.owner = lock, wanted
            return wanted

    def _alive(self, owner: object) -> bool:
        """Whether the server ``owner`` runs now (it holds its lock)."""
        if not isinstance(owner, str):  # none (an older ledger), or damaged
            return False
        return self._held(server_key(owner))

    def _held(self, key: str) -> bool:
        """Whether the server of ``key`` holds its lock."""
        lock = self._lock_of(key)
        if not Path(lock.lock_file).exists():  # a running server has its file
            return False
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True
        lock.release()
        return False

    def _servers(self) -> Path:
        return self.path.with_name(f"{self.path.name}.servers")

    def _identity_lock(self, owner: str) -> FileLock:
        return self._lock_of(server_key(owner))

    def _lock_of(self, key: str) -> FileLock:
        # held from one thread, let go from another (the server's stop): not thread-local
        return FileLock(self._servers() / f"{key}.lock", mode=0o600, thread_local=False)

    # -- the file (under the write lock) ---------------------------------------------------

    def _read(self) -> dict[str, Entry]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            # every write reads the file first: a damaged one must not stop them all
            aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
            self.path.replace(aside)
            self.log.error("gpuckpt: the ledger %s was damaged (%s): kept as %s, a new one is started; kernels "
                           "suspended before are not registered again", self.path, e, aside)
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: e for k, e in data.items() if isinstance(e, dict)}

    def _write(self, entries: dict[str, Entry]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entries, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # the file keeps what it had
            raise
