"""Names in a store: its root, owners, checkpoint ids, temporary files.

::

    <root>/<owner>/checkpoints/<checkpoint-id>/manifest.json   written last, atomically
    <root>/<owner>/blobs/<hash>                                content-addressed, shared
    <root>/<owner>/writers/<host>-<pid>-<token>                saves in progress
    <root>/<owner>/jobs/<kernel-id>/                           a Slurm kernel's job files
    <root>/<owner>/spare/<kernel-id|reserve>.<token>           memory for the next save (host memory only)

Every name that comes from outside (a request, a manifest) is checked against these
patterns before it is joined to a path.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

MANIFEST = "manifest.json"
_ID_RE = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{8}", re.ASCII)
_OWNER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}", re.ASCII)
_HEX = frozenset("0123456789abcdef")
_SHOWN = 60
"""Characters of a bad name repeated in an error message."""


STORE_ENV = "JUPYTER_GPUCKPT_STORE"
"""The store root, when set: for ``%gpuckpt`` in a kernel, and for a Slurm kernel, whose
server sets it to its own store."""


def default_root() -> Path:
    """``$JUPYTER_GPUCKPT_STORE``, else ``<jupyter data dir>/gpuckpt/store``."""
    env = os.environ.get(STORE_ENV)
    return Path(env) if env else Path(jupyter_data_dir()) / "gpuckpt" / "store"


def default_key_path() -> Path:
    """``$JUPYTER_GPUCKPT_KEY_FILE``, else ``<jupyter data dir>/gpuckpt/signing.key``."""
    env = os.environ.get("JUPYTER_GPUCKPT_KEY_FILE")
    return Path(env) if env else Path(jupyter_data_dir()) / "gpuckpt" / "signing.key"


def is_checkpoint_id(text: object) -> bool:
    """``YYYYMMDD-HHMMSS-xxxxxxxx`` in ASCII digits and lowercase hex."""
    return isinstance(text, str) and bool(_ID_RE.fullmatch(text))


def is_owner(text: object) -> bool:
    return isinstance(text, str) and bool(_OWNER_RE.fullmatch(text))


def is_digest(text: object) -> bool:
    """A BLAKE3 hash in lowercase hex: the name of a blob or a chunk."""
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


def shown(text: str) -> str:
    """``repr(text)``, shortened: a 5,000-character bad id is not worth repeating whole."""
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text)} characters)"


def temp_prefix() -> str:
    """Prefix of this process's temporary files, so cleanup can tell whose they are."""
    return f".tmp-{socket.gethostname()}-{os.getpid()}-"
