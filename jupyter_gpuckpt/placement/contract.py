"""The placement contract: what the server needs of a kernel, wherever it runs.

:class:`GPUCheckpointProvisioner` is a jupyter_client provisioner (launch, poll, signal,
kill, provisioner info) plus suspend (end the kernel, free its GPUs, keep it registered),
resume (start it again, perhaps elsewhere and on other ports), where it runs, why it waits,
and why its last run ended. jupyter_client instantiates it from the kernelspec's
``kernel_provisioner`` entry; the ``placement`` setting there picks the implementation.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from tornado import web
from traitlets import Unicode
from traitlets.config import Config

from ..errors import ParkFailed, ParkUnsupported, PlacementError, Unplaceable
from .demand import Demand
from .gpus import GPU

PLACEMENTS = "jupyter_gpuckpt.placements"
"""Entry point group of placement implementations (``local``, ``slurm``)."""
START_SUSPENDED = "JUPYTER_GPUCKPT_START_SUSPENDED"
"""Launch environment flag: register the kernel again as suspended (server restart)."""
ADOPT = "JUPYTER_GPUCKPT_ADOPT"
"""Launch environment variable: JSON provisioner info of a kernel that still runs (a Slurm
job that outlived a server restart), to take over instead of launching one."""


@dataclass
class Location:
    """Where a kernel runs now: for the kernel model and the policy."""

    placement: str
    node: str | None = None
    job_id: str | None = None
    gpus: list[GPU] = field(default_factory=list)


@dataclass
class Departure:
    """Why a kernel's run ended though nobody asked it to, as its placement saw it."""

    cause: str
    """``preemption``, ``node failure``, ``job ended`` or ``process died``."""
    node: str | None = None
    checkpoint_id: str | None = None
    """A checkpoint the kernel took itself as it was told to end (newer than the server's)."""
    last_cell: int | None = None
    """The last cell that checkpoint holds (cells after it are lost)."""
    interrupted_cell: int | None = None
    """The cell that was running and was interrupted to take that checkpoint."""
    error: str | None = None
    """Why the kernel's own checkpoint failed, if it did."""


def _no_identity() -> str | None:
    return None


@dataclass(frozen=True)
class ServerContext:
    """What provisioners need of the server that runs them. jupyter_client builds a provisioner
    from a kernelspec with only its kernel manager as parent, and has no hook to give it more;
    so the extension hands this one object to the contract as it starts
    (:meth:`GPUCheckpointProvisioner.serve`), instead of setting attributes here and there."""

    store_root: Path | None = None
    """The server's checkpoint store: where a kernel that checkpoints itself (told to end by
    its placement) writes."""
    group: str = ""
    """The group the server's user counts in for the policy's floors (a Slurm kernel's job
    carries it, so every server can read what a group holds)."""
    member_of: frozenset[str] = frozenset()
    """Every group the server's user is in (``group`` and their Unix groups): the groups a
    kernelspec may name, so that no user counts in another group's floor."""
    identity: Callable[[], str | None] = _no_identity
    """The key of the server's identity (:func:`~jupyter_gpuckpt.kernels.ledger.server_key`)
    once it holds it (None before): a Slurm kernel's job carries it, so that only its server
    (or the next one, once it is gone) ends it untracked."""


@dataclass
class GPUNeeds:
    """What a checkpoint asks of the GPUs it is restored on, from its manifest."""

    models: list[str] = field(default_factory=list)
    device_bytes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_manifest(cls, manifest: dict[str, Any]) -> GPUNeeds:
        gpus = (manifest.get("environment") or {}).get("gpus") or []
        devices = manifest.get("devices") or {}
        return cls([str(g.get("name")) for g in gpus if g.get("name")],
                   {str(k): int(v) for k, v in devices.items()})

    @property
    def most_bytes(self) -> int:
        """The most bytes the checkpoint holds on one GPU."""
        return max(self.device_bytes.values(), default=0)


