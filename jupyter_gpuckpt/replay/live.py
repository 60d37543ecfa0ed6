"""``jupyter gpuckpt replay TRACE --live URL``: a short trace replayed against a running server
with real kernels, time-compressed, and what it measured set beside what the simulator says.

Time: a trace second lasts ``1 / speed`` real seconds. The server's policy runs on the real
clock, so the comparison is made in real seconds: :func:`simulate` replays the compressed trace
(every time divided by ``speed``) under the policy the server applies to the kernelspec
(``GET /api/gpuckpt/policy``, the kernelspec's overrides, its ``policy_interval``), with a cost
model calibrated from this run's own suspends and restores (their median durations, as fixed
costs). So the comparison tests the policy and the accounting, not this machine's disk. Both
rows are then given in trace units (hours and seconds times ``speed``), like the offline rows:
a restore of 2 real seconds at speed 60 is a 120 s wait in both.

What runs: each session's kernel starts at the session's compressed start; the session's clock
starts once its websocket is open and a warm-up cell has imported numpy (start-up, and a wait
for a GPU then, is not replayed). Each cell goes on the websocket at its compressed time,
shifted by the waits before it (as the simulator does) and never before the previous cell
ended; it replaces the kernel's ``state`` with an array of the cell's GPU plus host memory times
``state_scale``, at most ``state_cap`` bytes (a CUDA tensor where torch sees a GPU, else numpy),
then sleeps its compressed duration. The kernel is shut down at the session's compressed stop,
shifted likewise.

What is measured, on this client's clock, with the simulator's definitions: a cell's wait runs
from its submit to the kernel's ``busy`` status for it, and it waited (on a restore) if a resume
of its kernel started in between. Suspends, releases and resumes come from the server's event
stream (to the millisecond, not polled). A kernel holds its session's GPUs (the trace's count:
on a server without GPUs a kernel stands for them, kernel-hours for GPU-hours, and the server's
``cpu_idle_timeout`` is the simulated limit) from its session's start to its stop, except from a
suspend's ``released`` to the next resume's ``started`` (returned); busy is its cells' runs,
idle the user's pauses (from the session's start or a cell's end to the next submit or the stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from ..placement.kernelspec import PROVISIONER_NAME
from ..policy.decisions import POLICY_FIELDS, Policy, quantile
from ..policy.overrides import overridden
from ..rest_client import RestClient, RestError
from .costs import CostModel
from .simulator import Setting, simulate
from .trace import Session, Trace

HOUR = 3600.0
TOLERANCES: dict[str, tuple[float, float]] = {
    "gpu_hours_reserved": (2.0, 0.15), "gpu_hours_busy": (2.0, 0.15), "gpu_hours_idle": (2.0, 0.15),
    "gpu_hours_idle_returned": (2.0, 0.15), "resume_wait_median_s": (0.5, 0.0), "resume_wait_p95_s": (1.0, 0.0),
    "cells_total": (0, 0), "cells_waited": (0, 0), "sessions_lost": (0, 0), "suspends": (0, 0),
    "suspends_without_demand": (0, 0),
}
"""Measured minus simulated may be at most ``max(absolute, relative * |simulated|)``; absolute in
counts, real GPU-seconds for the hours, real seconds for the waits. The server acts later than
the simulator's exact deadlines (a pass every ``policy_interval``, each waiting for its suspends),
so it returns a few % less; a measured wait also holds the cell's trip through the websocket,
which a resume's ``seconds`` leave out. The simulator's restore is one fixed cost (the median),
so its p95 is its median: the p95's absolute tolerance adds the measured restores' own spread
(their p95 minus their median)."""

WARM_UP = """import importlib.util, os, time
import numpy
_cuda = os.path.exists("/dev/nvidiactl") and importlib.util.find_spec("torch") is not None
if _cuda:
    import torch
    _cuda = torch.cuda.is_available()"""
"""Run before a session's clock starts, so no cell pays for the imports (torch's takes seconds)."""
CELL_TIMEOUT = 60.0
"""Real seconds a cell may take beyond its own duration before it counts as lost (failed)."""
CELL = """state = None
state = torch.ones({size}, dtype=torch.uint8, device="cuda") if _cuda else numpy.ones({size}, dtype=numpy.uint8)
time.sleep({seconds})"""
"""A trace cell: it drops the last cell's array before making its own (a kernel's state is the
latest cell's; the trace's ``state_bytes`` is the largest), then runs for its duration."""


class LiveReplayError(Exception):
    """The live replay cannot run against this server (no checkpointable kernelspec, a kernel failed to start)."""


@dataclass
class CellRun:
    submitted: float
    started: float
    ended: float
    failed: bool = False

    @property
    def wait(self) -> float:
        return self.started - self.submitted


@dataclass
class SessionRun:
    session: Session
    kernel_id: str = ""
    live_gpus: int = 0
    """GPUs the server gave the kernel (its policy uses ``cpu_idle_timeout`` for none)."""
    ready: float = 0.0
    stopped: float = 0.0
    cells: list[CellRun] = field(default_factory=list)


KINDS = ("policy", "suspend", "resume")
"""The server's events the replay follows (``event_schemas/``)."""


