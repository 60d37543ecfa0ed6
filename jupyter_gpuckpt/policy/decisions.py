"""Reclaim policy: which kernels to suspend, warn, checkpoint or convert now, and why.

Pure: it reads a :class:`KernelView` of each kernel and the :class:`Demand` for GPUs, and
returns a :class:`Decision` with a reason for every kernel. The server's policy pass
(``app.py``) and the trace replay (``replay/``) run this same code, on the real clock and on
a simulated one, so what the replay reports is what the server would do.

The settings are the extension's traitlets; a kernelspec can override any of them in its
metadata under ``"gpuckpt"`` (for example ``{"idle_timeout": 600}``). A busy kernel is never
suspended by policy, and checkpoint traffic never counts as activity.

Reclaim modes:

- ``idle``: suspend a kernel idle for ``idle_timeout`` (``cpu_idle_timeout`` for kernels
  holding no GPU), or, with ``rhythm``, for the limit its pauses between cells say is cheapest
  (:func:`rhythm_limit`; its user's recent pauses until it has enough of its own);
- ``on_demand``: suspend idle kernels only while GPU requests wait that their GPUs could
  serve, cheapest first (longest idle, least state to write, most GPUs freed), never more
  than the waiting requests need;
- ``both``: on demand after ``demand_idle``, and always after the idle limit.

Floors: under any policy suspend, a group keeps at least ``floors[group]`` GPUs. What a
kernelspec may change of the server's policy: ``policy_overrides.py``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..kernels.record_parts import PolicyNote
from ..placement.demand import Demand

RECLAIM_MODES = ("idle", "on_demand", "both")

POLICY_FIELDS = ("idle_timeout", "cpu_idle_timeout", "gpu_utilization_threshold", "suspend_connected",
                 "checkpoint_interval", "keep_checkpoints", "exempt", "release_mode", "park_timeout", "reclaim",
                 "demand_idle", "rhythm", "rhythm_wait_cost", "rhythm_min", "rhythm_gaps",
                 "warn_before", "resume_on_return", "wait_budget")


@dataclass
class Policy:
    """The effective policy for one kernel."""

    idle_timeout: float = 0.0
    """Seconds idle before a GPU kernel is suspended (modes idle and both); 0 never."""
    gpu_utilization_threshold: int = 5
    suspend_connected: bool = True
    checkpoint_interval: float = 0.0
    keep_checkpoints: int = 5
    exempt: bool = False
    release_mode: str = "park"
    """How a suspend frees the GPU: "park" (CUDA driver, process kept) where it can, else "suspend"."""
    park_timeout: float = 3600.0
    """A kernel parked this long is suspended (its process ended); 0 never."""
    reclaim: str = "idle"
    """One of :data:`RECLAIM_MODES`."""
    cpu_idle_timeout: float = -1.0
    """Seconds idle before a kernel holding no GPU is suspended; below 0: ``idle_timeout``."""
    demand_idle: float = 60.0
    """Seconds idle before a kernel may be suspended for a waiting GPU request (on_demand, both)."""
    rhythm: bool = False
    """Take the idle limit from the kernel's own pauses between cells rather than one timeout."""
    rhythm_wait_cost: float = 350.0
    """With ``rhythm``: idle GPU-seconds one cell kept waiting for a restore is worth. Each kernel's
    limit is the one whose expected cost per pause is least under the model of its pauses
    (:class:`Rhythm`): GPU-seconds held idle, plus this if the pause outlasts the limit."""
    rhythm_min: float = 30.0
    rhythm_gaps: int = 3
    """Pauses seen before the kernel's rhythm is trusted (at least 1); until then its user's
    recent pauses, if as many, else the idle limit."""
    warn_before: float = 0.0
    """Seconds of warning before a policy suspend of a kernel with an open notebook; 0 none."""
    wait_budget: float = 0.0
    """The share of a kernel's cells that may wait for a restore (0.1: one in ten); 0: off. Each
    kernel's idle limit is then the shortest at which the share of its pauses expected to outlast
    it is within the budget (:func:`budget_limit`), learnt from its own pauses, its user's and the
    server's; the same whatever GPUs it holds. It takes the place of ``rhythm``'s price per wait."""
    resume_on_return: bool = True
    """Resume a suspended or parked kernel as soon as its user comes back to its notebook (the
    tab shown, the window focused, typing in it: JupyterLab says so), before a cell is run."""

    def problem(self) -> str | None:
        """What makes this policy unusable (a wrong mode, a negative wait cost), or None."""
        if self.reclaim not in RECLAIM_MODES:
            return f"reclaim must be one of {', '.join(RECLAIM_MODES)}, not {self.reclaim!r}"
        if self.rhythm_wait_cost < 0:
            return f"rhythm_wait_cost must not be negative, not {self.rhythm_wait_cost}"
        if self.rhythm_gaps < 1:
            return f"rhythm_gaps must be at least 1, not {self.rhythm_gaps}"
        if not 0 <= self.wait_budget < 1:
            return f"wait_budget is a share of cells, from 0 (off) to below 1, not {self.wait_budget}"
        return None


