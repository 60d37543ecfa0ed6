"""The server's view of checkpointable kernels: records, models, checkpoints, restarts.

One :class:`CheckpointManager` per server. It knows each kernel jupyter_server runs (its
record, the cells it ran), answers the REST models, lists and deletes checkpoints (never
one a suspended kernel needs), and registers suspended kernels again after a restart. The
operations themselves (checkpoint, suspend, resume, failover, rebuild) are in
:mod:`.operations`; they raise the domain errors of :mod:`.errors`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.connect import port_names

from gpuckpt_store import CheckpointStore, list_checkpoints, writable_problem

from ..errors import CheckpointInUse, KernelNotFound, StoreUnavailable
from ..extension.events import Emit
from ..operations.actions import KernelOperations
from ..operations.failover import Failover
from ..placement import GPUCheckpointProvisioner
from ..placement.contract import ADOPT, START_SUSPENDED, placement_classes
from ..placement.gpus import GPU, GPUPool
from ..staging.host_memory import HostMemory, default_root
from ..staging.write_behind import DURABLE, STAGED, WriteBehind, last_checkpoint_of
from ..tasks import BackgroundTasks
from . import activity
from .ledger import Ledger
from .lifecycle import KernelRecord, State
from .records import KernelRecords
from .watcher import ExecutionWatcher


@dataclass
class Settings:
    """What the manager and its operations need of the extension's traitlets."""

    store_root: Path
    keep_checkpoints: int = 0
    ready_timeout: float = 60.0
    stall_timeout: float = 60.0
    rebuild_skipped: str = "ask"
    failover_grace: float = 30.0
    release_mode: str = "park"
    """How a suspend frees GPUs unless asked otherwise: "park" where it can, else "suspend"."""
    release_mode_of: Callable[[str], str] | None = None
    """A kernel's release mode as its effective policy says (the server's, with what its
    kernelspec may change); None: :attr:`release_mode` for every kernel."""
    host_memory: HostMemory | None = None
    """Where suspends stage the kernel's state (None: straight to the store)."""
    write_behind_bandwidth: float = 0.0


