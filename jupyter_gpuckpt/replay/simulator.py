"""Replay a :class:`~.trace.Trace` through :mod:`..policy` on a simulated clock and cluster.

Event-driven: each kernel's next cell, its idle-limit deadline (from ``policy.idle_limit``),
the ends of suspends and restores, and, only while a GPU request waits, a policy pass at
each arrival and every ``policy_interval`` seconds. Nothing sleeps, so a week of 2,000
sessions replays in seconds. Decisions are ``policy.plan``'s, on :class:`policy.KernelView`\\ s
of the simulated kernels, as the server's pass makes them (``reclaim.py``).

The model: a kernel holds its session's GPUs while it runs; a suspend holds them for
``CostModel.suspend_seconds`` and then frees them; a cell sent to a suspended kernel waits
for GPUs (FIFO, behind earlier requests) and a restore, and the rest of its session moves
back by that wait. Culling (jupyter_server's culler, a baseline outside policy.py) kills the
kernel: the next cell waits for a new kernel and for re-running every cell run so far.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..kernels.watcher import GAPS_KEPT, USER_GAPS_KEPT
from ..placement.demand import Demand
from ..policy import decisions as policy
from .costs import CostModel
from .trace import GB, Session, Trace

SERVER_GAPS_KEPT = 200
"""Pauses kept over every user of the replayed cluster (the server's, for the wait budget)."""
POOL = "local"
SMALL_STATE = 2 * GB
"""Sessions at most this big are the ones ``resume_wait_median_small_s`` covers."""
_EPSILON = 1e-6
"""Seconds past a deadline at which it is checked, so the policy sees it reached."""

# event kinds, in the order ties are taken
_START, _RESTORED, _SUSPENDED, _SUBMIT, _RETURN, _DEADLINE, _TICK = range(7)


@dataclass(frozen=True)
class Setting:
    """A named policy setting: the project's :class:`policy.Policy`, or a baseline kind."""

    name: str
    """Readable, e.g. ``idle 30m``, ``on_demand``, ``cull 90m``, ``none``, ``rhythm``, ``oracle``."""
    policy: policy.Policy | None = None
    """The policy the server would run; None for a baseline."""
    baseline: str = ""
    """``none`` (never reclaim), ``cull`` (jupyter_server's culler: state lost), or ``oracle``
    (a reference, not a policy: suspends at once every pause of at least ``cull_after``
    seconds, knowing each pause in advance)."""
    cull_after: float = 0.0
    """``cull``: seconds idle before the kernel is killed; ``oracle``: the shortest pause suspended."""
    floors: tuple[tuple[str, int], ...] = ()
    """GPUs each group keeps under policy suspends."""
    policy_interval: float = 10.0
    """Seconds between policy passes while a GPU request waits (the server's ``policy_interval``)."""
    configured: bool = False
    """The policy a server's own config runs (``replay --config``), shown beside the standard rows."""


@dataclass
class Figures:
    """What one setting did to the trace; :meth:`to_json` gives the ``--json`` contract keys.

    GPU-hours: ``reserved`` is held by kernels; ``busy`` running the trace's cells; ``idle`` the
    users' pauses (between session start, cells and stop: the same under every setting); of
    that, ``idle_returned`` spent with the GPUs back in the pool; ``lent`` held by other work
    beyond what the cluster could have run had nothing been reclaimed.
    """

    policy: str
    reference: bool = False
    configured: bool = False
    """The row of the policy the given server config runs."""
    gpu_hours_reserved: float = 0.0
    gpu_hours_busy: float = 0.0
    gpu_hours_idle: float = 0.0
    gpu_hours_idle_returned: float = 0.0
    idle_returned_share: float = 0.0
    gpu_hours_lent: float = 0.0
    cells_total: int = 0
    cells_waited: int = 0
    """Cells that waited for a restore (or, culled, a new kernel and a re-run)."""
    cells_waited_share: float = 0.0
    resume_wait_median_s: float = 0.0
    resume_wait_p95_s: float = 0.0
    resume_wait_median_small_s: float = 0.0
    """The median over sessions whose state is at most 2 GB."""
    gpu_waits: int = 0
    """Requests (kernel starts, restores) that waited for a free GPU."""
    gpu_wait_max_s: float = 0.0
    suspends: int = 0
    suspends_without_demand: int = 0
    """Suspends made while no GPU request waited."""
    suspend_max_s: float = 0.0
    sessions_lost: int = 0
    rerun_gpu_hours: float = 0.0
    """Re-running cells after a cull."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Kernel:
    """One session's kernel as the simulation runs it."""

    __slots__ = ("index", "session", "gpus", "state", "shift", "next_cell", "busy_until", "last_end",
                 "last_activity", "gaps", "user_gaps", "state_bytes", "ran", "held_since", "released_at", "pending",
                 "wait_start", "queued_at", "deadline_token", "warned_at", "stopped", "lost", "next_return", "small")

    def __init__(self, index: int, session: Session, user_gaps: deque[float]) -> None:
        self.index = index
        self.session = session
        self.gpus = session.gpus
        self.state = "new"
        """new, running, checkpointing, suspended, culled, restoring, done."""
        self.shift = 0.0
        """Seconds the session runs behind the trace (its waits so far)."""
        self.next_cell = 0
        self.busy_until = session.start
        self.last_end = session.start
        """When the last cell ended (or the kernel started): where the current pause began."""
        self.last_activity = session.start
        self.gaps: deque[float] = deque(maxlen=GAPS_KEPT)
        self.user_gaps = user_gaps
        """Its user's pauses over all their sessions, as their server keeps them."""
        self.state_bytes = 0
        self.ran = 0.0
        """Seconds of cells run: what a culled kernel re-runs."""
        self.held_since = 0.0
        self.released_at = 0.0
        self.pending: int | None = None
        """The cell waiting for the kernel to come back."""
        self.wait_start = 0.0
        self.queued_at: float | None = None
        self.deadline_token = 0
        self.warned_at: float | None = None
        self.stopped = False
        self.lost = False
        self.next_return = 0
        self.small = session.state_bytes <= SMALL_STATE


class _Simulation:
    def __init__(self, trace: Trace, setting: Setting, gpus: int, costs: CostModel) -> None:
        self.setting = setting
        self.policy = setting.policy
        self.reacts = setting.policy is not None and setting.policy.reclaim != "idle"
        self.floors = dict(setting.floors)
        self.gpus = gpus
        self.costs = costs
        self.free = gpus
        users: dict[str, deque[float]] = {}  # a session of no named user is a user of its own
        self.kernels = [_Kernel(i, s, users.setdefault(s.user or f"session {s.session_id}",
                                                       deque(maxlen=USER_GAPS_KEPT)))
                        for i, s in enumerate(trace.sessions)]
        self.server_gaps: deque[float] = deque(maxlen=SERVER_GAPS_KEPT)
        """Every user's recent pauses: what a new user's first kernel follows."""
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.queue: deque[_Kernel] = deque()
        self.live: dict[int, _Kernel] = {}
        """Running and checkpointing kernels: what a pass with demand looks at."""
        self.floor_kept: dict[str, set[int]] = {}
        self._fixed_limits: dict[int, float] = {}
        self.tick_pending = False
        self.freeing = 0
        """GPUs of kernels being suspended."""
        self.reclaimed = 0
        """GPUs of live kernels that do not hold them (suspended, culled): for ``lent``."""
        self.marked_at = 0.0
        self.figures = Figures(setting.name, reference=setting.baseline == "oracle", configured=setting.configured)
        self.waits: list[float] = []
        self.waits_small: list[float] = []
        self.reserved = self.busy = self.idle = self.returned = self.lent = self.rerun = 0.0
        for k in self.kernels:
            if k.gpus > gpus:
                raise ValueError(f"session {k.session.session_id} needs {k.gpus} GPUs; the cluster has {gpus}")
            self._push(k.session.start, _START, k.index)

    # -- the event loop

    def _push(self, when: float, kind: int, index: int, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, index, token))

    def run(self) -> Figures:
        handlers = {_START: self._start, _RESTORED: self._restored, _SUSPENDED: self._suspended,
                    _SUBMIT: self._submit, _RETURN: self._return, _DEADLINE: self._deadline}
        while self.events:
            now, kind, _, index, token = heapq.heappop(self.events)
            if kind == _TICK:
                self.tick_pending = False
                self._demand_pass(now)
            else:
                handlers[kind](self.kernels[index], now, token)
        if self.queue:
            raise RuntimeError("replay ended with GPU requests still waiting")
        return self._figures()

    # -- the cluster

    def _mark(self, now: float) -> None:
        """Account ``lent`` up to ``now``, before the GPUs held or reclaimed change."""
        self.lent += max(0, self.reclaimed - self.free) * (now - self.marked_at)
        self.marked_at = now

    def _request(self, k: _Kernel, now: float) -> None:
        """``k`` wants its GPUs (to start, or to come back): now if free, else behind the queue."""
        if k.state in ("suspended", "culled"):
            self.returned += (now - k.released_at) * k.gpus
        if not self.queue and self.free >= k.gpus:
            self._acquire(k, now)
            return
        k.queued_at = now
        self.queue.append(k)
        self._demand_pass(now)

    def _serve(self, now: float) -> None:
        """Freed GPUs go to the waiting requests, first come first served."""
        while self.queue and self.free >= self.queue[0].gpus:
            k = self.queue.popleft()
            waited = now - (k.queued_at or now)
            k.queued_at = None
            if waited > 0:
                self.figures.gpu_waits += 1
                self.figures.gpu_wait_max_s = max(self.figures.gpu_wait_max_s, waited)
            if k.state == "new":
                k.shift += waited
            self._acquire(k, now)

    def _acquire(self, k: _Kernel, now: float) -> None:
        self._mark(now)
        self.free -= k.gpus
        k.held_since = now
        if k.state == "new":
            k.last_end = k.last_activity = k.busy_until = now
            self._run(k, now)
            self._schedule(k, now)
            return
        self.reclaimed -= k.gpus
        if k.state == "culled":
            self.rerun += k.ran * k.gpus
            seconds = self.costs.start_fixed + k.ran
        else:
            seconds = self.costs.restore_seconds(k.state_bytes)
        k.state = "restoring"
        self._push(now + seconds, _RESTORED, k.index)

    def _release(self, k: _Kernel, now: float, reclaimed: bool) -> None:
        self._mark(now)
        self.reserved += (now - k.held_since) * k.gpus
        self.free += k.gpus
        self.live.pop(k.index, None)
        if reclaimed:
            self.reclaimed += k.gpus
            k.released_at = now

    def _run(self, k: _Kernel, now: float) -> None:
        k.state = "running"
        self.live[k.index] = k
        group = k.session.group
        if self.floor_kept.get(group):  # the group holds more: what its floor kept may go now
            kept = [self.kernels[i] for i in self.floor_kept.pop(group)]
            self._pass(now, [c for c in kept if c.state == "running"])

    # -- a kernel's own events

    def _start(self, k: _Kernel, now: float, token: int) -> None:
        self._request(k, now)

    def _submit(self, k: _Kernel, now: float, token: int) -> None:
        """The user sends the next cell (or, after the last, shuts the kernel down)."""
        self.idle += max(0.0, now - k.last_end) * k.gpus
        if k.next_cell == len(k.session.cells):
            self._stop(k, now)
            return
        if k.next_cell > 0:
            k.gaps.append(max(0.0, now - k.last_end))
            k.user_gaps.append(k.gaps[-1])
            self.server_gaps.append(k.gaps[-1])
        k.last_activity = now
        k.deadline_token += 1
        if k.state == "running":
            self._cell(k, k.next_cell, now)
            return
        k.pending, k.wait_start = k.next_cell, now
        if k.state in ("suspended", "culled") and k.queued_at is None:
            self._request(k, now)

    def _cell(self, k: _Kernel, index: int, now: float) -> None:
        cell = k.session.cells[index]
        self.figures.cells_total += 1
        start = max(now, k.busy_until)  # sent while the last one ran (the trace's overlap): it queues
        k.busy_until = k.last_end = k.last_activity = start + cell.duration
        k.ran += cell.duration
        k.state_bytes = max(k.state_bytes, cell.vram_bytes + cell.memory_bytes)
        self.busy += cell.duration * k.gpus
        k.next_cell = index + 1
        self._schedule(k, now)

    def _schedule(self, k: _Kernel, now: float) -> None:
        """Push the kernel's next cell (or stop), the user's returns before it, and its deadline."""
        upcoming = self._upcoming(k)
        self._push(upcoming, _SUBMIT, k.index)
        returns = k.session.returns
        while k.next_return < len(returns) and returns[k.next_return] + k.shift <= upcoming:
            when = returns[k.next_return] + k.shift
            if when > k.busy_until:
                self._push(when, _RETURN, k.index)
            k.next_return += 1
        self._schedule_deadline(k, upcoming)

    @staticmethod
    def _upcoming(k: _Kernel) -> float:
        """When the user sends the kernel's next cell, or, after the last, shuts it down."""
        cells = k.session.cells
        if k.next_cell < len(cells):
            return cells[k.next_cell].start + k.shift
        return max(k.session.stop + k.shift, k.busy_until)

    def _schedule_deadline(self, k: _Kernel, upcoming: float) -> None:
        deadline = self._deadline_of(k, upcoming)
        if deadline is not None and deadline < upcoming:
            self._push(max(deadline, k.busy_until) + _EPSILON, _DEADLINE, k.index, k.deadline_token)

    def _deadline_of(self, k: _Kernel, upcoming: float) -> float | None:
        """When the setting would first act on ``k``, idle since ``last_activity`` until ``upcoming``."""
        if self.policy is not None:
            learns = self.policy.rhythm or self.policy.wait_budget > 0  # the limit follows the pauses
            limit = self._fixed_limits.get(k.gpus) if not learns else None
            if limit is None:
                found = policy.idle_limit(self.policy, self._view(k, k.busy_until))
                limit = math.inf if found is None else found[0]
                if not learns:  # the limit then depends on the GPUs alone
                    self._fixed_limits[k.gpus] = limit
            return k.last_activity + limit if limit < math.inf else None
        if self.setting.baseline == "cull":
            return k.last_activity + self.setting.cull_after
        if self.setting.baseline == "oracle" and upcoming - k.last_end >= self.setting.cull_after:
            return k.last_end
        return None

    def _return(self, k: _Kernel, now: float, token: int) -> None:
        """The user came back to the notebook (where the trace says so): resume ahead of the cell,
        as JupyterLab's return signal makes the server do (a policy's ``resume_on_return``)."""
        if self.policy is not None and not self.policy.resume_on_return:
            return
        if k.state in ("suspended", "culled") and not k.stopped:
            k.last_activity = now
            self._request(k, now)

    def _deadline(self, k: _Kernel, now: float, token: int) -> None:
        if token != k.deadline_token or k.state != "running" or now < k.busy_until:
            return
        if self.policy is None:
            if self.setting.baseline == "cull":
                self._cull(k, now)
            else:
                self._suspend(k, now)
            return
        self._pass(now, self._idle_live(now) if self.reacts and self.queue else [k])
        if k.state == "running" and k.session.group in self.floors:
            self.floor_kept.setdefault(k.session.group, set()).add(k.index)

    def _suspend(self, k: _Kernel, now: float) -> None:
        k.state = "checkpointing"
        self.freeing += k.gpus
        k.deadline_token += 1
        seconds = self.costs.suspend_seconds(k.state_bytes)
        self.figures.suspends += 1
        self.figures.suspends_without_demand += not self.queue
        self.figures.suspend_max_s = max(self.figures.suspend_max_s, seconds)
        self._push(now + seconds, _SUSPENDED, k.index)

    def _suspended(self, k: _Kernel, now: float, token: int) -> None:
        self.freeing -= k.gpus
        self._release(k, now, reclaimed=not k.stopped)
        k.state = "done" if k.stopped else "suspended"
        if k.pending is not None:
            self._request(k, now)
        self._serve(now)
        self._demand_pass(now)

    def _cull(self, k: _Kernel, now: float) -> None:
        self._release(k, now, reclaimed=True)
        k.state = "culled"
        k.lost = True
        k.deadline_token += 1
        self._serve(now)

    def _restored(self, k: _Kernel, now: float, token: int) -> None:
        self._run(k, now)
        if k.stopped:
            self._release(k, now, reclaimed=False)
            k.state = "done"
            self._serve(now)
            return
        if k.pending is None:  # resumed ahead of the cell: idle again from the user's return
            k.deadline_token += 1
            self._schedule_deadline(k, self._upcoming(k))
            return
        waited = now - k.wait_start
        self.figures.cells_waited += 1
        self.waits.append(waited)
        if k.small:
            self.waits_small.append(waited)
        k.shift += waited
        index, k.pending = k.pending, None
        self._cell(k, index, now)

    def _stop(self, k: _Kernel, now: float) -> None:
        k.stopped = True
        k.deadline_token += 1
        if k.state == "running":
            self._release(k, now, reclaimed=False)
            k.state = "done"
            self._serve(now)
        elif k.state in ("suspended", "culled"):
            self._mark(now)
            self.reclaimed -= k.gpus
            self.returned += (now - k.released_at) * k.gpus
            k.state = "done"
        elif k.queued_at is not None:  # resuming ahead, still waiting for GPUs
            self.queue.remove(k)
            k.queued_at = None
            k.state = "done"
        # checkpointing or restoring: done when that ends

    # -- policy passes

    def _view(self, k: _Kernel, now: float) -> policy.KernelView:
        busy = now < k.busy_until
        return policy.KernelView(
            str(k.index), k.state, busy, 0.0 if busy else now - k.last_activity, k.gpus, connections=1,
            state_bytes=k.state_bytes, group=k.session.group, pool=POOL, gaps=k.gaps, warned_at=k.warned_at,
            user_gaps=k.user_gaps, server_gaps=self.server_gaps)

    def _demand(self) -> Mapping[str, Demand]:
        if not self.queue:
            return {}
        wanted = sum(k.gpus for k in self.queue)
        return {POOL: Demand(max(0, wanted - self.free), tuple(k.session.session_id for k in self.queue))}

    def _held(self) -> dict[str, int]:
        held: dict[str, int] = {}
        for k in self.live.values():
            held[k.session.group] = held.get(k.session.group, 0) + k.gpus
        return held

    def _pass(self, now: float, kernels: Sequence[_Kernel]) -> None:
        """Run ``policy.plan`` over ``kernels`` and act on its decisions."""
        if not kernels or self.policy is None:
            return
        setting = self.policy
        floors = policy.Floors(self.floors, self._held() if self.floors else {})
        views = [self._view(k, now) for k in kernels]
        for k, decision in zip(kernels, policy.plan(lambda _: setting, views, self._demand(), floors, now),
                               strict=True):
            if decision.action == "suspend":
                k.warned_at = None
                self._suspend(k, now)
            elif decision.action == "warn":
                k.warned_at = now
                self._push(now + (decision.due_in or 0.0) + _EPSILON, _DEADLINE, k.index, k.deadline_token)

    def _idle_live(self, now: float) -> list[_Kernel]:
        """The live kernels but those running a cell, which no policy suspends (nor counts as
        being freed): what a pass with demand needs to see."""
        return [k for k in self.live.values() if now >= k.busy_until or k.state == "checkpointing"]

    def _demand_pass(self, now: float) -> None:
        """While GPU requests wait, a pass over every live kernel, again every ``policy_interval``."""
        if not self.reacts or not self.queue:
            return
        if self.free + self.freeing >= sum(k.gpus for k in self.queue):
            return  # suspends under way free enough: plan would add none; their ends pass again
        self._pass(now, self._idle_live(now))
        if self.queue and not self.tick_pending:
            self.tick_pending = True
            self._push(now + self.setting.policy_interval, _TICK, -1)

    # -- the figures

    def _figures(self) -> Figures:
        f = self.figures
        hours = 3600.0
        f.gpu_hours_reserved = self.reserved / hours
        f.gpu_hours_busy = self.busy / hours
        f.gpu_hours_idle = self.idle / hours
        f.gpu_hours_idle_returned = self.returned / hours
        f.idle_returned_share = self.returned / self.idle if self.idle else 0.0
        f.gpu_hours_lent = self.lent / hours
        f.rerun_gpu_hours = self.rerun / hours
        f.cells_waited_share = f.cells_waited / f.cells_total if f.cells_total else 0.0
        if self.waits:
            f.resume_wait_median_s = statistics.median(self.waits)
            f.resume_wait_p95_s = policy.quantile(self.waits, 0.95)
        if self.waits_small:
            f.resume_wait_median_small_s = statistics.median(self.waits_small)
        f.sessions_lost = sum(k.lost for k in self.kernels)
        return f


