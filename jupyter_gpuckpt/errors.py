"""The server side's domain errors. Handlers turn them into HTTP status codes
(``handlers.py``); nothing else here knows about HTTP.

Each message is the one line a user reads: what was refused or failed, and why.
"""


class GPUCheckpointError(Exception):
    """An operation on a kernel or a checkpoint was refused or failed."""


class KernelNotFound(GPUCheckpointError):
    """No kernel with that id runs in this server."""


class WrongState(GPUCheckpointError):
    """The kernel's state does not allow the operation now (it is suspended, restoring ...)."""


class NotSuspendable(WrongState):
    """The kernel was not started from a gpuckpt kernelspec, so its process cannot be ended
    and started again by this server."""


class CheckpointInUse(GPUCheckpointError):
    """A suspended or restoring kernel needs that checkpoint to come back."""


class CheckpointUntouchable(GPUCheckpointError):
    """The checkpoint's folder in the store is not one the store made (a symbolic link): the
    server neither follows nor removes it, so whatever it points at is safe."""


class StoreUnavailable(GPUCheckpointError):
    """The checkpoint store cannot be written (missing, not a folder, not writable)."""


class OperationFailed(GPUCheckpointError):
    """A checkpoint, suspend, resume or rebuild ran and failed; the kernel is back in its
    last safe state and the reason is kept in its ``last_error``."""


class PlacementError(GPUCheckpointError):
    """The kernel could not be started where its placement runs kernels: no ``sbatch``, an
    unknown partition, a job that failed to start, a kernel that never reported back."""


class Unplaceable(PlacementError):
    """No node can take the kernel (or its checkpoint): refused at once, not left pending."""


class ParkUnsupported(GPUCheckpointError):
    """CUDA park cannot work for this kernel: no CUDA driver or one older than 570, no
    cuda-bindings in the kernel's environment, no CUDA in the process, or state the driver
    cannot checkpoint. Retrying does not help; suspend instead."""


class ParkFailed(GPUCheckpointError):
    """A park, unpark or state query ran and failed. ``state`` is the process's CUDA state
    after it, where known: ``running`` (it keeps its GPU), ``checkpointed`` (still parked)."""

    def __init__(self, reason: str, state: str | None = None) -> None:
        super().__init__(reason)
        self.state = state


REFUSALS: tuple[type[GPUCheckpointError], ...] = (KernelNotFound, WrongState, CheckpointInUse, CheckpointUntouchable,
                                                  StoreUnavailable, Unplaceable, ParkUnsupported)
"""The errors that refuse an operation at a moment or on a kernel where it cannot run: the
expected answer to a request, logged as one line, never as a traceback (a failure that ran,
``OperationFailed``, or a bug keeps its traceback)."""