@dataclass
class KernelView:
    """What the policy reads of one kernel: from the server's model, or the replay's simulation."""

    kernel_id: str
    state: str = "running"
    busy: bool = False
    """A cell runs."""
    idle_seconds: float | None = None
    """Since the user's last activity; None before any."""
    gpus: int = 0
    gpu_utilization: int = 0
    """The busiest of its GPUs, percent."""
    connections: int = 0
    """Open notebooks (websockets)."""
    suspendable: bool = True
    state_bytes: int = 0
    """What a suspend would write (the size of its last checkpoint; 0 unknown)."""
    group: str = ""
    pool: str = "local"
    """Which waiting GPU requests its GPUs could serve (see :class:`Demand`)."""
    gaps: Sequence[float] = ()
    """Its past pauses between cells, in seconds, oldest first."""
    warned_at: float | None = None
    """When the user was warned of a coming suspend, if since their last activity."""
    parked_for: float | None = None
    checkpoint_age: float | None = None
    """Seconds since its last checkpoint; None: it has none."""
    user_gaps: Sequence[float] = ()
    """Its user's recent pauses over all their kernels: the rhythm until it has its own."""
    server_gaps: Sequence[float] = ()
    """Recent pauses of every user the policy sees (the replay's cluster; a single-user server
    sees its user's only, which ``user_gaps`` has)."""


@dataclass
class Decision:
    kernel_id: str
    action: str | None = None
    """"suspend", "warn", "checkpoint", "convert", or None (kept as it is)."""
    reason: str = ""
    """Why, for the user: "idle 42 min, 2 waiting for a GPU", "kept: group floor"."""
    due_in: float | None = None
    """Seconds until a warned suspend falls due."""
    for_demand: bool = False
    """The suspend serves a waiting GPU request (else: idle limit reached)."""

    @property
    def note(self) -> PolicyNote:
        """What the kernel's record keeps of it."""
        return PolicyNote(self.action, self.reason, self.due_in, self.for_demand)


@dataclass
class Floors:
    """GPUs each group keeps under policy suspends, and what each holds now."""

    floors: Mapping[str, int] = field(default_factory=dict)
    held: Mapping[str, int] = field(default_factory=dict)
    """GPUs held by the group's running kernels (every server's, where the placement can tell)."""

    def keeps(self, group: str, gpus: int, freed: Mapping[str, int]) -> bool:
        """Whether suspending ``gpus`` more of ``group``'s GPUs would take it below its floor."""
        floor = self.floors.get(group, 0)
        return floor > 0 and self.held.get(group, 0) - freed.get(group, 0) - gpus < floor