def simulate(trace: Trace, setting: Setting, gpus: int, costs: CostModel) -> Figures:
    """Replay ``trace`` under ``setting`` on a cluster of ``gpus`` GPUs, with ``costs``.

    Parameters
    ----------
    trace
        The sessions; each needs at most ``gpus`` GPUs (else ValueError).
    setting
        A policy (run through ``policy.plan``) or a baseline.
    gpus
        GPUs in the one pool every session draws from.
    costs
        What suspends and restores take.
    """
    return _Simulation(trace, setting, gpus, costs).run()


def oracle_threshold(trace: Trace, costs: CostModel, share: float = 0.9) -> float:
    """The shortest pause the ``oracle`` reference suspends so as to return ``share`` of the
    idle GPU-time: the longest pauses first, which is the fewest waits that return that much."""
    returned: list[tuple[float, float]] = []  # (pause, GPU-seconds a suspend at its start returns)
    total = 0.0
    for s in trace.sessions:
        end, state = s.start, 0
        for i, mark in enumerate([c.start for c in s.cells] + [s.stop]):
            pause = max(0.0, mark - end)
            total += pause * s.gpus
            returned.append((pause, max(0.0, pause - costs.suspend_seconds(state)) * s.gpus))
            if i < len(s.cells):
                c = s.cells[i]
                end, state = max(end, c.start + c.duration), max(state, c.vram_bytes + c.memory_bytes)
    got = 0.0
    for pause, gpu_seconds in sorted(returned, reverse=True):
        got += gpu_seconds
        if got >= share * total:
            return max(pause, _EPSILON)
    return _EPSILON


