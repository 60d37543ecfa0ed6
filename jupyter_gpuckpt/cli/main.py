"""``jupyter gpuckpt``: list, checkpoint, suspend and resume kernels; install the kernelspec; doctor.

Commands that act on kernels talk to a running Jupyter server through the REST API
(:mod:`.cli_client`); ``install-kernelspec`` and ``doctor`` also work without one.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from gpuckpt_store import CheckpointInfo, format_table, human_bytes

from ..placement import kernelspec
from . import doctor
from .client import CLIError, GPUCheckpointClient, find_server

POLL_SECONDS = 0.3
_SETTLED = {"checkpoint": ("running",), "suspend": ("suspended", "parked"), "resume": ("running",),
            "rebuild": ("running",)}
_DONE = {"checkpoint": "Checkpointed", "suspend": "Suspended", "resume": "Resumed", "rebuild": "Rebuilt"}
_SPINNER = "|/-\\"


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


def _client(args: argparse.Namespace) -> GPUCheckpointClient:
    return GPUCheckpointClient(find_server(args.url, args.token))


def _checkpoint_summary(checkpoint: dict[str, Any] | None, now: float | None = None) -> str:
    if not checkpoint:
        return "-"
    size = human_bytes(checkpoint.get("bytes_total", 0))
    if checkpoint.get("durability") == "staged":
        size += ", staged"
    when = checkpoint.get("time")
    return size if when is None else f"{human_duration((now or time.time()) - when)} ago, {size}"


def cmd_list(args: argparse.Namespace) -> int:
    kernels = _client(args).kernels()
    if args.json:
        print(json.dumps(kernels, indent=1))
        return 0
    if not kernels:
        print("No kernels.")
        return 0
    rows = [("KERNEL ID", "KERNELSPEC", "STATE", "NODE", "IDLE", "GPUS", "LAST CHECKPOINT")]
    for k in kernels:
        gpus = str(len(k.get("gpus") or [])) if k.get("placement") == "slurm" else (
            ",".join(str(g.get("index")) for g in k.get("gpus") or []) or "-")
        node = str(k.get("node") or "-") + (f" (job {k['job_id']})" if k.get("job_id") else "")
        rows.append((str(k["id"]), str(k.get("name") or k.get("kernelspec") or "-"), str(k.get("state")), node,
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


def cmd_checkpoints(args: argparse.Namespace) -> int:
    client = _client(args)
    items = client.checkpoints(client.resolve(args.kernel_id))
    if args.json:
        print(json.dumps(items, indent=1))
        return 0
    fields = set(CheckpointInfo.__dataclass_fields__)
    print(format_table([CheckpointInfo(**{k: v for k, v in item.items() if k in fields}) for item in items]))
    return 0


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


def cmd_operation(args: argparse.Namespace) -> int:
    action: str = args.command
    client = _client(args)
    kernel_id = client.resolve(args.kernel_id)
    mode = getattr(args, "mode", None)
    if args.no_wait:
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


def cmd_install_kernelspec(args: argparse.Namespace) -> int:
    try:
        slurm = (kernelspec.slurm_config(args.partition or "", args.gpus, args.constraint, args.time,
                                         args.sbatch_arg) if args.slurm else None)
        where = kernelspec.install(args.name, args.display_name, user=args.user,
                                   prefix=sys.prefix if args.sys_prefix else None,
                                   gpus=None if args.slurm else args.gpus, slurm=slurm)
    except OSError as e:
        hint = "" if args.user else "; try --user or --sys-prefix"
        raise CLIError(f"cannot install the kernelspec: {e.strerror or e} ({e.filename}){hint}") from None
    except ValueError as e:
        raise CLIError(f"cannot install the kernelspec: {e}") from None
    print(f"Installed kernelspec {args.name!r} in {where}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    return doctor.main(args.url, args.token)


def _floor(text: str) -> tuple[str, int]:
    group, _, gpus = text.rpartition("=")
    if not group or not gpus.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not GROUP=N")
    return group, int(gpus)


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a trace (or make one with ``--generate``); see README, Choosing a policy."""
    from .. import replay
    from ..replay import report

    if args.generate:
        trace = replay.generate(args.generate, seed=args.seed, days=args.days)
        if args.out:
            replay.write_trace(trace, args.out, args.tick_seconds)
            print(f"Wrote {len(trace.sessions)} sessions to {args.out}")
            if not args.trace:
                return 0
    if args.trace:
        try:
            trace = replay.read_trace(args.trace, args.tick_seconds)
        except (OSError, replay.TraceFormatError) as e:
            raise CLIError(str(e)) from None
    elif not args.generate:
        raise CLIError("give a TRACE file, or --generate N")
    if args.live:
        from ..replay.live import LiveReplayError, replay_live

        server = find_server(args.live, args.token)
        try:
            rows = replay_live(server.url, server.token or None, trace, args.speed, args.kernel)
        except LiveReplayError as e:
            raise CLIError(str(e)) from None
        print(f"{trace.name}: {len(trace.sessions)} sessions replayed at {args.speed:g}x against {server.url}\n")
        print(report.comparison(rows))
    else:
        costs = replay.CostModel(args.write_gbps * 1e9, args.read_gbps * 1e9, args.suspend_fixed,
                                 args.restore_fixed, args.start_fixed)
        gpus = args.gpus or replay.contended_gpus(trace)
        settings = replay.default_settings(trace, costs, args.floor)
        try:
            rows = [f.to_json() for f in replay.simulate_all(trace, settings, gpus, costs, args.jobs)]
        except ValueError as e:
            raise CLIError(str(e)) from None
        cells = sum(len(s.cells) for s in trace.sessions)
        print(f"{trace.name}: {len(trace.sessions)} sessions, {cells} cells, {trace.end / 86400:.1f} days, "
              f"{gpus} GPUs\n")
        print(report.table(rows))
        print("\n" + report.LEGEND)
    if args.json:
        report.write_json(rows, args.json)
    if args.plot:
        report.plot(rows, args.plot, f"{trace.name}: {len(trace.sessions)} sessions")
    return 0


