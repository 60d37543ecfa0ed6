"""The one exception family of checkpoints, shared by the kernel and the server side.

Every failure a user can meet while saving, restoring, listing or deleting is a
:class:`CheckpointError` subclass whose message says what went wrong and what was kept,
so the magic can print it without a traceback and the server can forward it verbatim.
"""


class CheckpointError(Exception):
    """Saving or restoring a checkpoint failed; nothing the user had was changed."""


class SaveError(CheckpointError):
    """A checkpoint could not be written; the kernel and the previous checkpoints are intact."""


class SaveTooLarge(SaveError):
    """The save would write more than it was allowed (a staged suspend's share of host
    memory); nothing was published, and the server saves to the store instead."""


class RestoreError(CheckpointError):
    """A checkpoint could not be restored; the checkpoint is kept and the namespace untouched."""


class CheckpointNotFound(RestoreError):
    """No checkpoint of this owner has that id (or the id is not a checkpoint id at all)."""


class IntegrityError(RestoreError):
    """A manifest's signature or a blob's hash did not verify, so nothing was unpickled."""
