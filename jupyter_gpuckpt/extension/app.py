"""The server extension: its settings (traitlets), the parts built from them (``wiring.py``), and
the server's start and stop. The policy loop is ``policy/loop.py``, events go through
``event_bridge.py``."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_core.utils import ensure_async
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from traitlets import Bool, CaselessStrEnum, Dict, Float, Int, List, Set, TraitError, Unicode, default, validate

from gpuckpt_store import default_root, human_bytes, writable_problem
from gpuckpt_store.spare import RESERVE

from .. import events, metrics
from ..errors import REFUSALS
from ..kernels import activity
from ..kernels.ledger import Ledger, default_server_id
from ..kernels.lifecycle import State
from ..kernels.settings import Settings
from ..placement import GPUCheckpointProvisioner, ServerContext
from ..placement.gpus import GPUPool
from ..policy import decisions as policy
from ..policy import overrides as policy_overrides
from ..policy.loop import PolicyLoop
from ..policy.reclaim import Reclaimer, unix_group, unix_groups, user_name
from ..staging import host_memory
from ..staging.host_memory import HostMemory, parse_limit
from ..tasks import BackgroundTasks
from . import sigint, wiring
from .event_bridge import EventBridge
from .handlers import default_handlers
from .websocket import SuspendAwareConnection

KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"
"""jupyter_server's own event for kernels started, shut down ...: how we learn of shutdowns."""