def oracle_at_waits(trace: Trace, costs: CostModel, waits: int) -> float:
    """The most idle GPU-hours any policy could return with ``waits`` cells waiting: every
    pause after a session's last cell (no cell waits for it), and the ``waits`` pauses before a
    cell that return the most, each suspended at its start (the oracle knows every pause)."""
    free = 0.0
    before_cells: list[float] = []
    for s in trace.sessions:
        end, state = s.start, 0
        marks = [c.start for c in s.cells] + [s.stop]
        for i, mark in enumerate(marks):
            gain = max(0.0, mark - end - costs.suspend_seconds(state)) * s.gpus
            if i < len(s.cells):
                if i > 0:  # the first cell starts the kernel: no restore to wait for
                    before_cells.append(gain)
                c = s.cells[i]
                end, state = max(end, c.start + c.duration), max(state, c.vram_bytes + c.memory_bytes)
            else:
                free += gain
    return (free + sum(sorted(before_cells, reverse=True)[:max(0, waits)])) / 3600.0


IDLE_TIMEOUTS = (2, 5, 10, 30, 60)
"""Minutes of the fixed idle timeouts compared."""
RHYTHM_TIMEOUT = 600.0
"""The rhythm rows' ``idle_timeout``: the limit until a session's rhythm is known, and its cap."""
BUDGET_TIMEOUT = 1800.0
"""The idle limit the ``budget 10%`` row never exceeds (the policy's ``idle_timeout``)."""