def _add_replay(commands: Any) -> None:
    sub = commands.add_parser("replay", help="replay a trace of notebook sessions through the policy on a "
                                             "simulated clock and cluster, one row per policy setting")
    sub.add_argument("trace", nargs="?", metavar="TRACE", help="NotebookOS workload JSON (.json) or CSV (.csv)")
    sub.add_argument("--tick-seconds", type=float, default=60.0, help="seconds per NotebookOS tick (%(default)s)")
    sub.add_argument("--gpus", type=_gpu_count, help="GPUs in the cluster (default: 75%% of the most the "
                                                     "trace's sessions hold at once)")
    sub.add_argument("--floor", type=_floor, action="append", default=[], metavar="GROUP=N",
                     help="GPUs a group keeps under policy suspends; adds rows with floors (repeatable)")
    sub.add_argument("--json", metavar="FILE", help="write the rows as JSON, one object per setting")
    sub.add_argument("--plot", metavar="FILE", help="draw the trade-off as a PNG (needs matplotlib)")
    sub.add_argument("--jobs", type=int, default=2, help="settings replayed side by side (%(default)s)")
    costs = sub.add_argument_group("costs", "defaults: the README's measurements (replay/costs.py)")
    costs.add_argument("--write-gbps", type=float, default=0.4, help="suspend write GB/s (%(default)s)")
    costs.add_argument("--read-gbps", type=float, default=0.8, help="restore read GB/s (%(default)s)")
    costs.add_argument("--suspend-fixed", type=float, default=0.45, help="seconds per suspend (%(default)s)")
    costs.add_argument("--restore-fixed", type=float, default=1.64, help="seconds per restore (%(default)s)")
    costs.add_argument("--start-fixed", type=float, default=1.07, help="seconds to start a kernel (%(default)s)")
    made = sub.add_argument_group("synthetic traces", "replay/generator.py says what they model")
    made.add_argument("--generate", type=int, metavar="N", help="make a trace of N sessions (and replay it, "
                                                                "unless --out is given without TRACE)")
    made.add_argument("--out", metavar="FILE", help="write the generated trace (.csv or .json)")
    made.add_argument("--seed", type=int, default=0)
    made.add_argument("--days", type=int, default=7)
    live = sub.add_argument_group("live", "replay against a running server instead of the simulation")
    live.add_argument("--live", metavar="URL", help="the Jupyter server's URL")
    live.add_argument("--token", help="its token (default: $JUPYTER_TOKEN, else the running server's)")
    live.add_argument("--kernel", help="the kernelspec to replay with (default: the server's, if checkpointable)")
    live.add_argument("--speed", type=float, default=60.0, help="time compression (%(default)s)")
    sub.set_defaults(func=cmd_replay)


