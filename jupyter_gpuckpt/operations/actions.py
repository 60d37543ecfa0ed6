"""The operations users and the policy ask for: checkpoint, suspend, resume, rebuild.

Every operation takes the kernel's lock and checks its state first, so two suspends, or a
suspend racing a resume, run one after the other and the second sees what the first did;
a request that finds nothing to do says so (``outcome``: ``already running``, ``already
suspended``). Each runs inside :meth:`~.runner.OperationRunner._run`, which emits its events
and returns the kernel to a safe state whatever raises.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpuckpt_store import CheckpointStore

from ..errors import KernelNotFound, NotSuspendable, OperationFailed, ParkFailed, ParkUnsupported, WrongState
from ..kernels import activity, kernel_calls
from ..kernels.lifecycle import KernelRecord, State
from ..kernels.record_parts import DURABLE, STAGED, CheckpointRef
from ..placement import GPUCheckpointProvisioner, GPUNeeds
from .runner import Operation, OperationRunner


class KernelOperations(OperationRunner):
    """The operations users and the policy ask for, on the kernels of the registry."""

    # -- refusals, before anything starts --------------------------------------------------

    async def check_can_start(self, kernel_id: str, action: str) -> None:
        """Raise now what ``action`` (``checkpoint``, ``suspend``, ``resume``, ``rebuild``) would
        refuse as it starts, where that is known before it starts, so that a request is answered
        with the refusal instead of a ``202`` and a failure in the background. A kernel's state is
        judged only while no operation holds its lock: the one under way may leave it in a state
        the action takes (a resume asked during a suspend runs after it). A park that the
        driver cannot do is no refusal: the kernel is suspended instead.

        Raises
        ------
        KernelNotFound
            No such kernel, or it is being shut down.
        NotSuspendable
            A suspend (or park) of a kernel not started with a gpuckpt kernelspec.
        WrongState
            The kernel's state refuses the action.
        StoreUnavailable
            A checkpoint or a suspend of a running kernel, and the store cannot be written.
        """
        if self.registry.shutting_down(kernel_id):
            raise KernelNotFound(f"kernel {kernel_id} is being shut down")
        record = self.registry.record(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)
        if action == "suspend":
            self._suspendable(kernel_id)
        if record.lock.locked():
            return
        if action == "resume":
            if not (record.state == State.RUNNING or (record.state == State.PARKED and provisioner is not None)):
                self._resumable(record, provisioner)
            return
        if action == "suspend" and record.state in (State.SUSPENDED, State.PARKED):
            return  # answered "already ...", or converted
        self._check_running(record)
        if action in ("checkpoint", "suspend"):
            await self._check_store(record)

    @staticmethod
    def _check_running(record: KernelRecord) -> None:
        if record.state != State.RUNNING:
            raise WrongState(f"kernel {record.kernel_id} is {record.state.value}, not running")

    @staticmethod
    def _resumable(record: KernelRecord, provisioner: GPUCheckpointProvisioner | None
                   ) -> tuple[GPUCheckpointProvisioner, CheckpointRef]:
        """What resuming a suspended kernel starts again, and from which checkpoint."""
        if record.state != State.SUSPENDED or provisioner is None or record.last_checkpoint is None:
            raise WrongState(f"kernel {record.kernel_id} is {record.state.value}, not suspended")
        return provisioner, record.last_checkpoint

    def _suspendable(self, kernel_id: str) -> GPUCheckpointProvisioner:
        provisioner = self.registry.provisioner(kernel_id)
        if provisioner is None:
            raise NotSuspendable(f"kernel {kernel_id} was not started with a gpuckpt kernelspec; "
                                 "it can be checkpointed but not suspended")
        return provisioner

    # -- checkpoint ----------------------------------------------------------------------

    async def _save(self, record: KernelRecord, event: str, staged_bytes: int | None = None) -> dict[str, Any]:
        """Checkpoint into the store, or with ``staged_bytes`` into host memory (at most that
        many new bytes), to be made durable by the write-behind once the kernel has ended."""
        session = record.session or await self.registry.session_of(record.kernel_id)
        staged = staged_bytes is not None
        root = self.host_memory.root if staged else self.registry.settings.store_root
        limit: dict[str, Any] = {"max_bytes": staged_bytes} if staged else {}
        result = await self._call(record, "save", event, store=str(root), kernel_id=record.kernel_id,
                                  kernelspec=record.kernelspec, notebook=session.path if session else None, **limit)
        record.last_checkpoint = CheckpointRef.saved(result, STAGED if staged else DURABLE, time.time())
        if not staged:
            record.durable_checkpoint = result["id"]
            await self.retention.prune(record.kernel_id)
        return result

    async def _stage(self, record: KernelRecord) -> tuple[dict[str, Any], str | None]:
        """Checkpoint for a suspend: into host memory where it has room (the GPU is then
        free before the state is on disk), else into the store. Also returns why it was not
        staged, if it was not."""
        host = self.host_memory
        problem = await asyncio.to_thread(host.problem)
        if problem is None:
            wanted = (record.last_checkpoint.bytes_total or 0) if record.last_checkpoint else 0
            durable = self.retention.store().has
            share = await asyncio.to_thread(host.take, self.write_behind.staged_in_use(), wanted, durable=durable,
                                            kernel_id=record.kernel_id)
            if share == 0:  # no room, or a state like the last one would not fit: no doomed attempt
                problem = (f"host memory for staging is short (GPUCheckpointApp.host_memory_limit {host.limit} "
                           f"bytes), the last checkpoint took {wanted}")
                self._settle_host_memory()  # what it recycled before finding it short
            else:
                try:
                    return await self._save(record, "suspend", staged_bytes=share), None
                except OperationFailed as e:  # over its share, or host memory failed it: the store takes it
                    problem = str(e)
                finally:
                    host.give_back(share)
                    self._settle_host_memory()
        return await self._save(record, "suspend"), problem

    def _settle_host_memory(self) -> None:
        """Trim and refill the spare files after a staged save, off the suspend's path (the
        process is ending meanwhile); a server that stops leaves them as they are."""
        if not self.tasks.stopping:
            kernels = [record.kernel_id for record in self.registry.records]
            self.tasks.start("staging memory", asyncio.to_thread(self.host_memory.settle, kernels))

    @staticmethod
    def _saved(result: dict[str, Any]) -> dict[str, Any]:
        return {"checkpoint_id": result["id"], "bytes": result["bytes_total"],
                "bytes_written": result["bytes_written"]}

    async def checkpoint(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Checkpoint a running kernel; it keeps running."""
        record = self.registry.record(kernel_id)
        async with record.lock:
            self._check_running(record)
            await self._check_store(record)

            async def safe_state(message: str) -> tuple[State, str | None]:
                return (State.RESTORING if record.state == State.RESTORING else State.RUNNING), None

            async with self._run(record, "checkpoint", reason, State.RUNNING, safe_state) as op:
                op.done = self._saved(await self._save(record, "checkpoint"))
            return self._result(kernel_id, "done")

    # -- suspend -------------------------------------------------------------------------

    async def suspend(self, kernel_id: str, reason: str = "request", mode: str | None = None) -> dict[str, Any]:
        """Free the kernel's GPUs; it stays registered. ``mode`` (default: the policy's
        ``release_mode``) ``"park"``: a checkpoint, then the CUDA driver moves its GPU memory
        into host memory and the process stays (where the driver cannot, it is suspended
        instead, and the event and notice say why); ``"suspend"``: a checkpoint (staged in host
        memory where there is room), then its process tree is ended."""
        record = self.registry.record(kernel_id)
        provisioner = self._suspendable(kernel_id)
        asked = mode is not None  # a refused park is worth a notice only when it was asked for
        mode = mode or self.registry.release_mode(kernel_id)
        if asked and mode == "suspend" and record.state == State.PARKED:
            return await self.convert(kernel_id, reason)
        try:
            return await self._suspend(record, provisioner, reason, mode, asked)
        finally:
            # a staged checkpoint goes to the store even when ending the process failed after it
            last = record.last_checkpoint
            if last is not None and last.staged:
                self.write_behind.start(record, last.id)

    async def _suspend(self, record: KernelRecord, provisioner: GPUCheckpointProvisioner, reason: str, mode: str,
                       asked: bool) -> dict[str, Any]:
        kernel_id = record.kernel_id
        async with record.lock:
            if record.state in (State.SUSPENDED, State.PARKED):
                return self._result(kernel_id, f"already {record.state.value}")
            self._check_running(record)
            await self._check_store(record)
            km = self.registry.km(kernel_id)
            gpus = len(provisioner.location().gpus)
            record.away()

            async def safe_state(message: str) -> tuple[State, str | None]:
                if await provisioner.running():  # still there: it keeps running, cells may go
                    provisioner.keep_running()
                    return State.RUNNING, None
                if provisioner.suspended:  # saved and ended, but ending it raised: suspended
                    return State.SUSPENDED, None
                return State.RESTORING, None  # it died: jupyter_client's restarter brings it back

            async with self._run(record, "suspend", reason, State.CHECKPOINTING, safe_state) as op:
                record.kernel_info = await self._kernel_info(kernel_id)
                record.session = await self.registry.session_of(kernel_id)
                not_parked = await provisioner.park_problem() if mode == "park" else None
                saved: dict[str, Any] | None = None
                parked = False
                if mode == "park" and not_parked is None:
                    saved = await self._save(record, "suspend")  # where it resumes from if the node dies
                    try:
                        await provisioner.park()
                    except ParkUnsupported as e:  # refused: it runs on, and is suspended from that checkpoint
                        not_parked = str(e)
                    except ParkFailed as e:
                        if e.state == "running":  # it runs on its GPUs as before
                            raise
                        # locked or half parked: its CUDA calls would hang; it ends, from that checkpoint
                        not_parked = str(e)
                    else:
                        record.enter(State.PARKED)
                        parked, record.parked_at = True, time.time()
                        op.done = {**self._saved(saved), "gpus_released": gpus, "durability": DURABLE,
                                   "mode": "park"}
                        self.emit("suspend", {"kernel_id": kernel_id, "phase": "released", **op.done,
                                              "seconds": time.time() - op.started})
                result = saved or {}
                if not parked:
                    result = await self._end(record, provisioner, op, gpus, saved)
                if not_parked is not None:
                    op.done["not_parked"] = not_parked
                    if asked:
                        record.notice = f"The kernel could not be parked ({not_parked}); it was suspended instead."
                idle = activity.idle_seconds(km)
                record.last_activity = None if idle is None else time.time() - idle
            if op.done["durability"] == DURABLE:
                self.emit("suspend", {"kernel_id": kernel_id, "phase": "durable", "checkpoint_id": result["id"],
                                      "bytes_written": result["bytes_written"], "seconds": time.time() - op.started})
            return self._result(kernel_id, "done")

    async def _end(self, record: KernelRecord, provisioner: GPUCheckpointProvisioner, op: Operation,
                   gpus: int, saved: dict[str, Any] | None = None) -> dict[str, Any]:
        """The suspend proper: checkpoint (staged where it can; none if ``saved`` is the one
        just taken), end the process, free its GPUs."""
        not_staged: str | None = None
        if saved is not None:
            result = saved
        elif provisioner.host_memory_shared:
            result, not_staged = await self._stage(record)
        else:
            result, not_staged = await self._save(record, "suspend"), "the kernel runs on another host"
        survivors = await provisioner.suspend()
        self.registry.note_placement(record.kernel_id)
        record.enter(State.SUSPENDED)
        record.suspended_at = time.time()
        if survivors:
            record.notice = (f"{len(survivors)} process(es) of the kernel outlived the suspend and may "
                             f"still hold GPU memory, so its GPUs stay held: {', '.join(survivors)}")
        durability = record.last_checkpoint.durability if record.last_checkpoint else DURABLE
        op.done = {**self._saved(result), "gpus_released": 0 if survivors else gpus, "survivors": survivors,
                   "durability": durability, "mode": "suspend"}
        if not_staged is not None:
            op.done["not_staged"] = not_staged
        self.emit("suspend", {"kernel_id": record.kernel_id, "phase": "released", **op.done,
                              "seconds": time.time() - op.started})
        return result

    async def _kernel_info(self, kernel_id: str) -> dict[str, Any]:
        """The kernel's ``kernel_info`` reply, which the websocket answers with while it is away;
        asked again each second, so that a kernel shut down or ended meanwhile fails the wait at
        once rather than after ``ready_timeout``."""
        km = self.registry.km(kernel_id)
        client = km.client()
        client.session.session = f"{kernel_calls.INTERNAL_SESSION_PREFIX}info"
        client.start_channels(stdin=False, hb=False, control=False)
        deadline = time.monotonic() + self.registry.settings.ready_timeout
        try:
            while True:
                try:
                    reply = await client.kernel_info(reply=True, timeout=1.0)
                    return dict(reply["content"])
                except TimeoutError:
                    if self.registry.shutting_down(kernel_id) or not await km.is_alive():
                        raise OperationFailed("the kernel's process ended before it answered kernel_info") from None
                    if time.monotonic() > deadline:
                        raise OperationFailed("the kernel did not answer kernel_info") from None
        finally:
            client.stop_channels()

    # -- resume --------------------------------------------------------------------------

    async def resume(self, kernel_id: str, reason: str = "request") -> dict[str, Any]:
        """Unpark a parked kernel; or relaunch a suspended kernel's process and restore its
        last checkpoint into it."""
        record = self.registry.record(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)
        async with record.lock:
            if record.state == State.RUNNING:
                return self._result(kernel_id, "already running")
            if record.state == State.PARKED and provisioner is not None:
                if await self._unpark(record, provisioner, reason):
                    return self._result(kernel_id, "done")
            provisioner, checkpoint = self._resumable(record, provisioner)

            async def safe_state(message: str) -> tuple[State, str | None]:
                await provisioner.suspend()  # end what was started; the checkpoint is kept
                return State.SUSPENDED, f"the kernel could not be resumed: {message}"

            try:
                async with self._run(record, "resume", reason, State.RESTORING, safe_state) as op:
                    source = CheckpointStore(await self._source(kernel_id, checkpoint.id))
                    needs = GPUNeeds.of_manifest(await asyncio.to_thread(source.read_manifest, checkpoint.id))
                    await provisioner.resume(needs)
                    await self.relocation.connection_changed(kernel_id)
                    # the websocket held the pages' messages: they never saw the kernel go
                    report = await self._restore(record, checkpoint.id, "resume", comms_kept=True)
                    self._resumed_by_user(record, reason)
                    record.enter(State.RUNNING)
                    record.suspended_at = None
                    self._tell(record, f"Resumed from checkpoint {report['id']}.", report)
                    op.done = {"checkpoint_id": report["id"], "source": report["source"]}
                    record.back(None)
            finally:
                provisioner.started()
            await self.write_behind.tidy(record)
            if report.get("cells_to_rerun") and self.registry.settings.rebuild_skipped == "always":
                self.tasks.start(f"rebuild {kernel_id}", self.rebuild(kernel_id, "resume"))
            return self._result(kernel_id, "done")

    def _resumed_by_user(self, record: KernelRecord, reason: str) -> None:
        """A resume the user asked for, a cell they ran, or their return to the notebook is their
        activity: the policy must not take an idle time from before the suspend for the kernel's
        and suspend it again."""
        if reason in ("request", "execute", "return"):
            activity.touch(self.registry.km(record.kernel_id))

    async def _unpark(self, record: KernelRecord, provisioner: GPUCheckpointProvisioner, reason: str) -> bool:
        """Give a parked kernel its GPU memory back. If the driver cannot, the kernel is
        suspended (its process ended; it has the checkpoint taken as it was parked) and
        False says the caller must restore it."""

        async def safe_state(message: str) -> tuple[State, str | None]:
            return State.PARKED, f"the kernel could not be unparked: {message}"

        try:
            async with self._run(record, "resume", reason, State.RESTORING, safe_state) as op:
                await provisioner.unpark()
                self._resumed_by_user(record, reason)
                record.enter(State.RUNNING)
                record.parked_at = None
                op.done = {"checkpoint_id": record.last_checkpoint_id or "", "source": "park"}
                record.back(None)
            return True
        except (ParkFailed, ParkUnsupported) as e:
            if getattr(e, "state", None) == "checkpointed":  # still parked, intact: it stays so, and says why
                raise
            await self._to_suspended(record, provisioner)
            record.notice = (f"The kernel could not be unparked ({e}); it was restored from checkpoint "
                             f"{record.last_checkpoint_id} instead.")
            return False

    async def _to_suspended(self, record: KernelRecord, provisioner: GPUCheckpointProvisioner) -> None:
        """A parked kernel becomes a suspended one: it has its checkpoint, its process ends."""
        await provisioner.suspend()
        record.enter(State.SUSPENDED)
        record.suspended_at = record.parked_at or time.time()
        record.parked_at = None
        self.registry.records.save()

    async def convert(self, kernel_id: str, reason: str = "policy") -> dict[str, Any]:
        """End a parked kernel's process, which frees the host memory its GPU state takes; it
        is then suspended, resumable anywhere from the checkpoint taken as it was parked."""
        record = self.registry.record(kernel_id)
        provisioner = self.registry.provisioner(kernel_id)
        async with record.lock:
            if record.state != State.PARKED or provisioner is None:
                raise WrongState(f"kernel {kernel_id} is {record.state.value}, not parked")
            await self._to_suspended(record, provisioner)
            self.emit("suspend", {"kernel_id": kernel_id, "phase": "released", "reason": reason,
                                  "checkpoint_id": record.last_checkpoint_id or "",
                                  "durability": DURABLE, "mode": "suspend", "gpus_released": 0,
                                  "was_parked": True})
            return self._result(kernel_id, "done")

    # -- rebuild -------------------------------------------------------------------------

    async def rebuild(self, kernel_id: str, reason: str = "request", keep: bool = False) -> dict[str, Any]:
        """Re-run, in order, the fewest recorded cells that rebuild what the last restore could
        not bring back; answers the model with ``rebuilt``: what ran, what failed, and which
        restored names kept their objects.

        The plan (the cells, and what they do beyond their names) is the report's
        ``rebuild_plan`` and the kernel's notice before any cell runs.

        Parameters
        ----------
        kernel_id
            A running kernel.
        reason
            ``request`` (the user's) or ``resume`` (``rebuild_skipped = "always"``).
        keep
            Restored names keep what the cells assign to them instead of their objects.
        """
        record = self.registry.record(kernel_id)
        async with record.lock:
            self._check_running(record)
            planned = await self._call(record, "rebuild", None, dry_run=True, keep=keep)
            record.report = {**(record.report or {}), "rebuild_plan": planned.get("plan")}
            if (planned.get("plan") or {}).get("cells"):
                record.notice = str(planned.get("text") or "") or None
            result = await self._call(record, "rebuild", None, keep=keep)
            if reason == "request":  # the user's cells, run again because they asked
                activity.touch(self.registry.km(kernel_id))
        record.report = {**(record.report or {}), "rebuilt": result}
        record.notice = str(result.get("text") or "") or None
        return {**self._result(kernel_id, "done"), "rebuilt": result}
