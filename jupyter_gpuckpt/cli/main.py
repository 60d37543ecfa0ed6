"""``jupyter gpuckpt``: list, checkpoint, suspend and resume kernels; install the kernelspec; doctor; replay.

A :class:`~jupyter_core.application.JupyterApp` with a subcommand app each, as ``jupyter
kernelspec`` has. Every option is a configurable trait: ``--url`` is ``--ServerCommand.url``, and
``jupyter_gpuckpt_config.py`` in a Jupyter config dir, or ``--config=FILE``, can set it too.
Commands that act on kernels talk to a running Jupyter server through the REST API
(:mod:`.client`); ``install-kernelspec``, ``doctor`` and ``replay`` also work without one.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Generator, Sequence
from typing import Any, ClassVar, NoReturn

from jupyter_core.application import JupyterApp, base_aliases, base_flags
from traitlets import Bool, CaselessStrEnum, Dict, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.config import Configurable
from traitlets.config.loader import ArgumentError, KVArgParseConfigLoader

from gpuckpt_store import CheckpointInfo, format_table, human_bytes

from ..placement import kernelspec
from . import doctor
from .client import CLIError, GPUCheckpointClient, find_server

POLL_SECONDS = 0.3
_SETTLED = {"checkpoint": ("running",), "suspend": ("suspended", "parked"), "resume": ("running",),
            "rebuild": ("running",)}
_DONE = {"checkpoint": "Checkpointed", "suspend": "Suspended", "resume": "Resumed", "rebuild": "Rebuilt"}
_SPINNER = "|/-\\"
_ALIASES = {key: base_aliases[key] for key in ("config", "log-level")}
_FLAGS = {key: base_flags[key] for key in ("debug", "show-config", "show-config-json")}
_JSON_HELP = "Print the server's JSON answer."


def human_duration(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h``, ``2d``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _checkpoint_summary(checkpoint: dict[str, Any] | None, now: float | None = None) -> str:
    if not checkpoint:
        return "-"
    size = human_bytes(checkpoint.get("bytes_total", 0))
    if checkpoint.get("durability") == "staged":
        size += ", staged"
    when = checkpoint.get("time")
    return size if when is None else f"{human_duration((now or time.time()) - when)} ago, {size}"


def _progress_line(action: str, kernel_id: str, model: dict[str, Any] | None, elapsed: float, tick: int) -> str:
    state = str(model.get("state")) if model else "starting"
    progress = model.get("progress") if model else None
    if isinstance(progress, int | float):
        fraction = max(0.0, min(1.0, progress / 100 if progress > 1 else progress))
        indicator = f"[{'#' * int(fraction * 20):<20}] {fraction:4.0%}"
    else:
        indicator = _SPINNER[tick % len(_SPINNER)]
    return f"{action} {kernel_id[:8]}  {state:<13} {indicator}  {elapsed:5.1f}s"


def _act_with_progress(client: GPUCheckpointClient, kernel_id: str, action: str,
                       mode: str | None = None) -> dict[str, Any]:
    """Wait for the operation (``?wait=1``) in a thread while showing the kernel's state on stderr.

    Polling after a ``202`` alone cannot tell when a checkpoint ends (the kernel stays
    ``running`` throughout) and loses refusals made before the work starts (a ``409``
    such as "not started with a gpuckpt kernelspec"); the waiting request has both.
    """
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["model"] = client.act(kernel_id, action, mode=mode)
        except Exception as e:  # handed to the main thread, which reports it
            outcome["error"] = e

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    started, tick, model = time.monotonic(), 0, None
    try:
        while worker.is_alive():
            try:
                model = client.kernel(kernel_id)
            except CLIError:
                pass  # keep showing the last state; the operation's own answer decides
            line = _progress_line(action, kernel_id, model, time.monotonic() - started, tick)
            sys.stderr.write(f"\r{line}\x1b[K")
            sys.stderr.flush()
            worker.join(POLL_SECONDS)
            tick += 1
    finally:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
    if "error" in outcome:
        raise outcome["error"]
    return dict(outcome["model"])


def _result_lines(action: str, kernel_id: str, model: dict[str, Any], seconds: float) -> list[str]:
    if model.get("outcome", "done") != "done":  # nothing to do: say what was found
        return [f"Kernel {kernel_id} is {model['outcome']}; nothing to {action}."]
    if action == "rebuild":
        return [f"{kernel_id}: {(model.get('rebuilt') or {}).get('text') or 'nothing to rebuild'}"]
    checkpoint = model.get("last_checkpoint") or {}
    size = human_bytes(checkpoint.get("bytes_total", 0))
    if action == "checkpoint":
        new = human_bytes(checkpoint.get("bytes_written", 0))
        count = checkpoint.get("variables")
        what = f"checkpoint {checkpoint.get('id')} ({size}, {new} new, {count} variable{'' if count == 1 else 's'})"
    elif action == "suspend" and model.get("state") == "parked":
        what = (f"parked: its GPUs are free, its GPU memory is in host memory and its process lives on "
                f"(checkpoint {checkpoint.get('id')}, {size}, in case the node goes)")
    elif action == "suspend":
        what = f"checkpoint {checkpoint.get('id')} ({size}); its GPUs are free"
        if checkpoint.get("durability") == "staged":
            what += "; the checkpoint is in host memory and is being written to the store"
    else:
        what = f"restored from checkpoint {checkpoint.get('id')}"
    lines = [f"{_DONE[action]} {kernel_id} in {seconds:.1f} s: {what}."]
    if action == "resume":
        report = model.get("report") or {}
        lines.append(str(report.get("text") or ""))
        if report.get("cells_to_rerun") and model.get("rebuild_skipped") == "ask":
            lines.append(f"`jupyter gpuckpt rebuild {kernel_id[:8]}` re-runs them.")
    else:
        lines += [f"  not saved: {s.get('name')} ({s.get('type')}): {s.get('reason')}"
                  for s in checkpoint.get("skipped") or []]
    if model.get("notice") and action == "suspend":
        lines.append(str(model["notice"]))
    return [line for line in lines if line]


class OptionEnum(CaselessStrEnum[str | None]):
    """A command-line option with fixed choices (any case): a wrong value is a usage error that
    names the option and its choices, not traitlets' sentence about a trait of an instance."""

    def error(self, obj: Any, value: Any, error: Exception | None = None, info: str | None = None) -> NoReturn:
        choices = ", ".join(str(v) for v in self.values or ())
        raise TraitError(f"--{str(self.name).replace('_', '-')}: {value!r} is not one of {choices}")