class GPUCheckpointApp(ExtensionApp):
    """Suspend idle GPU kernels to checkpoints and resume them on demand."""

    name = "jupyter_gpuckpt"

    store_root = Unicode(config=True, help="Checkpoint store root (shared between nodes for failover elsewhere). "
                                           "Default: $JUPYTER_GPUCKPT_STORE or <jupyter data dir>/gpuckpt/store.")
    ledger_path = Unicode(config=True, help="File remembering suspended kernels across server restarts, shared by "
                                            "the user's servers that use the same data dir (see server_id).")
    server_id = Unicode(
        config=True,
        help="This server's name in the ledger: the same across its restarts, different between servers that run "
             "at once. A starting server registers again its own kernels and those of servers that are gone, never "
             "another running server's. Default: under JupyterHub the server's prefix (jupyterhub:/user/NAME/), "
             "else 'HOST:PORT ROOT_DIR' (a server started again on another port adopts its predecessor's kernels "
             "once that one is gone).")
    idle_timeout = Float(0.0, config=True, help="Suspend a GPU kernel idle this many seconds (reclaim 'idle' and "
                                                "'both'); 0 never suspends by idle time.")
    cpu_idle_timeout = Float(-1.0, config=True, help="Suspend a kernel that holds no GPU after this many idle "
                                                     "seconds; below 0: the same as idle_timeout, 0 never.")
    reclaim = CaselessStrEnum(
        list(policy.RECLAIM_MODES), "idle", config=True,
        help="When the policy suspends idle kernels: 'idle' after idle_timeout (or their rhythm); 'on_demand' only "
             "while GPU requests wait that their GPUs could serve (a kernel of this server waiting in the GPU "
             "pool; with Slurm placement, GPU jobs pending in the kernels' partitions), cheapest first (longest "
             "idle, least state, most GPUs) and never more than needed; 'both': on demand after demand_idle, "
             "always after idle_timeout.")
    demand_idle = Float(60.0, config=True, help="Seconds a kernel must be idle before it is suspended for a "
                                                "waiting GPU request (reclaim 'on_demand' and 'both').")
    rhythm = Bool(False, config=True, help="Take each kernel's idle limit from its own pauses between cells: the "
                                           "limit (from rhythm_min to idle_timeout) with the least expected cost per "
                                           "pause, counting the GPU-seconds held idle and rhythm_wait_cost if the "
                                           "pause outlasts it, under a model of its pauses (a typical pause with a "
                                           "spread, and a share of breaks), once it has made rhythm_gaps pauses; "
                                           "until then its user's recent pauses on this server. A user who pauses "
                                           "30 s to 3 min between cells keeps the kernel through them and gives the "
                                           "GPU back within minutes of leaving, instead of after one timeout for "
                                           "all. `jupyter gpuckpt replay` shows the trade-off.")
    rhythm_wait_cost = Float(350.0, config=True, help="See rhythm: how many idle GPU-seconds one cell kept "
                                                      "waiting for a restore is worth (lower: shorter limits).")
    rhythm_min = Float(30.0, config=True, help="See rhythm: the shortest idle limit it sets, in seconds.")
    rhythm_gaps = Int(3, min=1, config=True,
                      help="See rhythm: pauses a kernel makes before its rhythm is used (at least 1; until then its "
                           "user's last 20 pauses on the server, if as many).")
    warn_before = Float(60.0, config=True, help="Seconds of warning before the policy suspends a kernel whose "
                                                "notebook is open (a JupyterLab notification with \"Keep "
                                                "running\", and a policy event); 0 warns nobody.")
    group_floors = Dict(value_trait=Int(), config=True,
                        help="GPUs each group's idle kernels keep under policy suspends, e.g. {'vision': 2}: "
                             "a group never goes below it by policy. With Slurm placement, what a group holds "
                             "is read from Slurm (kernel jobs carry their group), across every user's server.")
    user_groups = Dict(value_trait=Unicode(), config=True,
                       help="The group of each user for group_floors, e.g. {'alice': 'vision'}. Default: the "
                            "user's primary Unix group. A kernelspec's metadata.gpuckpt.group wins over both where the "
                            "user is in that group (the mapped one, or one of their Unix groups).")
    gpu_utilization_threshold = Int(5, config=True,
                                    help="A kernel whose GPUs are busier than this (percent) is not idle.")
    suspend_connected = Bool(True, config=True, help="Whether kernels with open browser connections may be suspended.")
    wait_budget = Float(0.0, min=0.0, max=0.99, config=True, help=(
        "The share of a kernel's cells that may wait for a restore (0.1: one in ten); 0 turns it off. Each kernel's "
        "idle limit (from rhythm_min up to idle_timeout) is then the shortest at which the share of its pauses "
        "expected to outlast it is within the budget, under a model of its own pauses (its user's, then the "
        "server's, until it has rhythm_gaps of them), whatever GPUs it holds. Takes the place of rhythm."))
    resume_on_return = Bool(True, config=True, help="Resume a suspended or parked kernel as soon as its user comes "
                                                    "back to its notebook (JupyterLab reports the notebook's tab "
                                                    "shown, its window focused, typing in it), so that the cell "
                                                    "they then run finds the kernel back or nearly back.")
    exempt_kernels = List(Unicode(), config=True, help="Kernel ids never suspended by policy.")
    exempt_kernelspecs = List(Unicode(), config=True, help="Kernelspec names never suspended by policy.")
    user_overridable = List(
        Unicode(), config=True,
        help="Policy settings a kernelspec's metadata.gpuckpt may loosen, e.g. ['warn_before', "
             "'suspend_connected']. Any other setting it may only tighten (a lower idle_timeout, not 0; "
             "the rule per setting: jupyter_gpuckpt.policy.overrides.TIGHTER); a looser value is ignored, logged, and "
             "listed in GET /api/gpuckpt/policy under refused_overrides. Default: none. Behind JupyterHub, "
             "set it (and the policy) in c.Spawner.args, which the users' own config files cannot change.")
    _refusals_logged = Set(help="(kernelspec, setting, value) refusals already logged: once each.")
    checkpoint_interval = Float(0.0, config=True, help="Checkpoint running kernels this often (seconds) "
                                                       "when they ran something since; 0 turns it off.")
    keep_checkpoints = Int(5, config=True, help="Checkpoints kept per kernel; older ones are deleted. 0 keeps all.")
    policy_interval = Float(10.0, config=True, help="Seconds between policy passes.")
    ready_timeout = Float(60.0, config=True, help="Seconds a kernel may take to answer the server, a relaunched "
                                                  "one included, before the operation fails (and the kernel "
                                                  "stays resumable).")
    stall_timeout = Float(60.0, config=True, help="Seconds a checkpoint or restore may go without reporting "
                                                  "progress (kernels report every 5 s at most while they work) "
                                                  "before it fails.")
    rebuild_skipped = CaselessStrEnum(
        ["ask", "always", "never"], "ask", config=True,
        help="What a resume does with variables it could not restore: 'ask' tells the user which cells "
             "rebuild them (`%gpuckpt rebuild`, or the panel's button); 'always' re-runs those cells by "
             "itself; 'never' only lists them.")

    release_mode = CaselessStrEnum(
        ["park", "suspend"], "park", config=True,
        help="How a suspend frees a kernel's GPUs, unless the request says (`?mode=`) or the kernelspec "
             "(metadata.gpuckpt.release_mode): 'park' has the CUDA driver move the GPU memory into host "
             "memory while the process stays (driver 570+ and cuda-bindings in the kernel's environment; a "
             "checkpoint is taken first), and falls back to 'suspend' where the driver cannot; 'suspend' ends "
             "the process after a checkpoint.")
    park_timeout = Float(3600.0, config=True, help="Seconds a kernel may stay parked before its process is ended "
                                                   "(it is then suspended, from the checkpoint taken as it was "
                                                   "parked), freeing the host memory its GPU state takes; 0 never.")
    host_memory_limit = Unicode(
        "25%", config=True,
        help="Host memory a suspend may stage kernels' state in, so their GPUs are free before the state is "
             "on disk (it is written to the store right after): bytes ('8G', '512M') or a share of physical "
             "memory ('25%'). A suspend that would need more goes straight to the store; '0' turns staging off.")
    staging_reserve = Unicode(
        "0", config=True,
        help="Host memory allocated for staging when the server starts, so that even its first suspend "
             "copies the kernel's state into memory that exists (a new /dev/shm file took its first write "
             "several times slower than one written before): bytes ('8G') or a share of physical memory "
             "('10%'), within host_memory_limit. The staged copies a suspend lets go are recycled into it "
             "either way; '0' (the default) keeps none beyond that.")
    staging_root = Unicode(config=True, help="Where staged state lives: a folder in memory, private to the "
                                             "user. Default: /dev/shm/jupyter-gpuckpt-<user>.")
    write_behind_bandwidth = Float(0.0, config=True, help="Bytes per second at most that writing staged state "
                                                          "to the store may take (0: no limit), so it leaves "
                                                          "a shared file system to running kernels.")
    suspend_on_stop = Bool(
        config=True,
        help="Suspend the running kernels (straight to the store, all at once) when the server stops, "
             "instead of letting it shut them down: the next server lists them suspended and they resume "
             "with their state on their next cell. Kernels whose placement outlives the server (Slurm jobs) "
             "keep running as without it. Default: on under JupyterHub (a culled or stopped server loses "
             "nothing), off otherwise (stopping `jupyter lab` shuts its kernels down).")
    suspend_on_stop_timeout = Float(
        20.0, config=True,
        help="Seconds the suspends of suspend_on_stop may take in all; a kernel not suspended by then is shut "
             "down with the server. Keep it below the time the hub gives a stopping server (SIGINT, then "
             "Spawner.interrupt_timeout and term_timeout for local processes; KubeSpawner.delete_grace_period).")

    @default("suspend_on_stop")
    def _default_suspend_on_stop(self) -> bool:
        from os import environ  # the hub starts its users' servers with these set

        return bool(environ.get("JUPYTERHUB_API_TOKEN") and environ.get("JUPYTERHUB_SERVICE_PREFIX"))

    @validate("rhythm_wait_cost")
    def _check_wait_cost(self, proposal: Any) -> float:
        if proposal["value"] < 0:
            raise TraitError(f"GPUCheckpointApp.rhythm_wait_cost must not be negative, not {proposal['value']}")
        return float(proposal["value"])

    @validate("user_overridable")
    def _check_user_overridable(self, proposal: Any) -> list[str]:
        unknown = sorted(set(proposal["value"]) - set(policy.POLICY_FIELDS))
        if unknown:
            raise TraitError(f"GPUCheckpointApp.user_overridable: {', '.join(unknown)} is no policy setting "
                             f"(they are: {', '.join(policy.POLICY_FIELDS)})")
        return list(proposal["value"])

    @validate("host_memory_limit", "staging_reserve")
    def _check_memory_size(self, proposal: Any) -> str:
        try:
            parse_limit(proposal["value"])
        except ValueError as e:
            raise TraitError(f"GPUCheckpointApp.{proposal['trait'].name}: {e}") from None
        return str(proposal["value"])

    @default("staging_root")
    def _default_staging_root(self) -> str:
        return str(host_memory.default_root())

    @default("store_root")
    def _default_store_root(self) -> str:
        return str(default_root())

    @default("ledger_path")
    def _default_ledger_path(self) -> str:
        return str(Path(jupyter_data_dir()) / "gpuckpt" / "ledger.json")

    def initialize_settings(self) -> None:
        assert self.serverapp is not None, "settings are initialized once the server is linked"
        self.settings["gpuckpt_app"] = self
        activity.untrack_server_calls(self.serverapp.kernel_manager)
        self._use_suspend_aware_websockets()
        GPUPool.clear_instance()  # this server's inventory, read now
        GPUPool.instance(parent=self)
        self.tasks = BackgroundTasks(self.log)
        self.metrics = metrics.track(self)
        self.emit = EventBridge(self.serverapp, self.metrics, self.log)
        settings = Settings(Path(self.store_root), self.keep_checkpoints, self.ready_timeout, self.stall_timeout,
                            self.rebuild_skipped,
                            release_mode=self.release_mode,
                            release_mode_of=lambda kernel_id: self.policy_for(kernel_id).release_mode,
                            write_behind_bandwidth=self.write_behind_bandwidth)
        host_memory = HostMemory(Path(self.staging_root), parse_limit(self.host_memory_limit),
                                 parse_limit(self.staging_reserve))
        self.parts = wiring.build(self.serverapp.kernel_manager, self.serverapp.session_manager, settings,
                                  self._ledger(), host_memory, self.emit, self.tasks)
        self.parts.relocation.on_moved.append(SuspendAwareConnection.kernel_moved)
        group = self.user_groups.get(user_name()) or unix_group()
        ledger = self.parts.registry.records.ledger
        GPUCheckpointProvisioner.serve(ServerContext(Path(self.store_root), group, frozenset({group, *unix_groups()}),
                                                     lambda: ledger.key))
        self.reclaimer = Reclaimer(self.parts.registry, self.parts.operations, self.policy_for, self.group_floors,
                                   self.group_of, self.emit, self.log)
        self.policy_loop = PolicyLoop(self.reclaimer, self.parts.registry, self.parts.operations, host_memory,
                                      self.policy_interval, self._busy_is_activity)
        events.register_schemas(self.serverapp)
        assert self.serverapp.event_logger is not None, "jupyter_server 2 always has one"
        self.serverapp.event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)
        problem = writable_problem(Path(self.store_root))
        if problem is not None:
            self.log.warning("gpuckpt: %s: checkpoints and suspends will fail until it is fixed "
                             "(GPUCheckpointApp.store_root; `jupyter gpuckpt doctor` checks it)", problem)

    def _ledger(self) -> Ledger:
        """The ledger, under this server's identity (known once the port is bound, at first use). It
        waits, at first use, for a server of that identity still stopping: as long as its
        suspend_on_stop may take, and 10 s for the operations it ends first."""
        def server_id() -> str:
            return self.server_id or default_server_id(self.serverapp)

        return Ledger(Path(self.ledger_path), server_id, self.log, wait=self.suspend_on_stop_timeout + 10.0)

    def _use_suspend_aware_websockets(self) -> None:
        """Kernel websockets must survive a suspend and resume the kernel on execute.

        Set here, in the web app's settings, because jupyter_server reads only
        ``jpserver_extensions`` from an extension's ``jupyter_server_config.d`` file. A
        websocket class the admin configured is kept (with a warning) unless it is the stock one.
        """
        assert self.serverapp is not None
        configured = self.serverapp.kernel_websocket_connection_class
        if configured is ZMQChannelsWebsocketConnection or issubclass(configured, SuspendAwareConnection):
            self.settings["kernel_websocket_connection_class"] = SuspendAwareConnection
        else:
            self.log.warning("kernel_websocket_connection_class is %s: suspended kernels will not "
                             "resume when a notebook runs a cell", configured)

    def initialize_handlers(self) -> None:
        self.handlers.extend(default_handlers)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        await self.parts.restarts.reregister()
        self.tasks.start("policy loop", self.policy_loop.run())
        self.tasks.start("staging memory", self._settle_staging_memory())
        if self.suspend_on_stop:
            sigint.stop_on_sigint(serverapp)

    async def _settle_staging_memory(self) -> None:
        """Allocate the staging reserve (and free what kernels gone since the last server left)."""
        host = self.parts.host_memory
        started = time.perf_counter()
        try:
            await asyncio.to_thread(host.settle, [r.kernel_id for r in self.parts.registry.records])
        except OSError as e:
            self.log.warning("gpuckpt: the staging memory in %s could not be settled: %s", host.root, e.strerror or e)
            return
        if host.reserve:
            made = await asyncio.to_thread(host.spare, RESERVE)
            self.log.info("gpuckpt: staging reserve: %s of %s allocated in %s in %.1f s", human_bytes(made),
                          human_bytes(host.reserve), host.root, time.perf_counter() - started)

    async def stop_extension(self) -> None:
        """The server stops: what is suspended stays in the ledger (the kernels jupyter_server
        shuts down next are not forgotten), background work is cancelled and awaited, and with
        ``suspend_on_stop`` the running kernels are suspended first.

        Runs once: a second stop signal (the hub's SIGTERM after its SIGINT) waits for the first
        stop instead of starting another, so no kernel is shut down while it is being suspended."""
        async def stop() -> None:
            assert self.serverapp is not None and self.serverapp.event_logger is not None
            self.serverapp.event_logger.remove_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)
            await self.tasks.stop()  # operations under way end first, each in its safe state
            await self.parts.restarts.leave_running(
                suspend_within=self.suspend_on_stop_timeout if self.suspend_on_stop else None)
            self.parts.registry.watcher.close()
            self.metrics.stop()
            sigint.release_sigint(self.serverapp)

        stopping: asyncio.Future[None] | None = getattr(self, "_stopping", None)
        if stopping is None:
            stopping = self._stopping = asyncio.ensure_future(stop())
        await asyncio.shield(stopping)

    async def _on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """Follow every kernel from its start (its restarts, the cells it runs, where it runs)
        and forget it at its shutdown."""
        kernel_id = data.get("kernel_id")
        if not kernel_id or data.get("status") != "success":
            return
        assert self.serverapp is not None
        if data.get("action") == "start" and kernel_id in self.serverapp.kernel_manager:
            self.parts.registry.record(str(kernel_id))
        elif data.get("action") == "restart" and kernel_id in self.serverapp.kernel_manager:
            record = self.parts.registry.records.get(str(kernel_id))
            if record is not None and record.state in (State.SUSPENDED, State.FAILED):
                # a fresh process with no state, as a restart means; the checkpoints stay listed
                record.restarted()
                self.parts.registry.records.save()
            # the user restarted it: a Slurm kernel now runs in a new job, elsewhere
            await self.parts.relocation.connection_changed(str(kernel_id))
        elif data.get("action") == "shutdown":
            record = self.parts.registry.records.get(str(kernel_id))
            self.parts.registry.forget(str(kernel_id))
            self.parts.relocation.forget(str(kernel_id))
            await self.parts.registry.records.saved()  # a server killed now must not register it again
            if record is not None and not self.tasks.stopping:
                # its staged copies leave host memory: those in the store now, one being written once it is
                self.tasks.start(f"staging of {kernel_id}", self.parts.write_behind.tidy(record))

    def start_operation(self, kernel_id: str, action: str, reason: str = "request", **options: Any) -> None:
        """Run ``action`` on a kernel in the background (a ``202`` answer); a failure lands in
        the kernel's ``last_error``, where a client polling the kernel looks. A refusal (the
        kernel changed since the request was answered, or was shut down) is logged as one line;
        a failure that ran, or a bug, with its traceback."""
        operation = getattr(self.parts.operations, action)

        async def run() -> None:
            try:
                await operation(kernel_id, reason, **options)
            except Exception as e:
                record = self.parts.registry.records.get(kernel_id)
                if record is not None:
                    record.last_error = str(e)
                if not isinstance(e, REFUSALS):
                    raise
                self.log.info("gpuckpt: %s of %s (%s) refused: %s", action, kernel_id, reason, e)

        self.tasks.start(f"{action} {kernel_id}", run())

    def user_returned(self, kernel_id: str) -> str:
        """JupyterLab saw the user come back to the kernel's notebook: start its resume now
        (``resume_on_return``); the outcome: ``started``, or why nothing started.

        Raises
        ------
        KernelNotFound
            No such kernel.
        """
        record = self.parts.registry.record(kernel_id)
        if record.state not in (State.SUSPENDED, State.PARKED):
            return f"nothing to resume: the kernel is {record.state.value}"
        if not self.policy_for(kernel_id).resume_on_return:
            return "nothing started: resume_on_return is off"
        self.start_operation(kernel_id, "resume", reason="return")
        return "started"

    def _busy_is_activity(self) -> None:
        """A cell that runs counts as the server's activity, though it prints nothing: the
        server's ``last_activity`` (which JupyterHub's idle culler reads) takes every
        ``*_last_activity`` web app setting into account."""
        assert self.serverapp is not None
        self.serverapp.web_app.settings["gpuckpt_last_activity"] = datetime.now(timezone.utc)

    # -- policy --------------------------------------------------------------------------

    def base_policy(self) -> policy.Policy:
        return policy.Policy(**{name: getattr(self, name) for name in policy.POLICY_FIELDS if name != "exempt"})

    def policy_for(self, kernel_id: str) -> policy.Policy:
        """The kernel's effective policy: the server's, with what its kernelspec's
        ``metadata.gpuckpt`` may change (``user_overridable``); refusals are logged once."""
        km = self.parts.registry.km(kernel_id)
        metadata = km.kernel_spec.metadata if km.kernel_spec else {}
        effective, refused = policy_overrides.overridden(self.base_policy(), metadata, self.user_overridable,
                                                         GPUCheckpointProvisioner.context.member_of)
        for setting, reason in refused.items():
            seen = (km.kernel_name, setting, reason)
            if seen not in self._refusals_logged:
                self._refusals_logged.add(seen)
                applies = "" if setting == "group" else \
                    "; the server's value applies (GPUCheckpointApp.user_overridable)"
                self.log.warning("gpuckpt: kernelspec %s may not set %s: %s%s", km.kernel_name, setting, reason,
                                 applies)
        if kernel_id in self.exempt_kernels or km.kernel_name in self.exempt_kernelspecs:
            effective.exempt = True
        return effective

    async def refused_overrides(self) -> dict[str, dict[str, str]]:
        """What each kernelspec (installed now, or of a running kernel) asks in its
        ``metadata.gpuckpt`` that the server refuses: ``{kernelspec: {setting: reason}}``.

        .. versionadded:: 0.2
        """
        assert self.serverapp is not None and self.serverapp.kernel_spec_manager is not None
        specs = await ensure_async(self.serverapp.kernel_spec_manager.get_all_specs())
        metadata = {name: spec.get("spec", {}).get("metadata") or {} for name, spec in specs.items()}
        for kernel_id in self.serverapp.kernel_manager.list_kernel_ids():
            km = self.serverapp.kernel_manager.get_kernel(kernel_id)
            if km.kernel_spec is not None:
                metadata.setdefault(km.kernel_name, km.kernel_spec.metadata)
        base = self.base_policy()
        refusals = {name: policy_overrides.overridden(base, meta, self.user_overridable,
                                                      GPUCheckpointProvisioner.context.member_of)[1]
                    for name, meta in metadata.items()}
        return {name: refused for name, refused in sorted(refusals.items()) if refused}

    def group_of(self, kernel_id: str) -> str:
        """The kernel's group for the floors (see ``GPUCheckpointProvisioner.kernel_group``)."""
        provisioner = self.parts.registry.provisioner(kernel_id)
        return provisioner.kernel_group() if provisioner else GPUCheckpointProvisioner.context.group

    async def policy_model(self) -> dict[str, Any]:
        """The policy as ``GET /api/gpuckpt/policy`` answers it; whether the store can be written
        is asked off the event loop (a network file system may take its time)."""
        store_problem = await asyncio.to_thread(writable_problem, Path(self.store_root))
        return {**self.base_policy().__dict__, "user_overridable": list(self.user_overridable),
                "refused_overrides": await self.refused_overrides(), "group_floors": dict(self.group_floors),
                "group": GPUCheckpointProvisioner.context.group, "exempt_kernels": list(self.exempt_kernels),
                "exempt_kernelspecs": list(self.exempt_kernelspecs), "policy_interval": self.policy_interval,
                "store_root": self.store_root, "rebuild_skipped": self.rebuild_skipped,
                "host_memory_limit": self.host_memory_limit, "staging_reserve": self.staging_reserve,
                "staging_root": self.staging_root,
                "write_behind_bandwidth": self.write_behind_bandwidth, "suspend_on_stop": self.suspend_on_stop,
                "suspend_on_stop_timeout": self.suspend_on_stop_timeout,
                "store_problem": store_problem}