def duration(seconds: float) -> str:
    """"42 s", "12 min", "3.5 h": short, for reasons shown to users."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank), which must not be empty."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def idle_limit(policy: Policy, kernel: KernelView) -> tuple[float, str] | None:
    """The idle seconds after which ``kernel`` is suspended with nobody waiting, and how that
    limit was set; None: never (mode on_demand, or a timeout of 0)."""
    if policy.reclaim == "on_demand":
        return None
    timeout = policy.idle_timeout if kernel.gpus or policy.cpu_idle_timeout < 0 else policy.cpu_idle_timeout
    if timeout <= 0:
        return None
    if policy.wait_budget > 0:
        found = budget_limit(kernel, policy.wait_budget, policy.rhythm_gaps, policy.rhythm_min, timeout)
        return found if found is not None else (timeout, f"timeout {duration(timeout)}")
    if policy.rhythm:
        enough = max(1, policy.rhythm_gaps)
        own = len(kernel.gaps) >= enough
        pauses = kernel.gaps if own else kernel.user_gaps
        if len(pauses) >= enough:
            limit, longer = rhythm_limit(pauses, max(1, kernel.gpus), policy.rhythm_wait_cost, policy.rhythm_min,
                                         timeout)
            if limit < timeout:
                whose = "its rhythm" if own else "its user's rhythm"
                return limit, f"{whose}: {longer} of the last {len(pauses)} pauses were longer"
    return timeout, f"timeout {duration(timeout)}"


LIMITS = (15.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 450.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0,
          3600.0, 5400.0, 7200.0)
"""The idle limits the rhythm chooses from (seconds), within ``rhythm_min`` and the timeout."""


@dataclass(frozen=True)
class Rhythm:
    """A kernel's pauses between cells as a model: a typical pause with a spread (log-normal:
    users think for about the same time between cells, longer now and then), and a share of
    breaks (a meeting, lunch), which the limit is taken never to cover.

    Fitted on few pauses, a model holds up better than the pauses themselves: the limit that
    would have suited the last few pauses exactly is a poor guess for the next ones.
    """

    typical: float
    """The median pause, seconds."""
    spread: float
    """The standard deviation of the pauses' logarithm."""
    breaks: float
    """The share of pauses that are breaks."""

    BREAK_SHARE = 0.05
    """The share of breaks assumed before a kernel's pauses show their own, worth ``BREAK_WEIGHT`` pauses."""
    BREAK_WEIGHT = 20
    SPREAD_MIN = 0.2
    """Pauses are never taken to be more regular than this (a few similar pauses prove little)."""
    BREAK_AFTER = 3.0
    """A pause longer than the typical one by this many spreads (on the log scale) counts as a break."""

    @classmethod
    def of(cls, gaps: Sequence[float]) -> Rhythm:
        """The model of these pauses (at least one): median and quartiles of their logarithms,
        which a few breaks among many pauses hardly move (among three, one break widens the
        spread, and the limit is longer: the model is unsure yet)."""
        logs = [math.log(max(g, 1.0)) for g in gaps]
        middle = statistics.median(logs)
        spread = cls.SPREAD_MIN
        if len(logs) >= 2:
            low, _, high = statistics.quantiles(logs, n=4, method="inclusive")
            spread = max(spread, (high - low) / 1.349)  # the quartiles of a normal distribution are 1.349 sigma apart
        long = sum(1 for x in logs if x > middle + cls.BREAK_AFTER * spread)
        breaks = (long + cls.BREAK_SHARE * cls.BREAK_WEIGHT) / (len(logs) + cls.BREAK_WEIGHT)
        return cls(math.exp(middle), spread, breaks)

    def outlasting(self, limit: float) -> float:
        """The share of pauses expected to last longer than ``limit``: breaks, and the long end
        of the typical ones."""
        z = (math.log(limit) - math.log(self.typical)) / self.spread
        return self.breaks + (1.0 - self.breaks) * (1.0 - _normal_cdf(z))

    def expected_cost(self, limit: float, gpus: int, wait_cost: float) -> float:
        """One pause's expected cost under ``limit``: ``gpus`` times the seconds held idle (the
        pause, or the limit if it is longer), plus ``wait_cost`` if the pause outlasts the limit."""
        z = (math.log(limit) - math.log(self.typical)) / self.spread
        outlasts = 1.0 - _normal_cdf(z)
        held = self.typical * math.exp(self.spread ** 2 / 2) * _normal_cdf(z - self.spread) + limit * outlasts
        pause = held * gpus + wait_cost * outlasts
        return (1.0 - self.breaks) * pause + self.breaks * (limit * gpus + wait_cost)


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def rhythm_limit(gaps: Sequence[float], gpus: int, wait_cost: float, shortest: float,
                 timeout: float) -> tuple[float, int]:
    """The idle limit with the least expected cost per pause under the model of these pauses
    (:class:`Rhythm`), and how many of them were longer than it.

    A user who pauses 30 s to 3 min between cells keeps the kernel through those pauses and
    loses it within minutes of leaving; pauses that cost more GPU-seconds to hold than a wait is
    worth are given up early. More GPUs make idling dearer, so a shorter limit. Ties go to the
    shorter limit.
    """
    rhythm = Rhythm.of(gaps)
    candidates = [x for x in LIMITS if shortest <= x < timeout] + [timeout]
    limit = min(candidates, key=lambda x: (round(rhythm.expected_cost(x, gpus, wait_cost), 9), x))
    return limit, sum(1 for g in gaps if g > limit)