class _StrictLoader(KVArgParseConfigLoader):
    """traitlets' command-line loader, refusing an option that is none of the app's aliases or flags
    and not ``--Class.trait`` (where traitlets would warn that it has no effect and go on)."""

    def _parse_args(self, args: Any) -> Any:
        for arg in args:
            if arg == "--":
                break
            option = arg.split("=", 1)[0]
            name = option.lstrip("-")
            if (arg.startswith("-") and name[:1].isalpha() and "." not in name
                    and name not in self.aliases and name not in self.flags):
                raise ArgumentError(f"unrecognized option {option}")
        return super()._parse_args(args)


class _App(JupyterApp):
    """What ``jupyter gpuckpt`` and its subcommands share: their config file, positional arguments,
    and argument errors as one line on stderr and exit code 2."""

    arguments: ClassVar[tuple[str, ...]] = ()
    """The positional arguments, in order; an optional one is written ``[NAME]``."""

    @default("config_file_name")
    def _default_config_file_name(self) -> str:
        return "jupyter_gpuckpt_config"

    @validate("config_file")
    def _config_file_exists(self, proposal: Any) -> str:
        path = str(proposal["value"])
        if path and not os.path.isfile(path):
            raise TraitError(f"--config: {path} is not a file")
        return path

    def _create_loader(self, argv: list[str] | None, aliases: dict[str, Any], flags: dict[str, Any],
                       classes: list[type[Configurable]] | None) -> KVArgParseConfigLoader:
        return _StrictLoader(argv, aliases, flags, log=self.log, classes=classes, subcommands=self.subcommands,
                             exit_on_error=False)

    def parse_command_line(self, argv: list[str] | None = None) -> None:
        """Options into config, positional arguments into ``extra_args``; a subcommand parses the rest."""
        try:  # without the catch_config_error around it, which would log the error and exit 1
            inspect.unwrap(JupyterApp.parse_command_line)(self, argv)
        except (ArgumentError, argparse.ArgumentError, TraitError) as e:
            self.usage_error(str(e))
        required = [name for name in self.arguments if not name.startswith("[")]
        if len(self.extra_args) < len(required):
            self.usage_error(f"the following arguments are required: {', '.join(required[len(self.extra_args):])}")
        if len(self.extra_args) > len(self.arguments):
            self.usage_error(f"unrecognized arguments: {' '.join(self.extra_args[len(self.arguments):])}")

    def emit_description(self) -> Generator[str, None, None]:
        yield f"Usage: {' '.join((self.name, *self.arguments, '[options]'))}"
        yield ""
        yield from super().emit_description()

    def usage_error(self, message: str) -> NoReturn:
        """Exit 2 with ``message`` on stderr, as an argument error."""
        print(f"{self.name}: {message} (see `{self.name} --help`)", file=sys.stderr)
        sys.exit(2)


