"""Slurm kernels on the test cluster: where the time goes, Slurm's part against ours.

Run as root, with Slurm installed (``tests/slurm_testbed/testbed.sh install``)::

    python benchmarks/bench_slurm.py [--runs 3] [--gib 1.0] [--only start,suspend,...] [--json FILE]

It starts ``tests/slurm_testbed`` (a real slurmctld and three slurmd on this host; stopped at the
end unless ``--keep-cluster``) and a real ``jupyter server`` with the extension in its own process
(``tests/live_server.running_server``, ``--SlurmPlacement.poll_interval=0.5``), and drives kernels
of the ``gpu`` partition through the REST API and a kernel websocket, as JupyterLab does. Every run
starts from a reset cluster (``SlurmCluster.reset``: no jobs, every node idle) and a new kernel:

* ``start``: ``POST /api/kernels`` to the first cell answered.
* ``suspend``: ``POST .../suspend?wait=1`` to ``sinfo`` showing the node's GRES free.
* ``resume``: ``POST .../resume?wait=1`` to the first cell answered with the state intact (the
  checkpoint's files dropped from the page cache first, as on another node of a shared store).
* ``preempt``: an ``owner`` job submitted on the kernel's node to the kernel answering on the
  other node (the kernel idle; GraceTime=10).
* ``nodekill``: the kernel's node killed (slurmd, steps, job processes) after a checkpoint, to the
  kernel answering elsewhere.

The kernels hold ``--gib`` of random float64 (incompressible, so every checkpoint writes it all).
Each time is cut at points seen from outside: ``squeue`` (and ``sinfo``, ``scontrol``, the
kernel's model) polled every 0.1 s (0.2 s for ``nodekill``; a polled point is late by up to one
interval), the exit note a preempted kernel writes (``signal_at``, ``saved_at``), the kernel's own
save and restore times from the model, and two marks each kernel process writes as it starts, from
an IPython startup file in the server's IPYTHONDIR (not the project's code): when the process
started and when it was ready. Those split Slurm's job launch (the batch script, our two-line
preamble in it, the ``srun`` step) from the kernel's own start. Whatever is neither clearly
Slurm's nor the kernel's (our ``sbatch`` call until ``squeue`` lists the job, the server noticing
that a job ended, the connection, the restore, the cell) counts as ours.

The helpers of ``tests/`` (``live_server``, ``slurm_cluster``, ``server_fixtures``) are imported
by putting ``tests/`` on ``sys.path``, as ``bench_suspend.py`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from harness import CacheLog, align, files_under, machine, machine_lines, progress  # noqa: E402
from live_server import TOKEN, Server, running_server  # noqa: E402  (the tests' server helper)
from server_fixtures import ws_request  # noqa: E402
from slurm_cluster import SCRIPT, SlurmCluster  # noqa: E402

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json, slurm_config  # noqa: E402
from jupyter_gpuckpt.placement.slurm_jobs import ENDED  # noqa: E402

SPEC = "python3-gpuckpt-slurm"
SCENARIOS = ("start", "suspend", "resume", "preempt", "nodekill")
POLL = 0.1
KILL_POLL = 0.2
WAIT = 180.0
"""Seconds any one step may take before the run is given up."""
OWNER_JOB = ["-p", "owner", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 600"]
MARKS_ENV = "GPUCKPT_BENCH_MARKS"
STARTUP = f'''\
# Written by benchmarks/bench_slurm.py: when this kernel process started, and when it was ready.
def _gpuckpt_bench_mark():
    import json, os, time
    folder = os.environ.get({MARKS_ENV!r})
    if not folder:
        return
    now = time.time()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
    started = now - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    name = os.environ.get("SLURM_JOB_ID") or "pid-%d" % os.getpid()
    tmp = os.path.join(folder, ".%s.tmp" % name)
    with open(tmp, "w") as f:
        json.dump({{"pid": os.getpid(), "process_start": started, "ready": now}}, f)
    os.replace(tmp, os.path.join(folder, name + ".json"))
_gpuckpt_bench_mark()
del _gpuckpt_bench_mark
'''
SLURM = "slurm"
OURS = "ours"
KERNEL = "kernel"


# -- talking to the server, as a notebook does ---------------------------------------------

@dataclass
class Cell:
    replied_at: float
    status: str
    stdout: str


class Notebook:
    """One kernel websocket through the server (legacy JSON protocol): cells wait there while
    the kernel is away, as a notebook's do."""

    def __init__(self, connection: WebSocketClientConnection) -> None:
        self.connection = connection

    async def execute(self, code: str, timeout: float = WAIT) -> Cell:
        """Run a cell; when its reply came, its status and its stdout."""
        text, msg_id = ws_request("execute_request", {"code": code, "silent": False, "store_history": True,
                                                      "user_expressions": {}, "allow_stdin": False})
        await self.connection.write_message(text)
        deadline = time.monotonic() + timeout
        replied: tuple[float, str] | None = None
        idle = False
        out: list[str] = []
        while replied is None or not idle:
            raw = await asyncio.wait_for(self.connection.read_message(), max(0.1, deadline - time.monotonic()))
            if raw is None:
                raise RuntimeError("the kernel websocket closed")
            msg = json.loads(raw)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "execute_reply":
                replied = (time.time(), msg["content"]["status"])
            elif msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append(f"ERROR {msg['content']['ename']}: {msg['content']['evalue']}\n")
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        return Cell(replied[0], replied[1], "".join(out))

    async def ok(self, code: str, timeout: float = WAIT) -> Cell:
        cell = await self.execute(code, timeout)
        if cell.status != "ok":
            raise RuntimeError(f"cell failed: {cell.stdout.strip()[-500:]}")
        return cell

    def close(self) -> None:
        self.connection.close()