class CheckpointManager:
    """Runs checkpoint operations against jupyter_server's kernel manager.

    Parameters
    ----------
    kernel_manager
        The server's ``MappingKernelManager``.
    session_manager
        The server's ``SessionManager`` (a suspended kernel's notebook is attached again to
        it after a restart), or None.
    settings
        Store, retention and deadlines.
    ledger
        Where suspended kernels are remembered across restarts.
    emit
        ``emit(event, data)`` for lifecycle events (see ``events.py``).
    tasks
        Where background work (failovers, say) runs.
    """

    def __init__(self, kernel_manager: Any, session_manager: Any, settings: Settings, ledger: Ledger,
                 emit: Emit, tasks: BackgroundTasks) -> None:
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.settings = settings
        self.records = KernelRecords(ledger)
        self.watcher = ExecutionWatcher()
        self.tasks = tasks
        self.operations = KernelOperations(self, emit)
        self.failover = Failover(self, emit)
        self.host_memory = settings.host_memory or HostMemory(default_root(), 0)
        self.write_behind = WriteBehind(self, emit)
        self.on_moved: list[Callable[[str], Awaitable[None]]] = []
        """Called with a kernel's id once it listens elsewhere (the notebooks' websockets)."""
        self._endpoints: dict[str, tuple[Any, ...]] = {}

    # -- kernels -------------------------------------------------------------------------

    def km(self, kernel_id: str) -> Any:
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            raise KernelNotFound(f"no kernel {kernel_id}") from None

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
        its cells and restarts followed from the first use of its kernel manager."""
        km = self.km(kernel_id)
        record = self.records.make(kernel_id, km.kernel_name)
        self.watcher.watch(kernel_id, km)
        if kernel_id not in self._endpoints:
            km.add_restart_callback(lambda: self.failover.process_lost(kernel_id, restarting=True), "restart")
            self._endpoints[kernel_id] = _endpoint(km.get_connection_info())
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

    async def connection_changed(self, kernel_id: str) -> None:
        """After a resume or a restart: if the kernel now listens elsewhere (another host,
        other ports), point jupyter_server's kernel manager, its activity tracking, the cell
        watcher and every notebook websocket at the new place."""
        km = self.km(kernel_id)
        provisioner = self.provisioner(kernel_id)
        if provisioner is not None and provisioner.connection_info:
            info = dict(provisioner.connection_info)
            if _endpoint(info) != _endpoint(km.get_connection_info()):
                for port in port_names:  # load_connection_info only fills ports that are 0
                    setattr(km, port, 0)
                km.load_connection_info(info)
                km.cleanup_connection_file()  # the server's copy, which `--existing` clients read
                km.write_connection_file()
                # jupyter_client keeps one control socket per kernel manager, connected once;
                # closing it makes the next shutdown or interrupt connect to the new place.
                km._close_control_socket()
        self.note_placement(kernel_id)
        endpoint = _endpoint(km.get_connection_info())
        if self._endpoints.get(kernel_id) == endpoint:
            return
        self._endpoints[kernel_id] = endpoint
        last = activity.last_activity(km)
        self.kernel_manager.ports_changed(kernel_id)
        self.kernel_manager.stop_buffering(kernel_id)  # a notebook reconnecting gets new streams
        self.kernel_manager.stop_watching_activity(kernel_id)
        self.kernel_manager.start_watching_activity(kernel_id)
        activity.restore_activity(km, last.timestamp() if last else None)
        self.watcher.forget(kernel_id, keep_cells=True)
        self.watcher.watch(kernel_id, km)
        for listener in self.on_moved:
            await listener(kernel_id)

    def forget(self, kernel_id: str) -> None:
        """The kernel was shut down: drop its record (and its ledger entry) and stop
        following it. Its checkpoints stay until retention removes them."""
        record = self.records.forget(kernel_id)
        if record is not None:
            record.back("the kernel was shut down")
        self.watcher.forget(kernel_id)
        self._endpoints.pop(kernel_id, None)

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
            "connections": self.kernel_manager.kernel_model(kernel_id).get("connections", 0),
            "rebuild_skipped": self.settings.rebuild_skipped,
        }

    async def session_of(self, kernel_id: str) -> dict[str, Any] | None:
        """The notebook session attached to the kernel (path, name, type), if any."""
        if self.session_manager is None:
            return None
        for session in await self.session_manager.list_sessions():
            if session["kernel"]["id"] == kernel_id:
                return {key: session.get(key) for key in ("path", "name", "type")}
        return None

    # -- the store -----------------------------------------------------------------------

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.settings.store_root)

    async def check_store(self) -> None:
        """Raise :class:`StoreUnavailable` if checkpoints cannot be written now (asked off the
        event loop: a store on a network file system may take its time to answer)."""
        problem = await asyncio.to_thread(writable_problem, self.settings.store_root)
        if problem is not None:
            raise StoreUnavailable(f"{problem}; set GPUCheckpointApp.store_root to a writable folder "
                                   "(`jupyter gpuckpt doctor` checks it)")

    async def checkpoints(self, kernel_id: str) -> list[dict[str, Any]]:
        """The kernel's checkpoints, oldest first, each ``durable`` (in the store) or
        ``staged`` (in host memory only, until its write-behind ends)."""
        self.km(kernel_id)
        durable = await asyncio.to_thread(list_checkpoints, self.store())
        staged = await asyncio.to_thread(list_checkpoints, self.host_memory.store())
        known = {info.id for info in durable}
        infos = [(info, DURABLE) for info in durable] + [(i, STAGED) for i in staged if i.id not in known]
        return [{**info.to_json(), "durability": durability}
                for info, durability in sorted(infos, key=lambda pair: pair[0].id) if info.kernel_id == kernel_id]

    def staged_in_use(self) -> set[str]:
        """Staged copies that must stay in host memory: not yet in the store, being written to
        it, or being read by a resume."""
        ids = self.write_behind.writing()
        for record in self.records:
            last = (record.last_checkpoint or {}).get("id")
            if last and ((record.last_checkpoint or {}).get("durability") == STAGED
                         or record.state == State.RESTORING):
                ids.add(last)
        return ids

    def _needed_by(self, checkpoint_id: str) -> tuple[KernelRecord, str] | None:
        """The kernel that needs the checkpoint to come back, and why, if one does."""
        for record in self.records:
            if record.state not in (State.SUSPENDED, State.PARKED, State.RESTORING, State.CHECKPOINTING):
                continue
            notebook = f" ({record.session['path']})" if record.session else ""
            if (record.last_checkpoint or {}).get("id") == checkpoint_id:
                return record, (f"checkpoint {checkpoint_id} is the one {record.state.value} kernel "
                                f"{record.kernel_id}{notebook} resumes from; resume the kernel or shut it down first")
            writing = (record.last_checkpoint or {}).get("durability") == STAGED
            if record.durable_checkpoint == checkpoint_id and writing:
                return record, (f"checkpoint {checkpoint_id} is what {record.state.value} kernel "
                                f"{record.kernel_id}{notebook} falls back to until its newest checkpoint is "
                                "written to the store; try again once that is durable")
        return None

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint, unless a suspended or restoring kernel needs it.

        Raises
        ------
        CheckpointInUse
            A kernel of this server resumes from it.
        gpuckpt_store.CheckpointNotFound
            There is no such checkpoint.
        """
        needed = self._needed_by(checkpoint_id)
        if needed is not None:
            raise CheckpointInUse(needed[1])
        await asyncio.to_thread(self.store().delete, checkpoint_id)
        await self._after_delete({checkpoint_id})

    async def prune(self, kernel_id: str) -> None:
        """Delete the kernel's oldest checkpoints beyond ``keep_checkpoints``."""
        keep = self.settings.keep_checkpoints
        if not keep:
            return
        store = self.store()
        mine = [i.id for i in await asyncio.to_thread(list_checkpoints, store) if i.kernel_id == kernel_id]
        doomed = [c for c in mine[:-keep] if self._needed_by(c) is None]
        for checkpoint_id in doomed:
            await asyncio.to_thread(store.delete, checkpoint_id)
        await self._after_delete(set(doomed))

    async def _after_delete(self, gone: set[str]) -> None:
        """A running kernel whose last checkpoint went falls back to its newest remaining one."""
        affected = [r for r in self.records if (r.last_checkpoint or {}).get("id") in gone]
        if not affected:
            return
        infos = await asyncio.to_thread(list_checkpoints, self.store())
        for record in affected:
            remaining = [i for i in infos if i.kernel_id == record.kernel_id and not i.problem]
            record.last_checkpoint = last_checkpoint_of(remaining[-1]) if remaining else None
            if record.durable_checkpoint in gone:
                record.durable_checkpoint = remaining[-1].id if remaining else None
        self.records.save()

    # -- server stop and restart ---------------------------------------------------------

    async def leave_running(self, suspend_within: float | None = None) -> None:
        """The server stops: kernels whose placement outlives it (Slurm jobs) keep running
        and are kept in the ledger, to be taken over at the next start; jupyter_server then
        shuts down only the others.

        With ``suspend_within`` (seconds), those others are suspended first if they run: all at
        once, straight to the store (the next server may run on another node, and nothing is
        left to write), in ``suspend_within`` seconds at most. The ledger keeps them suspended,
        so the next server registers them again, suspended. A kernel that could not be suspended
        in time (or at all) is logged and shut down with the server, as without it. Parked
        kernels need nothing: their checkpoint is durable, the next server has them suspended."""
        if suspend_within is not None:
            doomed = [kernel_id for kernel_id in list(self.kernel_manager.list_kernel_ids())
                      if (provisioner := self.provisioner(kernel_id)) is not None and not provisioner.outlives_server
                      and (record := self.records.get(kernel_id)) is not None and record.state == State.RUNNING]
            log = self.tasks.log

            async def suspend(kernel_id: str) -> None:
                try:
                    await asyncio.wait_for(self.operations.suspend(kernel_id, "server_stop", mode="suspend"),
                                           suspend_within)
                except TimeoutError:
                    log.warning("gpuckpt: kernel %s was not suspended in %g s (GPUCheckpointApp."
                                "suspend_on_stop_timeout): it is shut down with the server", kernel_id, suspend_within)
                except Exception as e:
                    log.warning("gpuckpt: kernel %s could not be suspended before the server stopped, it is shut "
                                "down with it: %s", kernel_id, str(e) or type(e).__name__)

            if doomed:
                log.info("gpuckpt: suspending %d running kernel(s) before the server stops (%g s at most)",
                         len(doomed), suspend_within)
                self.host_memory.limit = 0  # no staging: straight to the store
                await asyncio.gather(*(suspend(kernel_id) for kernel_id in doomed))
        for kernel_id in list(self.kernel_manager.list_kernel_ids()):
            provisioner = self.provisioner(kernel_id)
            record = self.records.get(kernel_id)
            if provisioner is None or record is None or not provisioner.outlives_server:
                continue
            if record.state == State.RUNNING:
                record.placement_info = provisioner.ledger_info()
                record.session = await self.session_of(kernel_id) or record.session
                last = activity.last_activity(self.km(kernel_id))
                record.last_activity = last.timestamp() if last else None
            elif record.state != State.SUSPENDED:
                continue
            km = self.km(kernel_id)
            km.stop_restarter()
            self.kernel_manager.stop_watching_activity(kernel_id)
            provisioner.detach()
            self.kernel_manager.remove_kernel(kernel_id)
        self.records.save()
        await self.records.close()  # the next server of this identity need not wait for this one's end

    async def reregister(self) -> None:
        """Register again, with the same ids, this server's kernels the ledger lists, and the
        orphans of servers that are gone (see :mod:`.ledger`; another running server's are left
        alone): suspended ones as suspended, and running ones whose placement outlived the
        server (Slurm jobs) taken over where they run. Each is listed in its ledger state from
        the moment jupyter_server knows it. Kernel runs that nobody follows (a Slurm job
        submitted as a server was killed) are ended first: those of this server, and of servers
        that are gone, that the ledger does not know. Then the staged copies of this server's
        kernels are written to the store (:meth:`.WriteBehind.resume_pending`)."""
        mine, every = await self.records.claim()
        others = await self.records.live_servers()
        GPUCheckpointProvisioner.server_key = self.records.ledger.key
        runs = {kernel_id: entry.get("placement_info") for kernel_id, entry in every.items()}
        for placement in placement_classes():
            try:
                for ended in await placement.collect_orphans(runs, others):
                    self.tasks.log.warning("gpuckpt: ended %s, which the ledger did not know", ended)
            except Exception as e:  # Slurm's commands without a cluster, say: one line, not a traceback
                self.tasks.log.warning("gpuckpt: could not look for untracked kernels of %s: %s", placement.__name__, e)
        for kernel_id, entry in mine.items():
            running = entry.get("state") == State.RUNNING.value and entry.get("placement_info")
            # a parked kernel's process ended with the server: it is suspended, from the
            # checkpoint taken as it was parked
            away = (State.SUSPENDED.value, State.PARKED.value, State.RESTORING.value)
            if kernel_id in self.kernel_manager or not (running or entry.get("state") in away):
                continue
            flag = {ADOPT: json.dumps(entry["placement_info"])} if running else {START_SUSPENDED: "1"}
            try:
                # the record first: whoever asks while the kernel starts (the REST API, a notebook's
                # websocket) finds it suspended, not a fresh running one
                record = self.records.make(kernel_id, entry["kernelspec"])
                record.load(entry)
                if not running:
                    record.away()
                await self.kernel_manager.start_kernel(kernel_id=kernel_id, kernel_name=entry["kernelspec"],
                                                       env={**os.environ, **flag})
            except Exception as e:
                self.tasks.log.error("gpuckpt: kernel %s could not be registered again: %s", kernel_id, e)
                self.records.forget(kernel_id)
                continue
            # the flag was for this start only: a later restart launches the kernel afresh
            self.km(kernel_id).update_env(env={ADOPT: "", START_SUSPENDED: ""})
            self.record(kernel_id)
            activity.restore_activity(self.km(kernel_id), record.last_activity or record.suspended_at)
            if record.session and self.session_manager is not None:
                # the notebook finds its kernel again (a suspended one resumes on its first cell)
                await self.session_manager.create_session(kernel_id=kernel_id, **record.session)
        self.records.save()
        theirs = every.keys() - mine.keys()  # the other running servers' kernels (orphans are this one's now)
        await self.write_behind.resume_pending(
            lambda kernel_id: kernel_id in mine or (kernel_id not in theirs and not others))


def _endpoint(info: dict[str, Any]) -> tuple[Any, ...]:
    """Where a kernel listens: transport, address and ports."""
    return (info.get("transport"), info.get("ip"), *(info.get(f"{c}_port") for c in
                                                     ("shell", "iopub", "stdin", "control", "hb")))