class Command(_App):
    """A subcommand; :meth:`run` is the command itself."""

    aliases = _ALIASES
    flags = _FLAGS

    def start(self) -> None:
        """Run the command and exit with its code: 1 with one line on stderr for a
        :class:`CLIError`, 130 on ^C."""
        try:
            code = self.run()
        except CLIError as e:
            print(f"{self.name}: {e}", file=sys.stderr)
            code = 1
        except KeyboardInterrupt:
            print("\ninterrupted; an operation already sent goes on in the server", file=sys.stderr)
            code = 130
        self.exit(code)

    def run(self) -> int:
        """The command; its exit code."""
        raise NotImplementedError


class ServerCommand(Command):
    """A command that talks to a running Jupyter server."""

    url = Unicode(None, allow_none=True, config=True,
                  help="The Jupyter server's URL. Default: $JUPYTER_GPUCKPT_URL, else the running server, found "
                       "as `jupyter server list` finds it.")
    token = Unicode(None, allow_none=True, config=True,
                    help="Its token. Default: the found server's own (from its info file; $JUPYTER_TOKEN may "
                         "be another server's), else $JUPYTER_TOKEN; with --url or $JUPYTER_GPUCKPT_URL, "
                         "$JUPYTER_TOKEN first.")
    aliases = {**_ALIASES, "url": "ServerCommand.url", "token": "ServerCommand.token"}

    def client(self) -> GPUCheckpointClient:
        return GPUCheckpointClient(find_server(self.url, self.token))


class ListKernels(ServerCommand):
    name = "jupyter gpuckpt list"
    description = "The kernels, the notebooks that use them, their state, GPUs and last checkpoint."

    json_output = Bool(False, config=True, help=_JSON_HELP)
    flags = {**_FLAGS, "json": ({"ListKernels": {"json_output": True}}, _JSON_HELP)}

    def run(self) -> int:
        client = self.client()
        kernels = client.kernels()
        if self.json_output:
            print(json.dumps(kernels, indent=1))
            return 0
        if not kernels:
            print("No kernels.")
            return 0
        notebooks = client.notebooks()
        rows = [("KERNEL ID", "NOTEBOOK", "KERNELSPEC", "STATE", "NODE", "IDLE", "GPUS", "LAST CHECKPOINT")]
        for k in kernels:
            gpus = str(len(k.get("gpus") or [])) if k.get("placement") == "slurm" else (
                ",".join(str(g.get("index")) for g in k.get("gpus") or []) or "-")
            node = str(k.get("node") or "-") + (f" (job {k['job_id']})" if k.get("job_id") else "")
            name = str(k.get("name") or k.get("kernelspec") or "-")
            rows.append((str(k["id"]), notebooks.get(str(k["id"]), "-"), name, str(k.get("state")), node,
                         human_duration(k.get("idle_seconds")), "waiting" if k.get("waiting_for_gpus") else gpus,
                         _checkpoint_summary(k.get("last_checkpoint"))))
        print(_table(rows))
        for k in kernels:
            if k.get("waiting_for_gpus"):
                print(f"{k['id']}: {k['waiting_for_gpus']}")
            if k.get("notice"):
                print(f"{k['id']}: {k['notice']}")
            if (k.get("policy") or {}).get("reason"):
                print(f"{k['id']}: policy: {k['policy']['reason']}")
            if k.get("last_error"):
                print(f"{k['id']}: last error: {k['last_error']}")
            writing = k.get("write_behind") or {}
            if writing.get("error"):
                print(f"{k['id']}: writing the staged checkpoint to the store failed ({writing['error']}); "
                      f"retrying (attempt {writing.get('attempts')})")
            elif writing.get("bytes_total"):
                print(f"{k['id']}: writing the staged checkpoint to the store: "
                      f"{human_bytes(writing['bytes_done'])} of {human_bytes(writing['bytes_total'])}")
        return 0