class Client:
    """REST and websockets of the live server."""

    def __init__(self, server: Server) -> None:
        self.url = server.url
        self.headers = {"Authorization": f"token {TOKEN}"}
        self.http = AsyncHTTPClient()

    async def rest(self, method: str, path: str, body: Any = None, timeout: float = WAIT) -> Any:
        request = HTTPRequest(self.url + path, method=method, headers=self.headers, request_timeout=timeout,
                              body=None if method in ("GET", "DELETE") else json.dumps(body or {}))
        try:
            response = await self.http.fetch(request)
        except HTTPClientError as e:
            detail = e.response.body.decode(errors="replace")[:500] if e.response is not None else ""
            raise RuntimeError(f"{method} {path}: {e} {detail}") from e
        return json.loads(response.body) if response.body else None

    async def model(self, kernel_id: str) -> dict[str, Any]:
        return dict(await self.rest("GET", f"api/gpuckpt/kernels/{kernel_id}"))

    async def notebook(self, kernel_id: str) -> Notebook:
        url = f"ws{self.url[4:]}api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}"
        return Notebook(await websocket_connect(HTTPRequest(url, headers=self.headers)))


# -- watching Slurm from outside -----------------------------------------------------------

async def slurm_command(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.DEVNULL)
    out, _ = await process.communicate()
    if process.returncode:
        raise RuntimeError(f"{argv[0]} failed ({process.returncode})")
    return out.decode()