def budget_limit(kernel: KernelView, budget: float, enough: int, shortest: float,
                 timeout: float) -> tuple[float, str] | None:
    """The shortest idle limit (of :data:`LIMITS`, from ``shortest`` to ``timeout``) at which
    the share of the kernel's pauses expected to outlast it is within ``budget``, under the model
    of its pauses (:class:`Rhythm`: a typical pause with a spread, and a share of breaks); and
    why. The pauses are its own once it has ``enough``, else its user's, else the server's;
    None: none seen yet. The GPUs it holds play no part: no kernel waits more often for holding
    more of them. A share of breaks above the budget leaves the timeout."""
    sources = ((kernel.gaps, "its"), (kernel.user_gaps, "its user's"), (kernel.server_gaps, "the server's"))
    found = next(((pauses, whose) for pauses, whose in sources if len(pauses) >= enough), None)
    if found is None:
        return None
    pauses, whose = found
    rhythm = Rhythm.of(pauses)
    for limit in [x for x in LIMITS if shortest <= x < timeout]:
        share = rhythm.outlasting(limit)
        if share <= budget:
            return limit, f"wait budget {budget:.0%}: {share:.0%} of {whose} pauses are expected to outlast it"
    return timeout, f"wait budget {budget:.0%}: {rhythm.breaks:.0%} of {whose} pauses are breaks; the timeout"


def _kept(kernel: KernelView, policy: Policy) -> str | None:
    """Why ``kernel`` may not be suspended by policy at all, or None."""
    if policy.exempt:
        return "kept: exempt"
    if not kernel.suspendable:
        return "kept: not a checkpointable kernel"
    if kernel.busy:
        return "kept: a cell runs"
    if kernel.gpu_utilization > policy.gpu_utilization_threshold:
        return f"kept: its GPU is busy ({kernel.gpu_utilization}%)"
    if not policy.suspend_connected and kernel.connections:
        return "kept: a notebook is open (suspend_connected is off)"
    if kernel.idle_seconds is None:
        return "kept: no activity yet"
    return None


def _maybe_warned(policy: Policy, kernel: KernelView, decision: Decision, now: float) -> Decision:
    """A suspend of a kernel with an open notebook is announced ``warn_before`` ahead."""
    if decision.action != "suspend" or policy.warn_before <= 0 or not kernel.connections:
        return decision
    if kernel.warned_at is None:
        return Decision(kernel.kernel_id, "warn", decision.reason, policy.warn_before, decision.for_demand)
    left = kernel.warned_at + policy.warn_before - now
    if left > 0:
        return Decision(kernel.kernel_id, None, f"warned: suspend in {duration(left)}; {decision.reason}", left,
                        decision.for_demand)
    return decision


def decide(policy: Policy, kernel: KernelView, now: float) -> Decision:
    """The decision for one kernel with nobody waiting for a GPU: suspend at the idle limit
    (warned first where a notebook is open), checkpoint, convert a long-parked one, or keep."""
    kid = kernel.kernel_id
    if kernel.state == "parked":
        if policy.park_timeout > 0 and kernel.parked_for is not None and kernel.parked_for >= policy.park_timeout:
            return Decision(kid, "convert", f"parked {duration(kernel.parked_for)}, longer than park_timeout")
        return Decision(kid, None, "parked")
    if kernel.state != "running":
        return Decision(kid, None, kernel.state)
    kept = _kept(kernel, policy)
    limit = idle_limit(policy, kernel)
    idle = kernel.idle_seconds
    if kept is None and limit is not None and idle is not None:
        seconds, how = limit
        if idle >= seconds - (policy.warn_before if kernel.connections else 0):
            reason = f"idle {duration(idle)} ({how})"
            warned = _maybe_warned(policy, kernel, Decision(kid, "suspend", reason), now)
            if warned.action == "warn" or idle >= seconds:
                return warned
    checkpoint = _checkpoint_due(policy, kernel)
    if checkpoint is not None:
        return checkpoint
    if kept is not None:
        return Decision(kid, None, kept)
    if limit is None:
        return Decision(kid, None, f"kept: idle {duration(idle or 0)}, nobody waits for a GPU")
    return Decision(kid, None, f"kept: idle {duration(idle or 0)} of {duration(limit[0])} ({limit[1]})")