class KernelCommand(ServerCommand):
    """A command on one kernel: ``KERNEL_ID`` is a kernel id, or a unique prefix of one."""

    arguments = ("KERNEL_ID",)
    action: ClassVar[str]

    no_wait = Bool(False, config=True, help="Return once the server has started it.")
    flags = {**_FLAGS, "no-wait": ({"KernelCommand": {"no_wait": True}}, "Return once the server has started it.")}

    def release_mode(self) -> str | None:
        """``--mode``, which only ``suspend`` has."""
        return None

    def run(self) -> int:
        action = self.action
        client = self.client()
        kernel_id = client.resolve(self.extra_args[0])
        mode = self.release_mode()
        if self.no_wait:
            model = client.act(kernel_id, action, wait=False, mode=mode)
            print(f"{action} of {kernel_id} started (state: {model.get('state')}); see `jupyter gpuckpt list`.")
            return 0
        started = time.monotonic()
        if sys.stderr.isatty():
            model = _act_with_progress(client, kernel_id, action, mode)
        else:
            model = client.act(kernel_id, action, mode=mode)
        if model.get("state") not in _SETTLED[action] or model.get("last_error"):
            reason = f": {model['last_error']}" if model.get("last_error") else ""
            raise CLIError(f"{action} of {kernel_id} did not finish; the kernel is {model.get('state')}{reason}")
        print("\n".join(_result_lines(action, kernel_id, model, time.monotonic() - started)))
        return 0


class CheckpointKernel(KernelCommand):
    name = "jupyter gpuckpt checkpoint"
    description = "Checkpoint a running kernel (it keeps running)."
    examples = "jupyter gpuckpt checkpoint 13f94400    # a kernel id, or a unique prefix of one"
    action = "checkpoint"


class SuspendKernel(KernelCommand):
    name = "jupyter gpuckpt suspend"
    description = "Free a kernel's GPUs: park it (CUDA driver) or checkpoint it and end its process."
    examples = "jupyter gpuckpt suspend 13f94400 --mode park"
    action = "suspend"

    mode = OptionEnum(["park", "suspend"], None, allow_none=True, config=True,
                      help="park (the process stays; falls back to suspend where the CUDA driver cannot) or "
                           "suspend (the process ends). Default: the server's release_mode.")
    aliases = {**ServerCommand.aliases, "mode": "SuspendKernel.mode"}

    def release_mode(self) -> str | None:
        return self.mode


class ResumeKernel(KernelCommand):
    name = "jupyter gpuckpt resume"
    description = "Unpark a parked kernel, or start a suspended one again from its checkpoint."
    examples = "jupyter gpuckpt resume 13f94400"
    action = "resume"


class RebuildKernel(KernelCommand):
    name = "jupyter gpuckpt rebuild"
    description = "Re-run the cells that rebuild what its last restore could not bring back."
    examples = "jupyter gpuckpt rebuild 13f94400"
    action = "rebuild"


class ListCheckpoints(ServerCommand):
    name = "jupyter gpuckpt checkpoints"
    description = "A kernel's checkpoints: id, time, size, variables; first, the kernel and its notebook."
    examples = "jupyter gpuckpt checkpoints 13f94400    # a kernel id, or a unique prefix of one"
    arguments = ("KERNEL_ID",)

    json_output = Bool(False, config=True, help=_JSON_HELP)
    flags = {**_FLAGS, "json": ({"ListCheckpoints": {"json_output": True}}, _JSON_HELP)}

    def run(self) -> int:
        client = self.client()
        kernel_id = client.resolve(self.extra_args[0])
        items = client.checkpoints(kernel_id)
        if self.json_output:
            print(json.dumps(items, indent=1))
            return 0
        notebook = client.notebooks().get(kernel_id)
        print(f"Kernel {kernel_id}, {f'notebook {notebook}' if notebook else 'no notebook'}")
        fields = set(CheckpointInfo.__dataclass_fields__)
        print(format_table([CheckpointInfo(**{k: v for k, v in item.items() if k in fields}) for item in items]))
        return 0