class Watch:
    """Polls Slurm (and optionally the kernel's model) in the background and keeps the first
    time each thing was seen: ``job ID seen``, ``job ID RUNNING``, ``job ID ended``, ``node N
    DOWN``, ``gres N 0``, ``kernel restoring`` ... Each time is the middle of the poll that saw it."""

    def __init__(self, client: Client, interval: float = POLL, *, nodes: bool = False, gres: bool = False,
                 kernel_id: str | None = None) -> None:
        self.client, self.interval, self.nodes, self.gres, self.kernel_id = client, interval, nodes, gres, kernel_id
        self.first: dict[str, float] = {}
        self.names: dict[str, str] = {}
        self.order: list[str] = []
        self.errors = 0
        self.ticks = 0
        self.slowest = 0.0
        """The longest one probe took (a point it saw may be off by half of that)."""
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watch:
        self._task = asyncio.create_task(self._loop())
        while not self.ticks:  # a first look before anything is timed
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def mark(self, key: str, at: float) -> None:
        self.first.setdefault(key, at)

    async def until(self, key: str, timeout: float = WAIT) -> float:
        deadline = time.monotonic() + timeout
        while key not in self.first:
            if time.monotonic() > deadline:
                raise TimeoutError(f"not seen within {timeout:.0f} s: {key}")
            await asyncio.sleep(0.01)
        return self.first[key]

    def jobs_of(self, kernel_id: str) -> list[str]:
        """The kernel's jobs, in the order they were first seen."""
        return [j for j in self.order if self.names[j] == f"jupyter-gpuckpt-{kernel_id[:8]}"]

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            probes = [self._squeue()]
            if self.nodes:
                probes.append(self._node_states())
            if self.gres:
                probes.append(self._gres())
            if self.kernel_id:
                probes.append(self._model(self.kernel_id))
            for outcome in await asyncio.gather(*probes, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    self.errors += 1
            self.ticks += 1
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    async def _timed(self, probe: Awaitable[Any]) -> tuple[Any, float]:
        before = time.time()
        result = await probe
        after = time.time()
        self.slowest = max(self.slowest, after - before)
        return result, (before + after) / 2

    async def _squeue(self) -> None:
        out, at = await self._timed(slurm_command("squeue", "-h", "--states=all", "-o", "%i|%j|%T|%N"))
        for line in out.splitlines():
            job, name, state, _node = (line.split("|") + ["", "", "", ""])[:4]
            if job not in self.names:
                self.names[job] = name
                self.order.append(job)
            self.mark(f"job {job} seen", at)
            self.mark(f"job {job} {state}", at)
            if state not in ("PENDING", "CONFIGURING", "RUNNING"):
                self.mark(f"job {job} left RUNNING", at)
            if state in ENDED:  # what the server waits for (COMPLETING is not yet ended)
                self.mark(f"job {job} ended", at)

    async def _node_states(self) -> None:
        out, at = await self._timed(slurm_command("scontrol", "-o", "show", "node"))
        for line in out.splitlines():
            name, state = re.search(r"NodeName=(\S+)", line), re.search(r"\bState=(\S+)", line)
            if name and state:
                for flag in state.group(1).split("+"):
                    self.mark(f"node {name.group(1)} {flag}", at)

    async def _gres(self) -> None:
        out, at = await self._timed(slurm_command("sinfo", "-h", "-N", "-O", "NodeList:30,GresUsed:60"))
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2:
                used = re.match(r"gpu:(?:[^:(]+:)?(\d+)", parts[1])
                self.mark(f"gres {parts[0]} {int(used.group(1)) if used else 0}", at)

    async def _model(self, kernel_id: str) -> None:
        model, at = await self._timed(self.client.model(kernel_id))
        self.mark(f"kernel {model['state']}", at)


# -- one run's split -----------------------------------------------------------------------

@dataclass
class Step:
    label: str
    whose: str
    seconds: float


@dataclass
class Run:
    """One run: consecutive steps that add up to its total, and figures beside them."""

    steps: list[Step] = field(default_factory=list)
    info: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(s.seconds for s in self.steps)

    def part(self, whose: str) -> float:
        return sum(s.seconds for s in self.steps if s.whose == whose)

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "slurm": self.part(SLURM), "ours": self.part(OURS),
                "kernel": self.part(KERNEL), "steps": [s.__dict__ for s in self.steps], "info": self.info,
                "notes": self.notes}


def cut(t0: float, points: list[tuple[str, str, float]]) -> list[Step]:
    """Steps between consecutive points (label, whose, time); a point polled a little late
    does not make the next step negative."""
    steps, last = [], t0
    for label, whose, at in points:
        at = max(at, last)
        steps.append(Step(label, whose, at - last))
        last = at
    return steps