@dataclass
class Events:
    """The server's events of :data:`KINDS`, each with when this client received it."""

    seen: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)

    def of(self, kind: str, kernel_id: str, **match: str) -> list[tuple[float, dict[str, Any]]]:
        """The events of ``kind`` about ``kernel_id`` with the ``match``ed fields, and when each came."""
        return [(t, e) for t, k, e in self.seen if k == kind and e["kernel_id"] == kernel_id
                and all(e.get(key) == value for key, value in match.items())]

    def times(self, kind: str, kernel_id: str, **match: str) -> list[float]:
        return [t for t, _ in self.of(kind, kernel_id, **match)]


class _Client(RestClient):
    """REST and websocket calls to one server, with its token."""

    async def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return await self.json(method, path, body=body if method == "POST" else None, timeout=120)
        except RestError as e:  # the server's reason, in one line for the CLI
            raise LiveReplayError(f"{method} {self.base_url}{path}: {e}") from e

    async def websocket(self, path: str) -> WebSocketClientConnection:
        parts = urlsplit(self.base_url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return await websocket_connect(HTTPRequest(f"{scheme}://{parts.netloc}{parts.path}{path}",
                                                   headers=self.headers, request_timeout=120))


def replay_live(url: str, token: str | None, trace: Trace, speed: float, kernel_name: str | None = None,
                state_scale: float = 1e-3, state_cap: int = 4 << 20) -> list[dict[str, Any]]:
    """Replay ``trace`` at ``speed`` against the server at ``url``; the rows (their ``source``,
    and ``policy`` "live SOURCE" for ``replay``'s table) ``measured``, ``simulated``,
    ``difference`` (measured minus simulated), ``tolerance`` (see :data:`TOLERANCES`) and
    ``within`` (whether each difference is within its tolerance), each with the keys of
    :data:`TOLERANCES`; ``measured`` and ``simulated`` also with the shares of idle time returned
    and of cells that waited.

    Parameters
    ----------
    url, token
        The server (base URL) and its token, if it wants one.
    speed
        Trace seconds per real second.
    kernel_name
        The kernelspec to start; default: the server's default if it is a gpuckpt one, else the first that is.
    state_scale, state_cap
        A cell's array holds its trace memory times ``state_scale`` bytes, at most ``state_cap``.

    .. versionadded:: 0.1
    """
    if speed <= 0:
        raise LiveReplayError(f"the speed must be above 0, not {speed}")
    return asyncio.run(_replay(url, token, trace, speed, kernel_name, state_scale, state_cap))


async def _closed(ws: WebSocketClientConnection) -> None:
    """Close a websocket and wait for the server's close, so its socket is not left open."""
    ws.close()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while await ws.read_message() is not None:
                pass


async def _replay(url: str, token: str | None, trace: Trace, speed: float, kernel_name: str | None,
                  state_scale: float, state_cap: int) -> list[dict[str, Any]]:
    client = _Client(url, token or None)
    try:
        return await _replay_with(client, trace, speed, kernel_name, state_scale, state_cap)
    finally:
        client.close()


async def _replay_with(client: _Client, trace: Trace, speed: float, kernel_name: str | None, state_scale: float,
                       state_cap: int) -> list[dict[str, Any]]:
    name, policy, interval = await _policy(client, kernel_name)
    events = Events()
    listener = await client.websocket("api/events/subscribe")
    listening = asyncio.create_task(_listen(listener, events))
    try:
        t0 = time.monotonic()
        runs = await asyncio.gather(*(_run_session(client, SessionRun(s), name, t0, speed, state_scale, state_cap)
                                      for s in trace.sessions))
        await asyncio.sleep(0.5)  # the last events of the last shutdowns
    finally:
        listener.close()  # its reader ends with the server's close
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(listening, return_exceptions=True), 5)
    pool = len((await client.api("GET", "api/gpuckpt/gpus"))["gpus"]) or sum(s.gpus for s in trace.sessions)
    real = Trace([_compressed(s, speed) for s in trace.sessions], trace.name)
    if not any(r.live_gpus for r in runs) and policy.cpu_idle_timeout >= 0:  # what the server applied
        policy = replace(policy, idle_timeout=policy.cpu_idle_timeout)
    setting = Setting(name, replace(policy, cpu_idle_timeout=policy.idle_timeout), policy_interval=interval)
    costs, spread = _calibrated(runs, events)
    simulated = simulate(real, setting, pool, costs).to_json()
    return _rows(name, _measured(runs, events), simulated, speed, spread)