class InstallKernelSpec(Command):
    name = "jupyter gpuckpt install-kernelspec"
    description = "Install a kernelspec that uses the gpuckpt provisioner."
    examples = """
jupyter gpuckpt install-kernelspec --user --gpus 1
jupyter gpuckpt install-kernelspec --sys-prefix --slurm --partition gpu --gpus 1 --sbatch-arg=--account=ml
"""

    kernel_name = Unicode("python3-gpuckpt", config=True, help="Kernelspec name.")
    display_name = Unicode("Python 3 (GPU checkpoint)", config=True, help="Name shown in JupyterLab.")
    user = Bool(False, config=True, help="Install for this user (<jupyter data dir>/kernels).")
    sys_prefix = Bool(False, config=True, help=f"Install into this environment ({sys.prefix}).")
    gpus = Int(None, allow_none=True, min=0, config=True, help="GPUs each kernel gets. Default: the provisioner's.")
    slurm = Bool(False, config=True, help="Run each kernel as a Slurm job (README: Kernels as Slurm jobs).")
    partition = Unicode(None, allow_none=True, config=True,
                        help="The partition kernel jobs run in (required with --slurm).")
    constraint = Unicode(None, allow_none=True, config=True,
                         help="Node features kernel jobs need (sbatch --constraint).")
    time_limit = Unicode(None, allow_none=True, config=True, help="Time limit of each kernel job (sbatch --time).")
    sbatch_args = List(Unicode(), config=True,
                       help="Another sbatch argument, e.g. --sbatch-arg=--account=ml (repeatable).")

    aliases = {**_ALIASES, "name": "InstallKernelSpec.kernel_name", "display-name": "InstallKernelSpec.display_name",
               "gpus": "InstallKernelSpec.gpus", "partition": "InstallKernelSpec.partition",
               "constraint": "InstallKernelSpec.constraint", "time": "InstallKernelSpec.time_limit",
               "sbatch-arg": "InstallKernelSpec.sbatch_args"}
    flags = {**_FLAGS,
             "user": ({"InstallKernelSpec": {"user": True}}, user.help),
             "sys-prefix": ({"InstallKernelSpec": {"sys_prefix": True}}, sys_prefix.help),
             "slurm": ({"InstallKernelSpec": {"slurm": True}}, slurm.help)}

    def run(self) -> int:
        if self.user and self.sys_prefix:
            self.usage_error("argument --sys-prefix: not allowed with argument --user")
        try:
            slurm = (kernelspec.slurm_config(self.partition or "", self.gpus, self.constraint, self.time_limit,
                                             list(self.sbatch_args)) if self.slurm else None)
            where = kernelspec.install(self.kernel_name, self.display_name, user=self.user,
                                       prefix=sys.prefix if self.sys_prefix else None,
                                       gpus=None if self.slurm else self.gpus, slurm=slurm)
        except OSError as e:
            hint = "" if self.user else "; try --user or --sys-prefix"
            raise CLIError(f"cannot install the kernelspec: {e.strerror or e} ({e.filename}){hint}") from None
        except ValueError as e:
            raise CLIError(f"cannot install the kernelspec: {e}") from None
        print(f"Installed kernelspec {self.kernel_name!r} in {where}")
        return 0


class Doctor(ServerCommand):
    name = "jupyter gpuckpt doctor"
    description = ("Check NVML, GPUs, the store, the key, kernelspecs and the server extension, under the Jupyter "
                   "config the server reads (or --config=FILE instead of jupyter_server_config).")

    @default("config_file_name")
    def _default_config_file_name(self) -> str:
        return "jupyter_server_config"

    def run(self) -> int:
        return doctor.main(self.config, self.config_file_paths, self.url, self.token)