class StartFailed(web.HTTPError):
    """A kernel could not be started: what jupyter_server answers the notebook's start
    request with. jupyter_server shows the message of a provisioner's ``HTTPError`` (the
    error Enterprise Gateway's provisioners raise too) and hides any other as "Unhandled
    error", so a placement's domain error is carried in one at the kernel-start boundary."""

    def __init__(self, error: PlacementError) -> None:
        super().__init__(409 if isinstance(error, Unplaceable) else 500, str(error))
        self.error = error

    def __str__(self) -> str:
        return str(self.error)


def placement_class(name: str) -> type[GPUCheckpointProvisioner]:
    """The provisioner class registered for placement ``name``."""
    found = [e for e in entry_points(group=PLACEMENTS) if e.name == name]
    if not found:
        known = ", ".join(sorted(e.name for e in entry_points(group=PLACEMENTS)))
        raise PlacementError(f"unknown placement {name!r} in the kernelspec (known: {known})")
    cls = found[0].load()
    if not (isinstance(cls, type) and issubclass(cls, GPUCheckpointProvisioner)):
        raise PlacementError(f"placement {name!r} ({found[0].value}) is not a GPUCheckpointProvisioner")
    return cls


def placement_classes() -> list[type[GPUCheckpointProvisioner]]:
    """Every registered placement's class."""
    return [placement_class(e.name) for e in entry_points(group=PLACEMENTS)]