async def _policy(client: _Client, kernel_name: str | None) -> tuple[str, Policy, float]:
    """The kernelspec to start, the policy the server applies to its kernels, and its policy_interval."""
    specs = await client.api("GET", "api/kernelspecs")
    ours = sorted(n for n, s in specs["kernelspecs"].items()
                  if s["spec"]["metadata"].get("kernel_provisioner", {}).get("provisioner_name") == PROVISIONER_NAME)
    name = kernel_name or (specs["default"] if specs["default"] in ours else next(iter(ours), ""))
    if name not in ours:
        raise LiveReplayError(f"the server has no checkpointable kernelspec {name!r} (it has {', '.join(ours)})"
                              if name else "the server has no checkpointable kernelspec to replay with")
    server = await client.api("GET", "api/gpuckpt/policy")
    base = Policy(**{k: v for k, v in server.items() if k in Policy.__dataclass_fields__})
    loosenable = server.get("user_overridable", POLICY_FIELDS)  # what the server lets a kernelspec loosen
    policy = overridden(base, specs["kernelspecs"][name]["spec"]["metadata"], loosenable)[0]
    policy.exempt = name in server.get("exempt_kernelspecs", [])
    return name, policy, float(server["policy_interval"])


async def _listen(ws: WebSocketClientConnection, events: Events) -> None:
    while (raw := await ws.read_message()) is not None:
        event = json.loads(raw)
        kind = event.get("schema_id", "").split("/")[-2]
        if kind in KINDS:
            events.seen.append((time.monotonic(), kind, event))


def _message(code: str) -> tuple[str, str]:
    """An execute request in jupyter_server's JSON websocket protocol, and its id."""
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "replay", "session": "replay",
              "date": "", "version": "5.3"}
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    return json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content,
                       "channel": "shell", "buffers": []}), msg_id


async def _run_session(client: _Client, run: SessionRun, name: str, t0: float, speed: float, state_scale: float,
                       state_cap: int) -> SessionRun:
    session = run.session
    await asyncio.sleep(max(0.0, t0 + session.start / speed - time.monotonic()))
    run.kernel_id = str((await client.api("POST", "api/kernels", {"name": name}))["id"])
    ws = await client.websocket(f"api/kernels/{run.kernel_id}/channels?session_id={uuid.uuid4().hex}")
    shift = 0.0
    try:
        if (await _execute(ws, WARM_UP, CELL_TIMEOUT)).failed:
            raise LiveReplayError(f"kernel {run.kernel_id} could not import numpy")
        run.live_gpus = len((await client.api("GET", f"api/gpuckpt/kernels/{run.kernel_id}"))["gpus"])
        run.ready = time.monotonic()
        for cell in session.cells:
            due = run.ready + (cell.start - session.start) / speed + shift
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            size = min(state_cap, int((cell.vram_bytes + cell.memory_bytes) * state_scale))
            code = CELL.format(size=size, seconds=cell.duration / speed)
            cell_run = await _execute(ws, code, cell.duration / speed + CELL_TIMEOUT)
            run.cells.append(cell_run)
            shift += max(0.0, cell_run.submitted - due) + cell_run.wait
        due = run.ready + (session.stop - session.start) / speed + shift
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    finally:
        run.stopped = time.monotonic()
        await _closed(ws)
        await client.api("DELETE", f"api/kernels/{run.kernel_id}")
    return run


async def _execute(ws: WebSocketClientConnection, code: str, timeout: float) -> CellRun:
    """Run one cell: when it was sent, when the kernel began it (its ``busy``), when it ended;
    failed if it raised, or did not end within ``timeout`` seconds."""
    text, msg_id = _message(code)
    submitted = time.monotonic()
    await ws.write_message(text)
    started: float | None = None
    failed = False
    while True:
        try:
            raw = await asyncio.wait_for(ws.read_message(), submitted + timeout - time.monotonic())
        except TimeoutError:
            now = time.monotonic()
            return CellRun(submitted, now if started is None else started, now, failed=True)
        if raw is None:
            raise LiveReplayError("the server closed the kernel's websocket")
        msg = json.loads(raw)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "execute_reply":
            failed = msg["content"]["status"] != "ok"
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "busy" and started is None:
            started = time.monotonic()
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            ended = time.monotonic()
            return CellRun(submitted, ended if started is None else started, ended, failed)


def _compressed(session: Session, speed: float) -> Session:
    cells = [replace(c, start=c.start / speed, duration=c.duration / speed) for c in session.cells]
    return replace(session, start=session.start / speed, stop=session.stop / speed, cells=cells,
                   returns=[t / speed for t in session.returns])