def _checkpoint_due(policy: Policy, kernel: KernelView) -> Decision | None:
    age = kernel.checkpoint_age
    if policy.checkpoint_interval <= 0 or (age is not None and age < policy.checkpoint_interval):
        return None
    if age is None or kernel.idle_seconds is None or kernel.idle_seconds < age:  # something ran since
        return Decision(kernel.kernel_id, "checkpoint", "periodic checkpoint")
    return None


def cost_order(kernel: KernelView) -> tuple[float, int, int]:
    """Cheapest suspend first: longest idle (by the minute), least state to write, most GPUs freed."""
    return (-math.floor((kernel.idle_seconds or 0) / 60), kernel.state_bytes, -kernel.gpus)


def plan(policy_of: Callable[[str], Policy], kernels: Sequence[KernelView], demand: Mapping[str, Demand],
         floors: Floors, now: float) -> list[Decision]:
    """A decision for every kernel: :func:`decide`'s, then suspends for the waiting GPU
    requests of each pool, cheapest first and no more than needed, and floors over both."""
    decisions = {k.kernel_id: decide(policy_of(k.kernel_id), k, now) for k in kernels}
    freed: dict[str, int] = {}
    by_pool: dict[str, int] = {}
    for k in kernels:
        if k.state == "checkpointing":  # a suspend under way frees its GPUs for who waits
            by_pool[k.pool] = by_pool.get(k.pool, 0) + k.gpus
    for k in kernels:
        d = decisions[k.kernel_id]
        if d.action in ("suspend", "warn") and floors.keeps(k.group, k.gpus, freed):
            decisions[k.kernel_id] = Decision(k.kernel_id, None, _floor_reason(k, floors))
        elif d.action == "suspend":
            freed[k.group] = freed.get(k.group, 0) + k.gpus
            by_pool[k.pool] = by_pool.get(k.pool, 0) + k.gpus
    for pool, wanted in demand.items():
        if wanted.gpus <= 0:
            continue
        need = wanted.gpus - by_pool.get(pool, 0)
        waiting = _waiting(wanted)
        candidates = [k for k in kernels if k.pool == pool and k.gpus > 0
                      and decisions[k.kernel_id].action is None and k.state == "running"]
        for k in sorted(candidates, key=cost_order):
            policy = policy_of(k.kernel_id)
            kept = _kept(k, policy)
            if policy.reclaim == "idle":
                continue
            if kept is not None:
                decisions[k.kernel_id] = Decision(k.kernel_id, None, f"{kept}; {waiting}")
                continue
            idle = k.idle_seconds or 0
            if idle < policy.demand_idle:
                decisions[k.kernel_id] = Decision(
                    k.kernel_id, None, f"kept: idle {duration(idle)}, under {duration(policy.demand_idle)}; {waiting}")
                continue
            if need <= 0:
                decisions[k.kernel_id] = Decision(k.kernel_id, None, f"kept: enough GPUs are being freed; {waiting}")
                continue
            if floors.keeps(k.group, k.gpus, freed):
                decisions[k.kernel_id] = Decision(k.kernel_id, None, _floor_reason(k, floors))
                continue
            suspend = Decision(k.kernel_id, "suspend", f"idle {duration(idle)}, {waiting}", for_demand=True)
            decisions[k.kernel_id] = _maybe_warned(policy, k, suspend, now)
            freed[k.group] = freed.get(k.group, 0) + k.gpus
            need -= k.gpus
    return [decisions[k.kernel_id] for k in kernels]


def _waiting(demand: Demand) -> str:
    who = len(demand.waiters) or 1
    return f"{who} waiting for a GPU" if who == 1 else f"{who} waiting for GPUs"


def _floor_reason(kernel: KernelView, floors: Floors) -> str:
    group = kernel.group or "this group"
    return f"kept: group floor ({group} keeps {floors.floors.get(kernel.group, 0)} GPU(s))"


def now() -> float:
    return time.time()