class GPUCheckpointProvisioner(KernelProvisionerBase):
    """A kernel provisioner whose kernel can be suspended and resumed, possibly elsewhere.

    Instantiating this class gives the implementation that ``placement`` names.
    """

    placement = Unicode("local", help="Where kernels of this kernelspec run, set in its provisioner config: "
                                      "'local' (a process on the server's host) or 'slurm' (a Slurm job; see "
                                      "SlurmPlacement).")

    suspended = False
    """The kernel is gone on purpose and stays registered; ``poll`` answers "alive"."""
    starting = False
    """A resume is starting the kernel and watches it itself; ``poll`` answers "alive"."""
    waiting: str | None = None
    """Why the kernel is not running yet (no free GPU, queued in Slurm), for the user."""
    survivors: list[str] = []
    """Processes that outlived the last suspend (``pid N (command)``); their GPUs stay held."""
    start_error: str | None = None
    """Why the last start failed. After a failed restart ``poll`` answers "alive", so that
    jupyter_client's restarter does not start it again and again; the failover reports it."""
    outlives_server = False
    """Whether the kernel keeps running when this server stops (it is adopted at restart)."""
    host_memory_shared = True
    """Whether every run of the kernel is on the server's host, so a suspend can stage its
    state in host memory (written to the store by the server afterwards) and a resume can
    read it back from there."""
    context: ClassVar[ServerContext] = ServerContext()
    """The server that runs the kernels (see :class:`ServerContext`), handed over by :meth:`serve`."""

    @classmethod
    def serve(cls, context: ServerContext) -> None:
        """Hand every provisioner, of every placement, the server's context (the extension does,
        once, as it starts)."""
        GPUCheckpointProvisioner.context = context

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        chosen = placement_class(str(kwargs.get("placement") or "local")) if cls is GPUCheckpointProvisioner else cls
        return super(GPUCheckpointProvisioner, chosen).__new__(chosen, *args, **kwargs)

    @abc.abstractmethod
    def location(self, readings: list[GPU] | None = None) -> Location:
        """Where the kernel runs now (``readings``: this host's GPUs now, if read)."""

    @property
    @abc.abstractmethod
    def run_id(self) -> str | None:
        """What identifies the current run (a pid, a job id): a new one after a restart."""

    @abc.abstractmethod
    async def running(self) -> bool:
        """Whether the kernel runs now (whatever ``poll`` tells jupyter_client)."""

    @abc.abstractmethod
    def lost(self) -> bool:
        """Whether the kernel has ended though nobody asked it to: messages sent now must
        not reach its next run."""

    @abc.abstractmethod
    async def suspend(self) -> list[str]:
        """End the kernel and free its GPUs; it stays registered. Returns what survived."""

    def keep_running(self) -> None:
        """A suspend failed before the kernel was ended: it runs on."""
        self.suspended = False

    @abc.abstractmethod
    async def resume(self, needs: GPUNeeds) -> None:
        """Start the kernel again, on GPUs that fit ``needs``; ``connection_info`` then
        holds where it listens (maybe another host and other ports). The new run uses the
        session key and CurveZMQ key pair its kernel manager holds (made at the first start,
        as jupyter_server's ``transport_encryption`` asks), so it is encrypted as the first was.

        ``poll`` answers "alive" until :meth:`started`; the caller watches :meth:`running`.
        """

    def started(self) -> None:
        """The resume is over (done or failed): jupyter_client's restarter watches again."""
        self.starting = False

    async def park_problem(self) -> str | None:
        """Why this kernel cannot be parked (None: it can try). Placements that can park
        (the CUDA driver checkpoints the running process in place) override the park methods."""
        return f"{type(self).__name__} kernels cannot be parked"

    async def park(self) -> None:
        """Move the running kernel's GPU memory into host memory with the CUDA driver and free
        its GPUs; the process stays alive.

        Raises
        ------
        ParkUnsupported
            The driver cannot park this process (it keeps running on its GPUs).
        ParkFailed
            The park failed; ``state`` says whether it still runs.
        """
        raise ParkUnsupported(await self.park_problem() or "this kernel cannot be parked")

    async def unpark(self) -> None:
        """Give a parked kernel its GPUs and GPU memory back (waiting for its GPUs if lent).

        Raises
        ------
        ParkFailed
            It could not be given back; ``state`` says whether it is still parked.
        """
        raise ParkFailed("this kernel was never parked")

    def kernel_group(self) -> str:
        """The kernel's group for the policy's floors: its kernelspec's ``metadata.gpuckpt.group``
        where the user is in that group (``context.member_of``), else the user's (``context.group``)."""
        spec = getattr(self.parent, "kernel_spec", None)
        asked = (spec.metadata if spec else {}).get("gpuckpt") or {}
        chosen = asked.get("group") if isinstance(asked, dict) else None
        return str(chosen) if chosen and str(chosen) in self.context.member_of else self.context.group

    @property
    @abc.abstractmethod
    def demand_pool(self) -> str:
        """Which waiting GPU requests this kernel's GPUs could serve: kernels of the same pool
        compete for the same :meth:`demand` (``local:<host>``, ``slurm:<partition>``)."""

    @abc.abstractmethod
    async def demand(self) -> Demand:
        """The GPU requests waiting now that suspending kernels of :attr:`demand_pool` could
        serve (the same for every kernel of the pool; read once per policy pass)."""

    async def group_gpus(self) -> dict[str, int] | None:
        """GPUs held now by each group's running kernels, every server's, where the placement
        can tell (Slurm: from the kernel jobs' tags); None: only this server's are known."""
        return None

    @classmethod
    async def collect_orphans(cls, runs: Mapping[str, Mapping[str, Any] | None],
                              others: Collection[str], config: Config) -> list[str]:
        """End the kernel runs that outlived their server untracked (a Slurm job submitted as
        the server was killed, before the ledger knew it): this server's, and those of servers
        that are gone; one line per run ended. The manager calls it for each placement class as
        the server starts, before it registers the ledger's kernels again; placements whose
        kernels end with the server have none.

        Parameters
        ----------
        runs
            Kernel id -> the :meth:`ledger_info` the ledger keeps for it (None: none), for
            every kernel in the ledger.
        others
            The ``context.identity()`` of every other server that runs now: their runs are theirs,
            even one their ledger entries do not show yet (just submitted).
        config
            The server's config, for the placement's own settings (as jupyter_client gives
            provisioners theirs through their kernel manager).
        """
        return []

    def departure(self) -> Departure | None:
        """Why the last run ended without being asked (read once, by the failover)."""
        return None

    def ledger_info(self) -> dict[str, Any] | None:
        """What a restarted server needs to take over the running kernel (None: nothing
        to take over; the key is never in it)."""
        return None

    def detach(self) -> None:
        """The server stops and leaves the kernel running (see :attr:`outlives_server`)."""
