"""Slurm placement: the kernel is a Slurm job with ``--gres=gpu:N``, on any node.

Slurm is the engine: it queues, places, preempts and detects dead nodes; this class only
asks it. A kernel's run is one job (``--no-requeue``): suspend cancels it, so its GRES are
free in Slurm at once; resume submits a new one, constrained to GPUs the checkpoint fits,
and waits in Slurm's queue visibly; a job that ends on its own (preempted, its node failed)
is seen by jupyter_client's restarter through :meth:`poll`, which starts a new job, and the
server's failover restores the kernel there (:meth:`departure` says why it moved).

The job's files (script, connection file with the key, the kernel's exit note) are in the
kernel's folder of the store, which every node must see (``jupyter gpuckpt doctor``).

Each job carries a tag in its ``--comment`` (:class:`~.slurm_jobs.KernelTag`): from it
every server reads the GPUs each group's kernels hold (the policy's floors), and a restarted
server finds the jobs of its kernels it lost track of (:meth:`SlurmPlacement.collect_orphans`).
The policy's demand is Slurm's own queue: GPU jobs pending in the kernel's partition.
Every Slurm command goes through :class:`~.slurm_commands.SlurmCommands` (templates a site can
wrap), and jobs and nodes are read from Slurm's JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.kernelspec import KernelSpecManager
from traitlets import Bool, Dict, Float, Int, List, Unicode
from traitlets.config import Config
from traitlets.log import get_logger

from gpuckpt_store import STORE_ENV, CheckpointError, CheckpointStore, default_root, protocol

from ..errors import PlacementError, Unplaceable
from ..waiting import until
from .contract import ADOPT, START_SUSPENDED, Departure, GPUCheckpointProvisioner, GPUNeeds, Location, StartFailed
from .demand import Demand
from .gpus import GPU
from .kernelspec import PROVISIONER_NAME
from .slurm_commands import SlurmCommands
from .slurm_files import JobFiles
from .slurm_jobs import UNPLACEABLE, KernelTag, SlurmJob, store_key
from .slurm_queue import ClusterQueue, JobQueue

_START_POLL = 0.25
"""Seconds between looks at a starting job (its state, its connection file)."""
HEARTBEAT_SECONDS = 2.0
"""How long a kernel on a node Slurm no longer hears from may take to answer its heartbeat."""
_NOT_INHERITED = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "CUDA_VISIBLE_DEVICES")
"""The server's own allocation (when it runs inside one) and GPUs are not the kernel job's
(``SLURM_CONF``, which says which cluster, is kept)."""
_CAUSES = {"PREEMPTED": "preemption", "NODE_FAIL": "node failure", "TIMEOUT": "its time limit",
           "BOOT_FAIL": "node failure", "OUT_OF_MEMORY": "running out of memory"}


class SlurmPlacement(GPUCheckpointProvisioner):
    """Kernels as Slurm jobs; settings per kernelspec (provisioner config) or for all
    (``c.SlurmPlacement.partition = ...``)."""

    partition = Unicode("", config=True, help="Slurm partition kernels run in (sbatch --partition; several "
                                              "comma-separated); empty: the cluster's default.")
    gpus = Int(1, config=True, help="GPUs each kernel job asks for (--gres=gpu:N).")
    constraint = Unicode("", config=True, help="Node features the job needs (sbatch --constraint).")
    time = Unicode("", config=True, help="Time limit of each kernel job (sbatch --time); empty: the partition's.")
    sbatch_args = List(Unicode(), config=True, help="More sbatch arguments for every kernel job (not "
                                                      "--comment: it carries the kernel job's tag).")
    gpu_kinds = List(Dict(), config=True, help=(
        "The cluster's GPU kinds, so a resume asks only for GPUs the checkpoint fits: "
        '[{"model": "NVIDIA H200", "memory": 150000000000, "feature": "h200"}, ...] where "feature" is '
        'a node feature (--constraint) or "gres" a GRES type (--gres=gpu:TYPE:N). A checkpoint with GPU '
        "tensors resumes on the kinds with at least its memory per GPU (and its model, with "
        "same_gpu_model). Empty: any GPU."))
    same_gpu_model = Bool(False, config=True, help="Resume only on GPUs of the model the checkpoint was taken on "
                                                   "(else any kind with enough memory).")
    poll_interval = Float(2.0, config=True, help="Seconds between squeue reads for all this server's kernel "
                                                 "jobs (jupyter_client polls each kernel more often), and "
                                                 "between reads of the cluster's queue for the policy.")
    queue_timeout = Float(600.0, config=True, help="Seconds a kernel job may wait in Slurm's queue before its "
                                                   "start or resume fails with Slurm's reason (0: no limit).")
    start_timeout = Float(120.0, config=True, help="Seconds from the job running to its kernel reporting its "
                                                   "ports before the job is cancelled and the start fails.")
    job_root = Unicode("", config=True, help="Folder every node sees for kernel jobs' files; default "
                                             "<store>/<user>/jobs (the store must be on a shared file system).")

    outlives_server = True
    host_memory_shared = False  # a job's node is not the server's, nor is the next job's
    job_id: str | None = None
    node: str | None = None
    run = 0
    _departure: Departure | None = None
    _adopt: dict[str, Any] | None = None
    _env: dict[str, str] | None = None
    _cmd: list[str] | None = None
    _cwd: str | None = None
    _detached = False
    _commands: SlurmCommands | None = None

    @property
    def commands(self) -> SlurmCommands:
        """The Slurm commands, as this server's config (``c.SlurmCommands``) writes them."""
        if self._commands is None:
            self._commands = SlurmCommands(parent=self)
        return self._commands

    # -- where -------------------------------------------------------------------------

    @property
    def _store(self) -> Path:
        return self.context.store_root or default_root()

    @property
    def files(self) -> JobFiles:
        root = Path(self.job_root) if self.job_root else CheckpointStore(self._store).jobs_dir
        return JobFiles(root / self.kernel_id)

    def _prepare_files(self) -> JobFiles:
        """The kernel's folder, made private; in the store unless ``job_root`` says elsewhere."""
        try:
            if not self.job_root:
                CheckpointStore(self._store).prepare()
            files = self.files
            files.prepare()
        except (OSError, CheckpointError) as e:
            raise PlacementError(f"cannot write the kernel job's files: {e}") from e
        return files

    def location(self, readings: list[GPU] | None = None) -> Location:
        running = self.job_id is not None and not self.suspended and not self.waiting
        gpus = [GPU(i, f"slurm-job-{self.job_id}-gpu{i}", f"GPU {i} of job {self.job_id}", 0)
                for i in range(self.gpus)] if running else []
        return Location("slurm", self.node if running else None, self.job_id if not self.suspended else None, gpus)

    @property
    def run_id(self) -> str | None:
        return self.job_id

    @property
    def _partitions(self) -> list[str]:
        return sorted(p.strip() for p in self.partition.split(",") if p.strip())

    @property
    def demand_pool(self) -> str:
        return f"slurm:{','.join(self._partitions) or '(default)'}"

    async def demand(self) -> Demand:
        """Jobs of any user pending for GPUs in the kernel's partition(s), for Resources or
        Priority: a GPU this kernel frees can start them (a held job, one waiting on a
        dependency or for a node or partition that is down, it cannot)."""
        queue = ClusterQueue.instance()
        jobs = await queue.read(self.poll_interval, self.commands)
        partitions = set(self._partitions) or {await queue.default_partition(self.commands)}
        waiting = [j for j in jobs if j.waits_for_gpus and partitions.intersection(j.partitions)]
        return Demand(sum(j.gpus for j in waiting), [f"Slurm job {j.job_id} ({j.user})" for j in waiting])

    async def group_gpus(self) -> dict[str, int] | None:
        """GPUs held by each group's running kernel jobs, every user's, from the jobs' tags."""
        held: dict[str, int] = {}
        for job in await ClusterQueue.instance().read(self.poll_interval, self.commands):
            if job.state == "RUNNING" and job.tag is not None and job.tag.group:
                held[job.tag.group] = held.get(job.tag.group, 0) + job.gpus
        return held

    @classmethod
    async def collect_orphans(cls, runs: Mapping[str, Mapping[str, Any] | None],
                              others: Collection[str], config: Config) -> list[str]:
        """Cancel this user's kernel jobs of this server's store that the ledger does not
        keep: their server stopped while submitting them (before the ledger knew the job), so
        nothing would follow or end them, and they would hold their GPUs until their time
        limit. Jobs of kernels this server has launched or taken over since, and those of
        another server that runs (its tag names it), are left alone.

        Parameters
        ----------
        runs
            Kernel id -> the :meth:`ledger_info` the ledger keeps for it (None: none), for
            every kernel in the ledger.
        others
            The keys of the other servers that run now.
        config
            The server's config (its ``SlurmCommands``).

        Raises
        ------
        PlacementError
            Slurm does not answer, and something here uses it (a Slurm kernelspec, the
            server's Slurm settings, a kernel job in the ledger); else there is nothing to end.
        """
        commands = SlurmCommands(config=config)
        try:
            jobs = await commands.own_jobs()
        except PlacementError as e:
            uses = cls._asked_for(config, runs)
            if uses is None:  # Slurm's commands without a cluster (a workstation, an image): no job of ours either
                get_logger().debug("gpuckpt: no Slurm kernel jobs to look for (%s); nothing here uses Slurm", e)
                return []
            raise PlacementError(f"{uses}, but Slurm does not answer: {e} (`jupyter gpuckpt doctor` checks it)") from e
        store = store_key(cls.context.store_root or default_root())
        ours = JobQueue.instance().kernels
        cancelled = []
        for job in jobs:
            tag = job.tag
            if (tag is None or job.ended or job.state == "COMPLETING" or tag.store != store or tag.kernel_id in ours
                    or tag.server in others):
                continue
            kept = runs.get(tag.kernel_id)
            if kept is not None and str(kept.get("job_id")) == job.job_id:
                continue
            await commands.cancel_job(job.job_id)
            why = "is not in the ledger" if tag.kernel_id not in runs else "has no such run in the ledger"
            get_logger().warning("gpuckpt: cancelled Slurm job %s (%s): its kernel %s %s; the server stopped "
                                 "while submitting it", job.job_id, job.state.lower(), tag.kernel_id, why)
            cancelled.append(f"Slurm job {job.job_id} (kernel {tag.kernel_id})")
        return cancelled

    @staticmethod
    def _asked_for(config: Config, runs: Mapping[str, Mapping[str, Any] | None]) -> str | None:
        """What here uses Slurm, for the warning when it does not answer: a kernelspec, the
        server's Slurm settings or a kernel job in the ledger. None: nothing does, and a Slurm
        that does not answer is no news (a machine with Slurm's commands but no cluster)."""
        names = []
        for name, found in KernelSpecManager(config=config).get_all_specs().items():
            provisioner = (found["spec"].get("metadata") or {}).get("kernel_provisioner") or {}
            if (provisioner.get("provisioner_name") == PROVISIONER_NAME
                    and (provisioner.get("config") or {}).get("placement") == "slurm"):
                names.append(name)
        if names:
            return f"the kernels of kernelspec {', '.join(sorted(names))} are Slurm jobs"
        for section in ("SlurmPlacement", "SlurmCommands"):
            if config.get(section):
                return f"c.{section} is set"
        if any((run or {}).get("placement") == "slurm" for run in runs.values()):
            return "the ledger holds Slurm kernel jobs"
        return None

    @property
    def has_process(self) -> bool:
        return self.suspended or self.starting or self.start_error is not None or self.job_id is not None

    # -- launch ------------------------------------------------------------------------

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km: Any = self.parent
        env = dict(kwargs.get("env") or os.environ)
        if env.pop(START_SUSPENDED, None):
            self.suspended = True
        adopt = env.pop(ADOPT, None)
        self._adopt = json.loads(adopt) if adopt else None
        kwargs["env"] = env
        if km.curve_publickey is None:  # kept for the kernel's later runs, as the session key is
            if not zmq.has("curve"):
                raise StartFailed(PlacementError(
                    "this pyzmq has no CurveZMQ (its libzmq lacks libsodium): a Slurm kernel's messages, which "
                    "cross the network, would not be encrypted"))
            # whatever the server's transport_encryption ("auto" and "required" ask for the same)
            km.curve_publickey, km.curve_secretkey = zmq.curve_keypair()
        # The server's own copy of the connection info (ports here are placeholders until
        # the job reports the ones it bound).
        km.write_connection_file()
        self.connection_info = km.get_connection_info()
        own, km.connection_file = km.connection_file, str(self.files.connection)
        kwargs["cmd"] = km.format_kernel_cmd(extra_arguments=kwargs.pop("extra_arguments", []))
        km.connection_file = own
        return await super().pre_launch(**kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        self._cmd, self._cwd = cmd, kwargs.get("cwd")
        JobQueue.instance().kernels.add(self.kernel_id)
        inherited = {k: v for k, v in kwargs["env"].items() if k == "SLURM_CONF" or not k.startswith(_NOT_INHERITED)}
        self._env = {**inherited, protocol.KERNEL_ENV: self.kernel_id, STORE_ENV: str(self._store),
                     protocol.KERNELSPEC_ENV: str(getattr(self.parent, "kernel_name", "") or "")}
        if self.suspended:  # registered again after a server restart: stays suspended
            return self.connection_info
        self.start_error = None
        try:
            if self._adopt is not None:
                return await self._take_over(self._adopt)
            return await self._start_job(GPUNeeds())
        except PlacementError as e:
            self.start_error = str(e)
            raise StartFailed(e) from e

    async def _take_over(self, info: dict[str, Any]) -> dict[str, Any]:
        """Follow a job that outlived a server restart, from its ledger entry."""
        self.job_id, self.node, self.run = str(info["job_id"]), info.get("node"), int(info["run"])
        JobQueue.instance().track(self.job_id)
        reported = self.files.reported()
        if reported is None:  # unreachable: end it rather than leave it holding its GPUs
            await self.commands.cancel_job(self.job_id)
            raise PlacementError(f"job {self.job_id}'s connection file is gone; the kernel cannot be reached, "
                                 "so the job was cancelled")
        self.connection_info = reported  # type: ignore[assignment]
        return reported

    def ledger_info(self) -> dict[str, Any] | None:
        """The job to find again (the key stays in the job's private connection file)."""
        if self.job_id is None or self.suspended or self.starting:
            return None
        return {"placement": "slurm", "job_id": self.job_id, "node": self.node, "run": self.run}

    def _sbatch_args(self, needs: GPUNeeds) -> list[str]:
        gres_type, constraints = self._gpu_constraint(needs)
        args = [f"--job-name=jupyter-gpuckpt-{self.kernel_id[:8]}", "--no-requeue", "--export=ALL",
                f"--output={self.files.output()}"]
        if self.partition:
            args.append(f"--partition={self.partition}")
        if self.gpus:
            args.append(f"--gres=gpu:{gres_type + ':' if gres_type else ''}{self.gpus}")
        wanted = [c for c in (self.constraint, constraints) if c]
        if wanted:
            args.append("--constraint=" + "&".join(f"({c})" if "|" in c else c for c in wanted))
        if self.time:
            args.append(f"--time={self.time}")
        if self._cwd:
            args.append(f"--chdir={self._cwd}")
        tag = KernelTag.of(self.kernel_group(), self.kernel_id, self._store, self.context.identity())
        return [*args, *self.sbatch_args, f"--comment={tag}"]

    def _gpu_constraint(self, needs: GPUNeeds) -> tuple[str, str]:
        """The GRES type or features of the GPU kinds the checkpoint fits (both empty: any).

        Raises
        ------
        Unplaceable
            No GPU kind of the cluster fits the checkpoint.
        """
        if not self.gpu_kinds or not needs.device_bytes:
            return "", ""
        fits = [k for k in self.gpu_kinds if int(k.get("memory", 0)) >= needs.most_bytes
                and (not self.same_gpu_model or not needs.models or k.get("model") in needs.models)]
        if not fits:
            raise Unplaceable(f"no GPU kind in this cluster fits the checkpoint: it holds "
                              f"{needs.most_bytes / 2**30:.1f} GiB on one GPU"
                              + (f" of model {needs.models[0]}" if self.same_gpu_model and needs.models else "")
                              + f"; known kinds: {', '.join(str(k.get('model')) for k in self.gpu_kinds)}")
        features = [str(k["feature"]) for k in fits if k.get("feature")]
        if features:
            return "", "|".join(features)
        # GRES types cannot be OR-ed in one request: the smallest kind that fits
        smallest = min((k for k in fits if k.get("gres")), key=lambda k: int(k.get("memory", 0)), default=None)
        return (str(smallest["gres"]) if smallest else ""), ""

    async def _start_job(self, needs: GPUNeeds) -> dict[str, Any]:
        """Submit a job for the kernel and wait until it reports its ports; the new
        connection info. The job is cancelled if it does not get there."""
        assert self._cmd is not None and self._env is not None, "launched before"
        self.run += 1
        run, files = self.run, self._prepare_files()
        files.write_connection(dict(self.connection_info))
        files.write_script(self.kernel_id, self._cmd)
        files.exit_note(run).unlink(missing_ok=True)  # a note of an earlier server's run of that number
        env = {**self._env, protocol.ON_TERM_ENV: str(files.exit_note(run))}
        self.waiting = "waiting for a GPU: submitting the job to Slurm"
        job_id = await self.commands.submit_job(str(files.script), self._sbatch_args(needs), env)
        self.job_id, self.node, self._departure = job_id, None, None
        try:
            info = await self._until_reported(job_id, run)
        except BaseException:
            try:
                await self._end_job()
                await self._until_ended(job_id)
            except Exception as cleanup:
                self.log.error("gpuckpt: job %s could not be cancelled: %s", job_id, cleanup)
            self.job_id = None
            raise
        finally:
            self.waiting = None
        self.connection_info = info  # type: ignore[assignment]
        return info

    async def _until_reported(self, job_id: str, run: int) -> dict[str, Any]:
        queue, files = JobQueue.instance(), self.files
        submitted = time.monotonic()
        running_since: float | None = None

        async def reported() -> dict[str, Any] | None:
            """The connection info the kernel wrote back; None while it has not yet."""
            nonlocal running_since
            job = await queue.job(job_id, _START_POLL, self.commands)
            if job.state == "PENDING":
                reason = f", reason {job.reason}" if job.reason not in ("", "None") else ""
                self.waiting = f"waiting for a GPU: queued in Slurm, job {job_id}{reason}"
                if job.reason.startswith(UNPLACEABLE):
                    raise Unplaceable(f"Slurm cannot run job {job_id} as asked "
                                      f"(partition {self.partition or 'default'}): {job.reason}")
                if self.queue_timeout and time.monotonic() - submitted > self.queue_timeout:
                    raise PlacementError(f"job {job_id} was still queued in Slurm ({job.reason}) after "
                                         f"{self.queue_timeout:.0f} s (SlurmPlacement.queue_timeout)")
                return None
            if job.ended:
                tail = files.output_tail(job_id)
                raise PlacementError(f"job {job_id} ended ({job.state}) before its kernel reported back"
                                     + (f": {tail}" if tail else ""))
            self.node = job.node or self.node
            self.waiting = f"starting: job {job_id} {job.state.lower()} on {job.node}, waiting for the kernel"
            # the start clock runs from RUNNING, not CONFIGURING (a node booting)
            running_since = (running_since or time.monotonic()) if job.state == "RUNNING" else None
            info = files.reported()
            if info is None and running_since is not None and time.monotonic() - running_since > self.start_timeout:
                raise PlacementError(f"job {job_id} runs on node {job.node}, but its kernel did not report "
                                     f"back within {self.start_timeout:.0f} s (SlurmPlacement.start_timeout); "
                                     f"see {files.output(job_id)}")
            return info

        info: dict[str, Any] | None = await until(reported, None, _START_POLL)
        assert info is not None, "no time limit: until returns a value"
        return info

    # -- state -------------------------------------------------------------------------

    async def poll(self) -> int | None:
        if self.suspended or self.starting or self.start_error is not None:
            return None
        if self.job_id is None:
            return 0
        job = await JobQueue.instance().job(self.job_id, self.poll_interval, self.commands)
        if job.suspect and not await self._heartbeat():
            # Completing, or Slurm no longer hears the node, and the kernel does not answer
            # either: it is gone (Slurm says so only after SlurmdTimeout). The job is
            # cancelled, so that Slurm ends it should the node come back.
            if self._departure is None:
                note = self.files.read_exit_note(self.run)
                self._departure = (self._why_ended(job) if note and note.get("checkpoint_id")
                                   else Departure("node failure", self.node))
            await self.commands.cancel_job(self.job_id)
            return 1
        if not job.ended:
            return None
        if self._departure is None:
            self._departure = self._why_ended(job)
        return 1

    async def _heartbeat(self) -> bool:
        """Whether the kernel answers a ping on its heartbeat channel within ``HEARTBEAT_SECONDS``."""
        km: Any = self.parent
        socket = zmq.asyncio.Context.instance().socket(zmq.REQ)
        socket.linger = 0
        if km.curve_publickey is not None:
            socket.curve_secretkey, socket.curve_publickey = km.curve_secretkey, km.curve_publickey
            socket.curve_serverkey = km.curve_publickey
        try:
            socket.connect(f"tcp://{km.ip}:{km.hb_port}")
            await socket.send(b"ping")
            return bool(await socket.poll(HEARTBEAT_SECONDS * 1000))
        finally:
            socket.close()

    def _why_ended(self, job: SlurmJob) -> Departure:
        note = self.files.read_exit_note(self.run) or {}
        cause = _CAUSES.get(job.state) or ("preemption" if note else "the job ended")
        return Departure(cause, self.node, note.get("checkpoint_id"), note.get("last_cell"),
                         note.get("interrupted_cell"), note.get("error"))

    def departure(self) -> Departure | None:
        gone, self._departure = self._departure, None
        return gone

    async def running(self) -> bool:
        if self.job_id is None:
            return False
        return not (await JobQueue.instance().job(self.job_id, self.poll_interval, self.commands)).ended

    def lost(self) -> bool:
        if self.suspended or self.starting or self.job_id is None:
            return False
        job = JobQueue.instance().cached(self.job_id)
        return job is not None and job.ended

    async def wait(self) -> int | None:
        await until(self._run_over, None, _START_POLL)
        return 0

    async def _run_over(self) -> bool:
        """The kernel has no job now, or its job has ended."""
        if self.job_id is None or self.suspended:
            return True
        return (await JobQueue.instance().job(self.job_id, _START_POLL, self.commands)).ended

    # -- signals and ending ------------------------------------------------------------

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        """Long enough for the job state, read every ``poll_interval``, to show the end."""
        return recommended + 2 * self.poll_interval

    async def send_signal(self, signum: int) -> None:
        if not signum or self.job_id is None or self.suspended:
            return
        job = JobQueue.instance().cached(self.job_id)
        if job is not None and (job.ended or job.suspect):
            return  # a signal goes to the node's slurmd, which may not answer: nothing to interrupt
        await self.commands.cancel_job(self.job_id, signal.Signals(signum).name.removeprefix("SIG"))

    async def kill(self, restart: bool = False) -> None:
        await self._end_job()

    async def terminate(self, restart: bool = False) -> None:
        await self._end_job()

    async def _end_job(self) -> None:
        """Cancel the job (Slurm then frees its GRES). The exit note is written first, so the
        kernel, seeing that the server ended it, exits on Slurm's SIGTERM without taking a
        checkpoint of its own."""
        if self.job_id is None or self._detached:
            return
        self.files.write_exit_note(self.run, {"reason": "ended by the server"})
        await self.commands.cancel_job(self.job_id)

    async def shutdown_requested(self, restart: bool = False) -> None:
        self.start_error = None  # a kernel that failed to start again ends at once
        if self.suspended:  # no job runs: gone at once, and a restart starts a fresh job
            self.suspended = False

    async def cleanup(self, restart: bool = False) -> None:
        if self._detached:
            return
        await self._end_job()
        if self.job_id is not None:
            JobQueue.instance().forget(self.job_id)
        self.job_id = None
        if not restart and not self.suspended:
            shutil.rmtree(self.files.folder, ignore_errors=True)

    def detach(self) -> None:
        self._detached = True

    # -- suspend and resume ------------------------------------------------------------

    async def suspend(self) -> list[str]:
        """Cancel the job: Slurm frees its GRES at once and may lend them to anyone."""
        self.suspended = True
        await self._end_job()
        job_id, self.job_id = self.job_id, None
        if job_id is not None:
            await self._until_ended(job_id)
            JobQueue.instance().forget(job_id)
        self.node = None
        return []

    async def _until_ended(self, job_id: str) -> None:
        async def ended() -> bool:
            return (await JobQueue.instance().job(job_id, _START_POLL, self.commands)).ended

        if not await until(ended, self.commands.timeout, _START_POLL):
            raise PlacementError(f"job {job_id} did not end within {self.commands.timeout:.0f} s of scancel")

    async def resume(self, needs: GPUNeeds) -> None:
        """Submit a new job, on any node with GPUs that fit ``needs``, and wait for it."""
        if not self.suspended:
            return
        self.starting = True
        self.suspended = False
        await self._start_job(needs)

