"""Server stop and restart: what outlives the server is left running and kept in the ledger;
at the next start, this server's kernels (and orphans) are registered again with their ids.

The top of the server side's layers: it is given the registry, the operations (a stop may
suspend the running kernels first) and the write-behind (staged copies left unwritten)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from ..kernels import activity
from ..kernels.lifecycle import State
from ..kernels.registry import KernelRegistry
from ..placement.contract import ADOPT, START_SUSPENDED, placement_classes
from ..staging.host_memory import HostMemory
from ..staging.write_behind import WriteBehind
from .actions import KernelOperations


class Restarts:
    """Leaves kernels to the next server, and takes them over from the last one.

    Parameters
    ----------
    registry
        The kernels and their records (in the ledger).
    operations
        To suspend running kernels as the server stops (``suspend_on_stop``).
    write_behind
        To write the staged copies the last server left.
    host_memory
        Not used for the suspends of a stop (the next server may run on another node).
    log
        Where what could not be done is said.
    """

    def __init__(self, registry: KernelRegistry, operations: KernelOperations, write_behind: WriteBehind,
                 host_memory: HostMemory, log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.registry = registry
        self.operations = operations
        self.write_behind = write_behind
        self.host_memory = host_memory
        self.log = log

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
            registry = self.registry
            doomed = [kernel_id for kernel_id in list(registry.kernel_manager.list_kernel_ids())
                      if (provisioner := registry.provisioner(kernel_id)) is not None
                      and not provisioner.outlives_server
                      and (record := registry.records.get(kernel_id)) is not None and record.state == State.RUNNING]
            log = self.log

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
        for kernel_id in list(self.registry.kernel_manager.list_kernel_ids()):
            provisioner = self.registry.provisioner(kernel_id)
            record = self.registry.records.get(kernel_id)
            if provisioner is None or record is None or not provisioner.outlives_server:
                continue
            if record.state == State.RUNNING:
                record.placement_info = provisioner.ledger_info()
                record.session = await self.registry.session_of(kernel_id) or record.session
                last = activity.last_activity(self.registry.km(kernel_id))
                record.last_activity = last.timestamp() if last else None
            elif record.state != State.SUSPENDED:
                continue
            km = self.registry.km(kernel_id)
            km.stop_restarter()
            self.registry.kernel_manager.stop_watching_activity(kernel_id)
            provisioner.detach()
            self.registry.kernel_manager.remove_kernel(kernel_id)
        self.registry.records.save()
        await self.registry.records.close()  # the next server of this identity need not wait for this one's end

    async def reregister(self) -> None:
        """Register again, with the same ids, this server's kernels the ledger lists, and the
        orphans of servers that are gone (see :mod:`..kernels.ledger`; another running server's are left
        alone): suspended ones as suspended, and running ones whose placement outlived the
        server (Slurm jobs) taken over where they run. Each is listed in its ledger state from
        the moment jupyter_server knows it. Kernel runs that nobody follows (a Slurm job
        submitted as a server was killed) are ended first: those of this server, and of servers
        that are gone, that the ledger does not know. Then the staged copies of this server's
        kernels are written to the store (:meth:`.WriteBehind.resume_pending`)."""
        mine, every = await self.registry.records.claim()
        others = await self.registry.records.live_servers()
        runs = {kernel_id: entry.get("placement_info") for kernel_id, entry in every.items()}
        for placement in placement_classes():
            try:
                for ended in await placement.collect_orphans(runs, others, self.registry.kernel_manager.config):
                    self.log.warning("gpuckpt: ended %s, which the ledger did not know", ended)
            except Exception as e:  # Slurm's commands without a cluster, say: one line, not a traceback
                self.log.warning("gpuckpt: could not look for untracked kernels of %s: %s", placement.__name__, e)
        for kernel_id, entry in mine.items():
            running = entry.get("state") == State.RUNNING.value and entry.get("placement_info")
            # a parked kernel's process ended with the server: it is suspended, from the
            # checkpoint taken as it was parked
            away = (State.SUSPENDED.value, State.PARKED.value, State.RESTORING.value)
            if kernel_id in self.registry.kernel_manager or not (running or entry.get("state") in away):
                continue
            flag = {ADOPT: json.dumps(entry["placement_info"])} if running else {START_SUSPENDED: "1"}
            try:
                # the record first: whoever asks while the kernel starts (the REST API, a notebook's
                # websocket) finds it suspended, not a fresh running one
                record = self.registry.records.make(kernel_id, entry["kernelspec"])
                record.load(entry)
                if not running:
                    record.away()
                await self.registry.kernel_manager.start_kernel(kernel_id=kernel_id, kernel_name=entry["kernelspec"],
                                                       env={**os.environ, **flag})
            except Exception as e:
                self.log.error("gpuckpt: kernel %s could not be registered again: %s", kernel_id, e)
                self.registry.records.forget(kernel_id)
                continue
            # the flag was for this start only: a later restart launches the kernel afresh
            self.registry.km(kernel_id).update_env(env={ADOPT: "", START_SUSPENDED: ""})
            self.registry.record(kernel_id)
            activity.restore_activity(self.registry.km(kernel_id), record.last_activity or record.suspended_at)
            if record.session and self.registry.session_manager is not None:
                # the notebook finds its kernel again (a suspended one resumes on its first cell)
                await self.registry.session_manager.create_session(kernel_id=kernel_id, **record.session.to_json())
        self.registry.records.save()
        theirs = every.keys() - mine.keys()  # the other running servers' kernels (orphans are this one's now)
        await self.write_behind.resume_pending(
            lambda kernel_id: kernel_id in mine or (kernel_id not in theirs and not others))