def _gpu_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GPUs")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter gpuckpt", description="Checkpoint, suspend and resume Jupyter kernels that hold GPUs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--url", help="the Jupyter server's URL (default: $JUPYTER_GPUCKPT_URL, else the "
                                      "running server, found like `jupyter server list` finds it)")
    server.add_argument("--token", help="its token (default: $JUPYTER_TOKEN, else the found server's)")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the server's JSON answer")

    commands.add_parser("list", parents=[server, as_json], help="the kernels, their state, GPUs and last "
                        "checkpoint").set_defaults(func=cmd_list)
    for action, help in (("checkpoint", "checkpoint a running kernel (it keeps running)"),
                         ("suspend", "free a kernel's GPUs: park it (CUDA driver) or checkpoint it and end "
                                     "its process"),
                         ("resume", "unpark a parked kernel, or start a suspended one again from its checkpoint"),
                         ("rebuild", "re-run the cells that rebuild what its last restore could not bring back")):
        sub = commands.add_parser(action, parents=[server], help=help)
        sub.add_argument("kernel_id", metavar="KERNEL_ID", help="a kernel id, or a unique prefix of one")
        sub.add_argument("--no-wait", action="store_true", help="return once the server has started it")
        if action == "suspend":
            sub.add_argument("--mode", choices=("park", "suspend"),
                             help="park (the process stays; falls back to suspend where the CUDA driver cannot) "
                                  "or suspend (the process ends); default: the server's release_mode")
        sub.set_defaults(func=cmd_operation)
    sub = commands.add_parser("checkpoints", parents=[server, as_json], help="a kernel's checkpoints")
    sub.add_argument("kernel_id", metavar="KERNEL_ID", help="a kernel id, or a unique prefix of one")
    sub.set_defaults(func=cmd_checkpoints)

    sub = commands.add_parser("install-kernelspec", help="install a kernelspec that uses the gpuckpt provisioner")
    sub.add_argument("--name", default="python3-gpuckpt", help="kernelspec name (default: %(default)s)")
    sub.add_argument("--display-name", default="Python 3 (GPU checkpoint)", help="name shown in JupyterLab")
    where = sub.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for this user (<jupyter data dir>/kernels)")
    where.add_argument("--sys-prefix", action="store_true", help=f"install into this environment ({sys.prefix})")
    sub.add_argument("--gpus", type=_gpu_count, help="GPUs each kernel gets (default: the provisioner's)")
    slurm = sub.add_argument_group("Slurm", "kernels as Slurm jobs (README: Kernels as Slurm jobs)")
    slurm.add_argument("--slurm", action="store_true", help="run each kernel as a Slurm job")
    slurm.add_argument("--partition", help="the partition kernel jobs run in (required with --slurm)")
    slurm.add_argument("--constraint", help="node features kernel jobs need (sbatch --constraint)")
    slurm.add_argument("--time", help="time limit of each kernel job (sbatch --time)")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="another sbatch argument, e.g. --sbatch-arg=--account=ml (repeatable)")
    sub.set_defaults(func=cmd_install_kernelspec)

    sub = commands.add_parser("doctor", parents=[server], help="check NVML, GPUs, the store, the key, "
                              "kernelspecs and the server extension")
    sub.set_defaults(func=cmd_doctor)
    _add_replay(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jupyter-gpuckpt`` (``jupyter gpuckpt``): the process's exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CLIError as e:
        print(f"jupyter gpuckpt {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; an operation already sent goes on in the server", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