def default_settings(trace: Trace, costs: CostModel, floors: Sequence[tuple[str, int]] = ()) -> list[Setting]:
    """The table's rows: no policy, culling, fixed idle timeouts, rhythm, on demand, both (on
    demand and rhythm), each policy again with ``floors`` if any, and without the return signal
    where the trace records the users' returns, and the oracle reference."""
    rhythm = policy.Policy(idle_timeout=RHYTHM_TIMEOUT, rhythm=True)
    on_demand = policy.Policy(reclaim="on_demand")
    both = policy.Policy(idle_timeout=RHYTHM_TIMEOUT, rhythm=True, reclaim="both")
    budget = policy.Policy(idle_timeout=BUDGET_TIMEOUT, wait_budget=0.10)
    rows = [Setting("none", baseline="none"), Setting("cull 30m", baseline="cull", cull_after=1800.0),
            Setting("cull 90m", baseline="cull", cull_after=5400.0)]
    rows += [Setting(f"idle {m}m", policy.Policy(idle_timeout=m * 60.0)) for m in IDLE_TIMEOUTS]
    named = [("rhythm", rhythm), ("budget 10%", budget), ("on_demand", on_demand), ("both", both)]
    rows += [Setting(name, p) for name, p in named]
    if floors:
        rows += [Setting(f"{name} +floors", p, floors=tuple(floors)) for name, p in named]
    if any(s.returns for s in trace.sessions):  # the return signal's worth: the same without it
        rows += [Setting(f"{name}, no return signal", replace(p, resume_on_return=False)) for name, p in named]
    rows.append(Setting("oracle", baseline="oracle", cull_after=oracle_threshold(trace, costs)))
    return rows


