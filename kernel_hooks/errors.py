"""The exceptions of the in-kernel side: the store's family, plus incompatibility.

Every failure a user can meet while saving or restoring is a ``CheckpointError`` whose
message says what went wrong and what was kept (see ``gpuckpt_store.errors``).
"""

from gpuckpt_store.errors import CheckpointError, CheckpointNotFound, IntegrityError, RestoreError, SaveError


class IncompatibleError(RestoreError):
    """The checkpoint needs a Python, library or GPU that this kernel cannot offer."""


__all__ = ["CheckpointError", "CheckpointNotFound", "IncompatibleError", "IntegrityError", "RestoreError",
           "SaveError"]
