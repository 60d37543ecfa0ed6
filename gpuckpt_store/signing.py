"""HMAC signatures on manifests, with a per-user key file created on first use.

Unpickling runs code, so a manifest is only trusted when it carries a signature made with
the owner's private key; the manifest in turn pins the hash of every blob it references.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from .errors import IntegrityError
from .files import fsync_dir

SIGNATURE_FIELD = "signature"
_SCHEME = "hmac-sha256"


def canonical_bytes(manifest: dict[str, Any]) -> bytes:
    """The bytes that are signed: the manifest without its signature, keys sorted."""
    body = {k: v for k, v in manifest.items() if k != SIGNATURE_FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


class SigningKey:
    """The owner's secret, kept in a file only the owner can read.

    Parameters
    ----------
    path
        Key file. Created with mode 0600 on first use; an existing file that group or
        others can read is refused, as ssh refuses a readable private key.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: bytes | None = None

    def _load(self) -> bytes:
        if self._key is None:
            self._key = self._read_or_create()
        return self._key

    def _read_or_create(self) -> bytes:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.path.exists():
            self._create()
        mode = self.path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise IntegrityError(
                f"signing key {self.path} is readable by others (mode {oct(mode & 0o777)}); "
                "run `chmod 600` on it before checkpoints can be trusted"
            )
        try:
            key = bytes.fromhex(self.path.read_text().strip())
        except ValueError:
            key = b""
        if len(key) < 32:
            raise IntegrityError(f"signing key {self.path} is too short or damaged")
        return key

    def _create(self) -> None:
        """Publish a new key whole: written to a private temporary file, then linked to its
        name, so kernels of a fresh install that save at once all read one complete key
        (each writing the file in place, one read another's empty file and refused it)."""
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_bytes(32).hex())
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                return  # another kernel published its key first: use that one
            fsync_dir(self.path.parent)
        finally:
            temporary.unlink(missing_ok=True)

    def check(self) -> None:
        """Load (or create) the key now, so a bad key stops a save before it writes."""
        self._load()

    def sign(self, manifest: dict[str, Any]) -> str:
        digest = hmac.new(self._load(), canonical_bytes(manifest), hashlib.sha256).hexdigest()
        return f"{_SCHEME}:{digest}"

    def verify(self, manifest: dict[str, Any], where: str) -> None:
        """Raise :class:`IntegrityError` unless ``manifest`` carries our valid signature."""
        signature = manifest.get(SIGNATURE_FIELD)
        if not isinstance(signature, str) or not signature:
            raise IntegrityError(f"{where} is not signed; refusing to load it")
        # Bytes, not str: compare_digest raises on a non-ASCII str instead of saying no.
        if not hmac.compare_digest(signature.encode(), self.sign(manifest).encode()):
            raise IntegrityError(
                f"{where} has a bad signature (changed after it was written, or signed with "
                "another user's key); refusing to load it"
            )