def _calibrated(runs: list[SessionRun], events: Events) -> tuple[CostModel, float]:
    """Fixed costs (no bandwidth term: the live arrays are scaled down) from this run, medians: a
    suspend from its ``started`` to its ``released``, a restore the ``seconds`` its resume reported;
    and the restores' spread (p95 minus median)."""
    suspends, restores = [], []
    for run in runs:
        starts = events.times("suspend", run.kernel_id, phase="started")
        for t in events.times("suspend", run.kernel_id, phase="released"):
            suspends.append(t - max((s for s in starts if s <= t), default=t))
        restores += [float(e["seconds"]) for _, e in events.of("resume", run.kernel_id, phase="done")]
    default = CostModel()
    restore = statistics.median(restores) if restores else default.restore_fixed
    costs = CostModel(write_bandwidth=float("inf"), read_bandwidth=float("inf"), restore_fixed=restore,
                      suspend_fixed=statistics.median(suspends) if suspends else default.suspend_fixed)
    return costs, quantile(restores, 0.95) - restore if restores else 0.0


def _released(run: SessionRun, events: Events) -> float:
    """Real seconds the kernel's GPUs were free between its session's start and stop."""
    resumed = events.times("resume", run.kernel_id, phase="started")
    total = 0.0
    for t in events.times("suspend", run.kernel_id, phase="released"):
        until = min([r for r in resumed if r >= t] + [run.stopped])
        total += max(0.0, until - max(t, run.ready))
    return total


def _measured(runs: list[SessionRun], events: Events) -> dict[str, Any]:
    """The figures of the live run, in real hours and seconds, as the simulator defines them:
    reserved while the GPUs are held, busy running cells, idle the user's pauses (from the
    session's start or a cell's end to the next submit or the stop), returned while released; a
    session is lost if a cell of it failed or never ended (its kernel could not come back, say)."""
    reserved = busy = idle = returned = 0.0
    waits: list[float] = []
    suspends: list[dict[str, Any]] = []
    for run in runs:
        gpus, released = run.session.gpus, _released(run, events)
        reserved += gpus * (run.stopped - run.ready - released)
        returned += gpus * released
        busy += gpus * sum(c.ended - c.started for c in run.cells)
        ends, nexts = [run.ready] + [c.ended for c in run.cells], [c.submitted for c in run.cells] + [run.stopped]
        idle += gpus * sum(max(0.0, until - end) for end, until in zip(ends, nexts, strict=True))
        resumed = events.times("resume", run.kernel_id, phase="started")
        waits += [c.wait for c in run.cells if any(c.submitted <= t <= c.started for t in resumed)]
        # the policy may still suspend a kernel while it shuts down: not the session's
        suspends += [e for t, e in events.of("policy", run.kernel_id, action="suspend") if t <= run.stopped]
    cells = sum(len(r.cells) for r in runs)
    return {"gpu_hours_reserved": reserved / HOUR, "gpu_hours_busy": busy / HOUR,
            "gpu_hours_idle": idle / HOUR, "gpu_hours_idle_returned": returned / HOUR,
            "resume_wait_median_s": statistics.median(waits) if waits else 0.0,
            "resume_wait_p95_s": quantile(waits, 0.95) if waits else 0.0,
            "idle_returned_share": returned / idle if idle else 0.0, "cells_total": cells,
            "cells_waited_share": len(waits) / cells if cells else 0.0, "cells_waited": len(waits),
            "sessions_lost": sum(any(c.failed for c in r.cells) for r in runs), "suspends": len(suspends),
            "suspends_without_demand": sum(not e.get("for_demand") for e in suspends)}


def _rows(kernelspec: str, measured: dict[str, Any], simulated: dict[str, Any], speed: float, spread: float
          ) -> list[dict[str, Any]]:
    """Both figures in trace units, their difference, the tolerance and the verdict per key."""

    def trace_units(key: str, value: float) -> float:
        return value * speed if key.startswith(("gpu_hours", "resume_wait")) else value

    rows: dict[str, dict[str, Any]] = {
        source: {"policy": f"live {source}", "source": source, "kernelspec": kernelspec, "speed": speed}
        for source in ("measured", "simulated", "difference", "tolerance", "within")}
    for share in ("idle_returned_share", "cells_waited_share"):
        rows["measured"][share], rows["simulated"][share] = measured[share], simulated[share]
    for key, (absolute, relative) in TOLERANCES.items():
        ours, theirs = trace_units(key, measured[key]), trace_units(key, simulated[key])
        if key == "resume_wait_p95_s":
            absolute += spread
        floor = trace_units(key, absolute / HOUR if key.startswith("gpu_hours") else absolute)
        allowed = max(floor, relative * abs(theirs))
        rows["measured"][key], rows["simulated"][key] = ours, theirs
        rows["difference"][key], rows["tolerance"][key] = ours - theirs, allowed
        rows["within"][key] = abs(ours - theirs) <= allowed + 1e-12
    return list(rows.values())
