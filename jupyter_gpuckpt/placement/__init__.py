"""Where a checkpointable kernel runs: one contract, two implementations.

The server (manager, operations, handlers, websocket, policy) talks to every checkpointable
kernel through :class:`~.contract.GPUCheckpointProvisioner`, jupyter_client's provisioner
plus what suspending and moving a kernel needs. A kernelspec picks the implementation with
``placement`` in its provisioner config: ``local`` (:mod:`.local`, a process on this host
with GPUs from this server's pool) or ``slurm`` (:mod:`.slurm`, a Slurm job on any node).
Placements are plug-ins: entry points in the ``jupyter_gpuckpt.placements`` group.
"""

from ..errors import PlacementError
from .contract import Departure, GPUCheckpointProvisioner, GPUNeeds, Location, ServerContext

__all__ = ["Departure", "GPUCheckpointProvisioner", "GPUNeeds", "Location", "PlacementError", "ServerContext"]