def job_start(submitted: str, job: str, first: dict[str, float], marks: dict[str, float], last: str,
              replied_at: float) -> list[tuple[str, str, float]]:
    """The points of a job starting a kernel: ``submitted`` (our part until squeue lists
    the job), Slurm's scheduling and launch, the kernel's start, and ``last`` until the cell
    answered."""
    return [
        (submitted, OURS, first[f"job {job} seen"]),
        ("queued until RUNNING (Slurm's scheduling)", SLURM, first[f"job {job} RUNNING"]),
        ("job launch: batch script, srun step, until the kernel process starts", SLURM, marks["process_start"]),
        ("kernel start: Python, ipykernel, the hooks, until ready", KERNEL, marks["ready"]),
        (last, OURS, replied_at),
    ]


def split_restore(steps: list[Step], restore: float, label: str) -> list[Step]:
    """Cut the kernel's own restore time out of the last step (ours either way)."""
    last = steps[-1]
    inside = min(restore, last.seconds)
    return [*steps[:-1], Step("restore in the kernel (the model's report)", OURS, inside),
            Step(label, OURS, last.seconds - inside)]


@dataclass
class Bench:
    client: Client
    cluster: SlurmCluster
    store: Path
    marks: Path
    gib: float

    @property
    def jobs_dir(self) -> Path:
        return self.store / getpass.getuser() / "jobs"

    def kernel_marks(self, job_id: str) -> dict[str, float]:
        path = self.marks / f"{job_id}.json"
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            raise RuntimeError(f"no start marks from job {job_id} ({path}): the IPython startup "
                               "file did not run in its kernel") from None

    async def wait_marks(self, job_id: str, timeout: float = 10.0) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        while not (self.marks / f"{job_id}.json").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.kernel_marks(job_id)

    # -- kernels ---------------------------------------------------------------------------

    async def new_kernel(self) -> tuple[str, Notebook]:
        kernel_id = str((await self.client.rest("POST", "api/kernels", {"name": SPEC}))["id"])
        notebook = await self.client.notebook(kernel_id)
        await notebook.ok("pass")
        return kernel_id, notebook

    async def fill(self, notebook: Notebook, seed: int) -> tuple[str, str]:
        """``x``: ``--gib`` of random float64; its last element and its sum, as printed."""
        n = int(self.gib * 2**30 / 8)
        cell = await notebook.ok(f"import numpy as np\nx = np.random.default_rng({seed}).random({n})\n"
                                 "print(repr(float(x[-1])), repr(float(x.sum())))")
        last, total = cell.stdout.split()
        return last, total

    async def answer(self, notebook: Notebook, last: str, timeout: float = WAIT) -> Cell:
        """The first cell after a move or resume: cheap, but it reads ``x``."""
        cell = await notebook.ok("print(x.nbytes, repr(float(x[-1])))", timeout)
        if cell.stdout.strip().splitlines()[-1].split()[-1] != last:
            raise RuntimeError(f"x is not intact: {cell.stdout!r}, expected last element {last}")
        return cell

    async def intact(self, notebook: Notebook, total: str) -> None:
        cell = await notebook.ok("print(repr(float(x.sum())))")
        if cell.stdout.strip() != total:
            raise RuntimeError(f"x's sum is {cell.stdout.strip()}, expected {total}")

    async def shut(self, kernel_id: str | None, notebook: Notebook | None) -> None:
        """Shut the kernel down and delete its checkpoints (the next run writes its own)."""
        if notebook is not None:
            notebook.close()
        if kernel_id is None:
            return
        checkpoints: list[dict[str, Any]] = []
        try:
            checkpoints = await self.client.rest("GET", f"api/gpuckpt/kernels/{kernel_id}/checkpoints")
        except RuntimeError:
            pass
        try:
            await self.client.rest("DELETE", f"api/kernels/{kernel_id}")
        except RuntimeError as e:
            progress(f"  shutting kernel {kernel_id} down: {e}")
        for checkpoint in checkpoints:
            try:
                await self.client.rest("DELETE", f"api/gpuckpt/checkpoints/{checkpoint['id']}")
            except RuntimeError:
                pass

    def drop_store_cache(self) -> float:
        """Drop the store's files from the page cache; the share still cached after."""
        cache = CacheLog(everything=False)
        cache.drop(files_under(self.store / getpass.getuser() / "blobs"))
        return cache.worst_resident

    # -- scenarios -------------------------------------------------------------------------

    async def start(self, run: int) -> Run:
        kernel_id = notebook = None
        try:
            async with Watch(self.client) as watch:
                t0 = time.time()
                kernel_id = str((await self.client.rest("POST", "api/kernels", {"name": SPEC}))["id"])
                posted = time.time()
                notebook = await self.client.notebook(kernel_id)
                cell = await notebook.ok("print(6 * 7)")
            [job] = watch.jobs_of(kernel_id)
            marks = await self.wait_marks(job)
            steps = cut(t0, job_start("submit: our sbatch call, until squeue lists the job", job, watch.first, marks,
                                      "ours: see the ports, connect, websocket, the cell", cell.replied_at))
            return Run(steps, {"POST /api/kernels answered": posted - t0},
                       {"slowest poll s": watch.slowest, "poll errors": watch.errors})
        finally:
            await self.shut(kernel_id, notebook)

    async def suspend_resume(self, run: int, suspend: bool, resume: bool) -> dict[str, Run]:
        kernel_id = notebook = None
        out: dict[str, Run] = {}
        try:
            kernel_id, notebook = await self.new_kernel()
            last, total = await self.fill(notebook, run)
            model = await self.client.model(kernel_id)
            node, job = model["node"], model["job_id"]
            async with Watch(self.client, gres=True) as watch:
                if watch.first.get(f"gres {node} 1") is None:
                    raise RuntimeError(f"the kernel's node {node} shows no GRES in use before the suspend")
                t0 = time.time()
                await self.client.rest("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
                answered = time.time()
                free = await watch.until(f"gres {node} 0", 60)
            saved = (await self.client.model(kernel_id))["last_checkpoint"]
            out["suspend"] = Run(cut(t0, [
                ("checkpoint: kernel_info, the save, until the server has it", OURS, saved["time"]),
                ("scancel until squeue shows the job ended (our scancel)", SLURM,
                 watch.first.get(f"job {job} ended", saved["time"])),
                ("until sinfo shows the GRES free", SLURM, free),
            ]), {"save in the kernel": saved["seconds"], "REST answered": answered - t0,
                 "GB written": saved["bytes_written"] / 1e9},
                {"slowest poll s": watch.slowest, "poll errors": watch.errors})
            if not resume:
                return out
            resident = await asyncio.to_thread(self.drop_store_cache)
            async with Watch(self.client) as watch:
                t0 = time.time()
                await self.client.rest("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
                resumed = time.time()
                cell = await self.answer(notebook, last)
            model = await self.client.model(kernel_id)
            new = model["job_id"]
            marks = await self.wait_marks(new)
            steps = cut(t0, job_start("submit: read the manifest, our sbatch call, until squeue lists the job", new,
                                      watch.first, marks, "", cell.replied_at))
            steps = split_restore(steps, model["report"]["seconds"], "ours: connect, calls, the answer, the cell")
            out["resume"] = Run(steps, {"REST answered": resumed - t0, "cached share of the checkpoint": resident},
                                {"node": model["node"], "slowest poll s": watch.slowest, "poll errors": watch.errors})
            await self.intact(notebook, total)
            if not suspend:
                out.pop("suspend")
            return out
        finally:
            await self.shut(kernel_id, notebook)

    async def preempt(self, run: int) -> Run:
        kernel_id = notebook = None
        owner: str | None = None
        try:
            kernel_id, notebook = await self.new_kernel()
            last, total = await self.fill(notebook, run)
            model = await self.client.model(kernel_id)
            node, job = model["node"], model["job_id"]
            other = "node2" if node == "node1" else "node1"
            async with Watch(self.client, kernel_id=kernel_id) as watch:
                t0 = time.time()
                owner = await asyncio.to_thread(self.cluster.submit, [*OWNER_JOB[:2], "-w", node, *OWNER_JOB[2:]])
                submitted = time.time()
                await watch.until("kernel restoring", 60)
                cell = await self.answer(notebook, last)
            notes = sorted(self.jobs_dir.joinpath(kernel_id).glob("exit-*.json"))
            if not notes:
                raise RuntimeError("the preempted kernel wrote no exit note")
            note = json.loads(notes[-1].read_text())
            if note.get("error") or not note.get("checkpoint_id"):
                raise RuntimeError(f"the kernel's own checkpoint failed: {note}")
            model = await self.client.model(kernel_id)
            new = [j for j in watch.jobs_of(kernel_id) if j != job][-1]
            marks = await self.wait_marks(new)
            steps = cut(t0, [
                ("Slurm signals the kernel (sbatch owner job to SIGTERM)", SLURM, note["signal_at"]),
                ("our checkpoint, durable (signal_at to saved_at)", OURS, note["saved_at"]),
                ("the job ends in squeue (our 0.1 s output flush, then Slurm)", SLURM,
                 watch.first[f"job {job} ended"]),
                *job_start("the server notices, our sbatch call, until squeue lists the new job", new, watch.first,
                           marks, "", cell.replied_at),
            ])
            steps = split_restore(steps, model["report"]["seconds"], "ours: connect, calls, the held cell")
            moved = f"moved from {node} to {other} after preemption"
            result = Run(steps, {"checkpoint durable (from the owner job's sbatch)": note["saved_at"] - t0,
                                 "sbatch of the owner job": submitted - t0,
                                 "owner job RUNNING": watch.first.get(f"job {owner} RUNNING", float("nan")) - t0,
                                 "the kernel's job leaves RUNNING": watch.first[f"job {job} left RUNNING"] - t0},
                         {"from": node, "to": model["node"], "notice": model["notice"],
                          "old job": job, "new job": new, "slowest poll s": watch.slowest, "poll errors": watch.errors})
            if model["node"] != other or moved not in (model["notice"] or ""):
                raise RuntimeError(f"expected the kernel {moved}; model: node {model['node']}, "
                                   f"notice {model['notice']!r}")
            await self.intact(notebook, total)
            return result
        finally:
            await self.shut(kernel_id, notebook)

    async def nodekill(self, run: int) -> Run:
        kernel_id = notebook = None
        try:
            kernel_id, notebook = await self.new_kernel()
            last, total = await self.fill(notebook, run)
            before = time.time()
            await self.client.rest("POST", f"api/gpuckpt/kernels/{kernel_id}/checkpoint?wait=1")
            checkpoint = time.time() - before
            model = await self.client.model(kernel_id)
            node, job = model["node"], model["job_id"]
            resident = await asyncio.to_thread(self.drop_store_cache)
            async with Watch(self.client, KILL_POLL, nodes=True, kernel_id=kernel_id) as watch:
                t0 = time.time()
                await asyncio.to_thread(self.cluster.kill_node, node)
                killed = time.time()
                await watch.until("kernel restoring", 90)
                cell = await self.answer(notebook, last)
            model = await self.client.model(kernel_id)
            new = [j for j in watch.jobs_of(kernel_id) if j != job][-1]
            marks = await self.wait_marks(new)
            ended = watch.first[f"job {job} ended"]
            steps = cut(t0, [
                ("Slurm's detection: node killed until squeue shows the job ended", SLURM, ended),
                *job_start("the server notices, our sbatch call, until squeue lists the new job", new, watch.first,
                           marks, "", cell.replied_at),
            ])
            steps = split_restore(steps, model["report"]["seconds"], "ours: connect, calls, the held cell")
            info = {"checkpoint before the kill (REST)": checkpoint, "testbed kill-node": killed - t0,
                    "cached share of the checkpoint": resident,
                    "the job leaves RUNNING": watch.first[f"job {job} left RUNNING"] - t0}
            for flag in ("NOT_RESPONDING", "DOWN"):
                if f"node {node} {flag}" in watch.first:
                    info[f"node {flag}"] = watch.first[f"node {node} {flag}"] - t0
            state = next((s for s in ("NODE_FAIL", "FAILED", "CANCELLED") if f"job {job} {s}" in watch.first), "?")
            result = Run(steps, info, {"from": node, "to": model["node"], "old job state": state,
                                       "notice": model["notice"], "slowest poll s": watch.slowest,
                                       "poll errors": watch.errors})
            if model["node"] in (node, None):
                raise RuntimeError(f"the kernel did not move off {node}: {model}")
            await self.intact(notebook, total)
            return result
        finally:
            await self.shut(kernel_id, notebook)


# -- the report ----------------------------------------------------------------------------

TITLES = {
    "start": "start: POST /api/kernels to the first cell answered",
    "suspend": "suspend: POST .../suspend?wait=1 to the GRES free in Slurm",
    "resume": "resume: POST .../resume?wait=1 to the first cell answered, state intact",
    "preempt": "preemption: owner job submitted on the kernel's node to the kernel answering on the other",
    "nodekill": "node kill: the kernel's node killed to the kernel answering on the other",
}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def table(name: str, runs: list[Run]) -> str:
    lines = [["step", "whose", "median s (min–max)"]]
    for i, step in enumerate(runs[0].steps):
        lines.append([step.label, step.whose, spread([r.steps[i].seconds for r in runs])])
    lines.append(["total", "", spread([r.total for r in runs])])
    for whose, title in ((SLURM, "Slurm's part"), (OURS, "ours"), (KERNEL, "kernel start")):
        if any(s.whose == whose for s in runs[0].steps):
            lines.append([f"  of which {title}", whose, spread([r.part(whose) for r in runs])])
    for key in runs[0].info:
        values = [r.info[key] for r in runs if key in r.info and r.info[key] == r.info[key]]  # not NaN
        lines.append([f"(beside) {key}", "", spread(values)])
    footer = ""
    slowest = [r.notes["slowest poll s"] for r in runs if "slowest poll s" in r.notes]
    if slowest:
        footer = (f"\nslowest single poll: {max(slowest):.2f} s; failed polls: "
                  f"{sum(r.notes.get('poll errors', 0) for r in runs)}")
    moves = sorted({f"{r.notes['from']} -> {r.notes['to']}" for r in runs if "from" in r.notes})
    if moves:
        footer += f"\nmoves: {', '.join(moves)}"
    return f"{TITLES[name]} ({len(runs)} runs)\n" + align(lines) + footer


def summary(results: dict[str, list[Run]]) -> str:
    lines = [["scenario", "total s", "Slurm's part s", "ours s", "kernel start s"]]
    for name, runs in results.items():
        if runs:
            lines.append([name, spread([r.total for r in runs]), spread([r.part(SLURM) for r in runs]),
                          spread([r.part(OURS) for r in runs]), spread([r.part(KERNEL) for r in runs]) if any(
                              s.whose == KERNEL for s in runs[0].steps) else "-"])
    return "summary: median (min–max) of each run's parts\n" + align(lines)


# -- main ----------------------------------------------------------------------------------

async def measure(bench: Bench, wanted: list[str], runs: int) -> tuple[dict[str, list[Run]], list[dict[str, Any]]]:
    results: dict[str, list[Run]] = {name: [] for name in wanted}
    failures: list[dict[str, Any]] = []

    async def repeat(names: list[str], once: Callable[[int], Awaitable[dict[str, Run]]]) -> None:
        attempt = 0
        while min(len(results[n]) for n in names) < runs and attempt < runs + 2:
            attempt += 1
            progress(f"{'+'.join(names)} run {attempt}")
            await asyncio.to_thread(bench.cluster.reset)
            try:
                for name, result in (await once(attempt)).items():
                    results[name].append(result)
                    progress(f"  {name}: {result.total:.2f} s (Slurm {result.part(SLURM):.2f}, ours "
                             f"{result.part(OURS):.2f}, kernel {result.part(KERNEL):.2f})")
            except Exception as e:  # one failed run is reported, the others still count
                failures.append({"scenario": "+".join(names), "attempt": attempt, "error": f"{type(e).__name__}: {e}",
                                 "traceback": traceback.format_exc()})
                progress(f"  FAILED: {type(e).__name__}: {e}")

    async def single(name: str, attempt: int) -> dict[str, Run]:
        scenario: Callable[[int], Awaitable[Run]] = getattr(bench, name)
        return {name: await scenario(attempt)}

    progress("warm-up: one Slurm kernel started and shut down, untimed")
    await asyncio.to_thread(bench.cluster.reset)
    warm_id, warm = await bench.new_kernel()
    await bench.shut(warm_id, warm)
    for name in wanted:
        if name == "resume" and "suspend" in wanted:
            continue
        if name in ("suspend", "resume"):
            pair: list[str] = [n for n in ("suspend", "resume") if n in wanted]
            await repeat(pair, partial(bench.suspend_resume, suspend="suspend" in pair, resume="resume" in pair))
        else:
            await repeat([name], partial(single, name))
    return results, failures


def testbed(*args: str) -> None:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=180)
    if done.returncode:
        raise SystemExit(f"testbed.sh {' '.join(args)} failed:\n{done.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (default 3)")
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of state in the kernels (default 1)")
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the test cluster running")
    args = parser.parse_args()
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(wanted) - set(SCENARIOS):
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    wanted = [s for s in SCENARIOS if s in wanted]
    if os.geteuid() != 0:
        raise SystemExit("the Slurm testbed needs root")

    load = os.getloadavg()[0]
    progress("starting the Slurm testbed")
    testbed("start")
    cluster = SlurmCluster()
    os.environ.update(cluster.env)
    results: dict[str, list[Run]] = {}
    failures: list[dict[str, Any]] = []
    (HERE.parent / ".bench").mkdir(exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=HERE.parent / ".bench", prefix="slurm-") as tmp:
            base = Path(tmp)
            spec = base / "data" / "kernels" / SPEC
            spec.mkdir(parents=True)
            (spec / "kernel.json").write_text(json.dumps(kernelspec_json("bench (Slurm)",
                                                                         slurm=slurm_config("gpu", gpus=1))))
            startup = base / "ipython" / "profile_default" / "startup"
            startup.mkdir(parents=True)
            (startup / "00-gpuckpt-bench-marks.py").write_text(STARTUP)
            marks = base / "marks"
            marks.mkdir()
            os.environ[MARKS_ENV] = str(marks)
            store = base / "store"
            server_args = ("--SlurmPlacement.poll_interval=0.5", f"--GPUCheckpointApp.store_root={store}")
            with running_server(base, *server_args) as server:
                async def go() -> tuple[dict[str, list[Run]], list[dict[str, Any]]]:
                    bench = Bench(Client(server), cluster, store, marks, args.gib)
                    return await measure(bench, wanted, args.runs)

                results, failures = asyncio.run(go())
            info = machine(base, {"slurm": subprocess.run(["sinfo", "-V"], capture_output=True, text=True
                                                          ).stdout.strip()}, load)
    finally:
        if not args.keep_cluster:
            progress("stopping the Slurm testbed")
            testbed("stop")

    print("\n".join(machine_lines(info)))
    print(f"Slurm: {info['slurm']}; tests/slurm_testbed (SlurmdTimeout=10, GraceTime=10, KillWait=5); "
          f"server: --SlurmPlacement.poll_interval=0.5; state {args.gib:g} GiB of random float64; polled every "
          f"{POLL} s ({KILL_POLL} s for nodekill)\n")
    for name, runs in results.items():
        if runs:
            print(table(name, runs) + "\n")
    print(summary(results))
    for failure in failures:
        print(f"\nFAILED {failure['scenario']} attempt {failure['attempt']}: {failure['error']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "machine": info, "runs": args.runs, "gib": args.gib, "poll": POLL, "kill_poll": KILL_POLL,
            "scenarios": {name: [r.to_json() for r in runs] for name, runs in results.items()},
            "failures": failures}, indent=1))


if __name__ == "__main__":
    main()
