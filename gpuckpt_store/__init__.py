"""The checkpoint store, shared by both sides: layout, manifests, signing, listing, deleting
and garbage collection.

The in-kernel engine (``kernel_hooks``) writes and reads checkpoints through it; the server
(``jupyter_gpuckpt``) lists and deletes them through it and never imports the engine. It
needs nothing beyond the standard library and ``jupyter_core``. :mod:`.protocol` names the
messages the server's calls into the kernel travel as, for both sides.
"""

from . import protocol
from .collect import SaveJournal, collect_garbage, collect_leftovers
from .errors import CheckpointError, CheckpointNotFound, IntegrityError, RestoreError, SaveError, SaveTooLarge
from .layout import STORE_ENV, default_key_path, default_root, is_checkpoint_id, shown
from .listing import CheckpointInfo, format_table, human_bytes, list_checkpoints
from .records import BufferRecord, Piece
from .signing import SigningKey
from .store import FORMAT_VERSION, CheckpointStore, writable_problem

__all__ = [
    "FORMAT_VERSION", "STORE_ENV", "BufferRecord", "CheckpointError", "CheckpointInfo", "CheckpointNotFound",
    "CheckpointStore", "IntegrityError", "Piece", "RestoreError", "SaveError", "SaveJournal", "SaveTooLarge",
    "SigningKey", "collect_garbage", "collect_leftovers", "default_key_path", "default_root", "format_table",
    "human_bytes", "is_checkpoint_id", "list_checkpoints", "protocol", "shown", "writable_problem",
]