class Replay(Command):
    """A server config given (``--config=jupyter_server_config.py``, ``--GPUCheckpointApp.name=value``) adds
    the row of the policy that server would run (:meth:`configured_policy`)."""

    name = "jupyter gpuckpt replay"
    description = ("Replay a trace of notebook sessions through the policy on a simulated clock and cluster, one "
                   "row per policy setting. TRACE: a NotebookOS workload template (.json, in NotebookOS's units: "
                   "ticks of --tick-seconds; memory (mem_usage_mb, memory) in MB; VRAM (vram_usage_gb, vram) "
                   "in GB; GPUs from num_gpus, gpus or gpu_utilizations) or a CSV (.csv: times in seconds, "
                   "vram_gb and memory_gb in GB).")
    examples = """
jupyter gpuckpt replay --generate 2000                        # a seeded synthetic week, replayed
jupyter gpuckpt replay --generate 2000 --out week.csv         # ... or written (.csv or .json)
jupyter gpuckpt replay week.csv --gpus 300 --floor vision=8 --json rows.json --plot tradeoff.png
jupyter gpuckpt replay week.csv --config /etc/jupyter/jupyter_server_config.py   # + the row your server runs
jupyter gpuckpt replay week.csv --GPUCheckpointApp.idle_timeout=2700 --GPUCheckpointApp.rhythm=True
jupyter gpuckpt replay workload.json --live http://localhost:8888/ --speed 60
"""
    arguments = ("[TRACE]",)

    tick_seconds = Float(60.0, config=True, help="Seconds per NotebookOS tick (a template's times are in ticks).")
    gpus = Int(None, allow_none=True, min=0, config=True,
               help="GPUs in the cluster. Default: 75% of the most the trace's sessions hold at once.")
    floor = Dict(key_trait=Unicode(), value_trait=Int(min=0), config=True,
                 help="GPUs a group keeps under policy suspends, GROUP=N; adds rows with floors (repeatable).")
    json_file = Unicode(None, allow_none=True, config=True, help="Write the rows as JSON, one object per setting.")
    plot_file = Unicode(None, allow_none=True, config=True, help="Draw the trade-off as a PNG (needs matplotlib).")
    jobs = Int(2, config=True, help="Settings replayed side by side.")
    write_gbps = Float(0.4, config=True, help="Suspend write GB/s (the README's measurements: replay/costs.py).")
    read_gbps = Float(0.8, config=True, help="Restore read GB/s.")
    suspend_fixed = Float(0.45, config=True, help="Seconds per suspend.")
    restore_fixed = Float(1.64, config=True, help="Seconds per restore.")
    start_fixed = Float(1.07, config=True, help="Seconds to start a kernel.")
    generate = Int(None, allow_none=True, config=True,
                   help="Make a synthetic trace of N sessions (replay/generator.py says what they model), and "
                        "replay it unless --out is given without TRACE.")
    out = Unicode(None, allow_none=True, config=True, help="Write the generated trace (.csv or .json).")
    seed = Int(0, config=True, help="The generator's seed.")
    days = Int(7, config=True, help="Days the generated trace spans.")
    live = Unicode(None, allow_none=True, config=True,
                   help="Replay against the running Jupyter server at this URL instead of the simulation.")
    token = Unicode(None, allow_none=True, config=True,
                    help="Its token. Default: $JUPYTER_TOKEN, else the running server's.")
    kernel = Unicode(None, allow_none=True, config=True,
                     help="The kernelspec to replay with (--live). Default: the server's, if checkpointable.")
    speed = Float(60.0, config=True, help="Time compression (--live).")

    aliases = {**_ALIASES, **{option: f"Replay.{trait}" for option, trait in (
        ("tick-seconds", "tick_seconds"), ("gpus", "gpus"), ("floor", "floor"), ("json", "json_file"),
        ("plot", "plot_file"), ("jobs", "jobs"), ("write-gbps", "write_gbps"), ("read-gbps", "read_gbps"),
        ("suspend-fixed", "suspend_fixed"), ("restore-fixed", "restore_fixed"), ("start-fixed", "start_fixed"),
        ("generate", "generate"), ("out", "out"), ("seed", "seed"), ("days", "days"), ("live", "live"),
        ("token", "token"), ("kernel", "kernel"), ("speed", "speed"))}}

    def run(self) -> int:
        from .. import replay
        from ..replay import report

        path = self.extra_args[0] if self.extra_args else None
        if self.generate:
            trace = replay.generate(self.generate, seed=self.seed, days=self.days)
            if self.out:
                replay.write_trace(trace, self.out, self.tick_seconds)
                print(f"Wrote {len(trace.sessions)} sessions to {self.out}")
                if not path:
                    return 0
        if path:
            try:
                trace = replay.read_trace(path, self.tick_seconds)
            except (OSError, replay.TraceFormatError) as e:
                raise CLIError(str(e)) from None
        elif not self.generate:
            raise CLIError("give a TRACE file, or --generate N")
        if self.live:
            from ..replay.live import LiveReplayError, replay_live

            server = find_server(self.live, self.token)
            try:
                rows = replay_live(server.url, server.token or None, trace, self.speed, self.kernel)
            except LiveReplayError as e:
                raise CLIError(str(e)) from None
            print(f"{trace.name}: {len(trace.sessions)} sessions replayed at {self.speed:g}x against {server.url}\n")
            print(report.comparison(rows))
        else:
            costs = replay.CostModel(self.write_gbps * 1e9, self.read_gbps * 1e9, self.suspend_fixed,
                                     self.restore_fixed, self.start_fixed)
            gpus = self.gpus or replay.contended_gpus(trace)
            settings = replay.default_settings(trace, costs, list(self.floor.items()))
            configured = self.configured_setting()
            if configured is not None:
                settings.insert(len(settings) - 1, configured)  # before the oracle, the last row
            try:
                rows = [f.to_json() for f in replay.simulate_all(trace, settings, gpus, costs, self.jobs)]
            except ValueError as e:
                raise CLIError(str(e)) from None
            cells = sum(len(s.cells) for s in trace.sessions)
            print(f"{trace.name}: {len(trace.sessions)} sessions, {cells} cells, {trace.end / 86400:.1f} days, "
                  f"{gpus} GPUs\n")
            print(report.table(rows))
            print("\n" + report.LEGEND)
        if self.json_file:
            report.write_json(rows, self.json_file)
        if self.plot_file:
            report.plot(rows, self.plot_file, f"{trace.name}: {len(trace.sessions)} sessions")
        return 0


    def configured_setting(self) -> Any:
        """The policy the server whose config was given runs (its ``GPUCheckpointApp`` section,
        from ``--config`` or ``--GPUCheckpointApp.name=value``), as a replay row; None without one."""
        if "GPUCheckpointApp" not in self.config:
            return None
        from .. import replay
        from ..extension.app import GPUCheckpointApp

        try:
            app = GPUCheckpointApp(config=self.config)
        except TraitError as e:
            raise CLIError(f"the server config's GPUCheckpointApp settings: {e}") from None
        return replay.configured_setting(app.base_policy(), list(app.group_floors.items()), app.policy_interval)