CONFIGURED = "your config"
"""The name of the row of the policy a server's config runs."""


def configured_setting(configured: policy.Policy, floors: Sequence[tuple[str, int]] = (),
                       policy_interval: float = 10.0) -> Setting:
    """The row of the policy a server with this config runs, floors and pass interval included."""
    return Setting(CONFIGURED, configured, floors=tuple(floors), policy_interval=policy_interval, configured=True)


def contended_gpus(trace: Trace, share: float = 0.75) -> int:
    """The default cluster: ``share`` of the most GPUs the trace's sessions hold at once as
    recorded, so that at its peaks GPU requests wait unless idle kernels give theirs back."""
    changes = sorted([(s.start, s.gpus) for s in trace.sessions] + [(s.stop, -s.gpus) for s in trace.sessions],
                     key=lambda c: (c[0], c[1]))
    held = peak = 0
    for _, gpus in changes:
        held += gpus
        peak = max(peak, held)
    return max(max((s.gpus for s in trace.sessions), default=1), math.ceil(share * peak))


_worker_trace: Trace | None = None


def _init_worker(trace: Trace) -> None:
    global _worker_trace
    _worker_trace = trace


def _simulate_in_worker(setting: Setting, gpus: int, costs: CostModel) -> Figures:
    assert _worker_trace is not None
    return simulate(_worker_trace, setting, gpus, costs)


def simulate_all(trace: Trace, settings: Sequence[Setting], gpus: int, costs: CostModel,
                 jobs: int = 1) -> list[Figures]:
    """:func:`simulate` for each setting, in ``jobs`` processes side by side (each gets the
    trace once)."""
    if jobs <= 1 or len(settings) <= 1:
        return [simulate(trace, s, gpus, costs) for s in settings]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(jobs, len(settings)), initializer=_init_worker, initargs=(trace,)) as pool:
        return list(pool.map(_simulate_in_worker, settings, [gpus] * len(settings), [costs] * len(settings)))
