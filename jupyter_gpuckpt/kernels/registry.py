"""The kernel registry, the bottom layer of the server side: the kernels jupyter_server runs,
each one's record, its provisioner and its REST model.

Everything above it (retention, relocation, write-behind, the operations, restarts) is given
the registry; the registry knows none of them. What must happen when a kernel is first seen
(follow its restarts, note where it listens) is asked for through :attr:`KernelRegistry.on_first_use`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tornado.web import HTTPError

from ..errors import KernelNotFound
from ..placement import GPUCheckpointProvisioner
from ..placement.gpus import GPU, GPUPool
from . import activity
from .lifecycle import KernelRecord
from .record_parts import NotebookSession
from .records import KernelRecords
from .settings import Settings
from .watcher import ExecutionWatcher


class KernelRegistry:
    """Looks up jupyter_server's kernels and keeps a record of each.

    Parameters
    ----------
    kernel_manager
        The server's ``MappingKernelManager``.
    session_manager
        The server's ``SessionManager`` (a notebook's path is kept with its kernel), or None.
    records
        The records, kept in the ledger.
    settings
        The extension's settings the parts share.
    """

    def __init__(self, kernel_manager: Any, session_manager: Any, records: KernelRecords, settings: Settings) -> None:
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.records = records
        self.settings = settings
        self.watcher = ExecutionWatcher()
        self.on_first_use: list[Callable[[str, Any], None]] = []
        """Called with a kernel's id and kernel manager the first time its record is asked for."""
        self._known: set[str] = set()

    def km(self, kernel_id: str) -> Any:
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            raise KernelNotFound(f"no kernel {kernel_id}") from None
        except HTTPError as e:  # jupyter_server's kernel manager says "no such kernel" as a 404
            if e.status_code != 404:
                raise
            raise KernelNotFound(f"Kernel does not exist: {kernel_id}") from None  # jupyter_server's words

    def shutting_down(self, kernel_id: str) -> bool:
        """Whether the kernel is gone or being shut down (a ``DELETE`` under way: jupyter_client
        sets ``shutting_down`` as it starts), so that no operation starts on it or waits on it."""
        try:
            return bool(getattr(self.km(kernel_id), "shutting_down", False))
        except KernelNotFound:
            return True

    def provisioner(self, kernel_id: str) -> GPUCheckpointProvisioner | None:
        provisioner = getattr(self.km(kernel_id), "provisioner", None)
        return provisioner if isinstance(provisioner, GPUCheckpointProvisioner) else None

    def release_mode(self, kernel_id: str) -> str:
        """``park`` or ``suspend``: the kernel's effective policy's (a kernelspec may change it
        only as far as the server lets it: ``policy_overrides``)."""
        chosen = self.settings.release_mode_of
        return chosen(kernel_id) if chosen is not None else self.settings.release_mode

    def record(self, kernel_id: str) -> KernelRecord:
        """The kernel's record, made on first use (or from the ledger, as the server starts);
        its cells followed, and :attr:`on_first_use` told, from the first use of its kernel manager."""
        km = self.km(kernel_id)
        record = self.records.make(kernel_id, km.kernel_name)
        self.watcher.watch(kernel_id, km)
        if kernel_id not in self._known:
            self._known.add(kernel_id)
            for listener in self.on_first_use:
                listener(kernel_id, km)
            self.note_placement(kernel_id)
        return record

    def note_placement(self, kernel_id: str) -> None:
        """Keep in the ledger where the kernel runs now, if it outlives the server (a Slurm
        job), so a restarted server takes it over even after a crash."""
        provisioner = self.provisioner(kernel_id)
        record = self.records.get(kernel_id)
        if provisioner is None or record is None:
            return
        info = provisioner.ledger_info()
        if info != record.placement_info:
            record.placement_info = info
            self.records.save()

    def forget(self, kernel_id: str) -> None:
        """The kernel was shut down: drop its record (and its ledger entry) and stop
        following it. Its checkpoints stay until retention removes them."""
        record = self.records.forget(kernel_id)
        if record is not None:
            record.back("the kernel was shut down")
        self.watcher.forget(kernel_id)
        self._known.discard(kernel_id)

    async def models(self) -> list[dict[str, Any]]:
        """Every kernel's model, with one reading of the GPUs for all of them (off the event loop)."""
        readings = (await GPUPool.instance().readings()).gpus
        return [self.model_with(k, readings) for k in list(self.kernel_manager.list_kernel_ids())]

    async def model(self, kernel_id: str) -> dict[str, Any]:
        """The REST model of a kernel, with the GPUs read now (off the event loop)."""
        self.km(kernel_id)  # an unknown kernel is refused before the GPUs are read
        return self.model_with(kernel_id, (await GPUPool.instance().readings()).gpus)

    def model_with(self, kernel_id: str, readings: list[GPU]) -> dict[str, Any]:
        """The REST model of a kernel, with ``readings`` of the GPUs (a policy pass's, or the
        last one for an operation's result): no reading of its own."""
        km = self.km(kernel_id)
        record = self.record(kernel_id)
        provisioner = self.provisioner(kernel_id)
        last = activity.last_activity(km)
        where = provisioner.location(readings) if provisioner else None
        return {
            **record.to_json(),
            "name": km.kernel_name,
            "execution_state": getattr(km, "execution_state", None),
            "last_activity": last.isoformat() if last else None,
            "idle_seconds": activity.idle_seconds(km),
            "gpus": [g.to_json() for g in where.gpus] if where else [],
            "placement": where.placement if where else None,
            "node": where.node if where else None,
            "job_id": where.job_id if where else None,
            "waiting_for_gpus": provisioner.waiting if provisioner else None,
            "suspendable": provisioner is not None,
            "connections": self._connections(kernel_id),
            "rebuild_skipped": self.settings.rebuild_skipped,
        }

    def _connections(self, kernel_id: str) -> int:
        """The kernel's open websockets, as jupyter_server's model counts them; 0 while a server
        that started again takes the kernel back (its model reads a ``last_activity`` not set yet)."""
        try:
            return int(self.kernel_manager.kernel_model(kernel_id).get("connections", 0))
        except AttributeError:
            return 0

    async def session_of(self, kernel_id: str) -> NotebookSession | None:
        """The notebook session attached to the kernel, if any."""
        if self.session_manager is None:
            return None
        for session in await self.session_manager.list_sessions():
            if session["kernel"]["id"] == kernel_id:
                return NotebookSession.from_json(session)
        return None