class GPUCheckpointCLI(_App):
    """``jupyter gpuckpt``: starts the subcommand named first."""

    name = "jupyter gpuckpt"
    description = "Checkpoint, suspend and resume Jupyter kernels that hold GPUs."
    arguments = ("[COMMAND]",)
    aliases = _ALIASES
    flags = _FLAGS
    subcommands = {
        "list": (ListKernels, ListKernels.description),
        "checkpoint": (CheckpointKernel, CheckpointKernel.description),
        "suspend": (SuspendKernel, SuspendKernel.description),
        "resume": (ResumeKernel, ResumeKernel.description),
        "rebuild": (RebuildKernel, RebuildKernel.description),
        "checkpoints": (ListCheckpoints, ListCheckpoints.description),
        "install-kernelspec": (InstallKernelSpec, InstallKernelSpec.description),
        "doctor": (Doctor, Doctor.description),
        "replay": (Replay, Replay.description),
    }

    def start(self) -> None:
        """Start the subcommand; without one, print the list of them and exit 1 (as ``jupyter kernelspec``)."""
        if self.subapp is not None:
            self.subapp.start()
        elif self.extra_args:
            self.usage_error(f"unknown command {self.extra_args[0]!r}; one of: {', '.join(self.subcommands)}")
        else:
            print(f"{self.name}: no command given", file=sys.stderr)
            self.print_subcommands()
            self.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``jupyter-gpuckpt`` (``jupyter gpuckpt``): run the command; it exits with its code."""
    app = GPUCheckpointCLI()
    app.initialize(None if argv is None else list(argv))
    app.start()


if __name__ == "__main__":
    main()
