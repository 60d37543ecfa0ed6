"""The policy's decisions, case by case: one kernel (decide), and kernels competing for
waiting GPU requests (plan: order, floors, warnings). The server's loop: test_server_policy.py
and test_server_reclaim.py; the replay runs the same functions: test_replay.py."""

from __future__ import annotations

import math

import pytest

from jupyter_gpuckpt.policy.decisions import (
    LIMITS,
    Decision,
    Demand,
    Floors,
    KernelView,
    Policy,
    Rhythm,
    budget_limit,
    decide,
    idle_limit,
    plan,
    rhythm_limit,
)
from jupyter_gpuckpt.policy.overrides import overridden

NOW = 10_000.0
MIN = 60.0


def _policy(**changes) -> Policy:
    return Policy(**{**Policy(idle_timeout=600).__dict__, **changes})


def _kernel(**changes) -> KernelView:
    base = KernelView("k", idle_seconds=900.0, gpus=1)
    return KernelView(**{**base.__dict__, **changes})


@pytest.mark.parametrize(("policy", "kernel", "expected"), [
    (_policy(), _kernel(), "suspend"),
    (_policy(), _kernel(idle_seconds=30.0), None),
    (_policy(idle_timeout=0), _kernel(), None),
    (_policy(), _kernel(busy=True), None),
    (_policy(exempt=True), _kernel(), None),
    (_policy(), _kernel(state="suspended"), None),
    (_policy(), _kernel(suspendable=False), None),
    (_policy(), _kernel(gpu_utilization=80), None),
    (_policy(), _kernel(gpu_utilization=2), "suspend"),
    (_policy(suspend_connected=False), _kernel(connections=1), None),
    (_policy(suspend_connected=False), _kernel(connections=0), "suspend"),
    (_policy(reclaim="on_demand"), _kernel(idle_seconds=10 ** 6), None),
    (_policy(reclaim="both"), _kernel(), "suspend"),
    # GPU and CPU kernels have their own timeouts
    (_policy(cpu_idle_timeout=3600), _kernel(gpus=0), None),
    (_policy(cpu_idle_timeout=60), _kernel(gpus=0, idle_seconds=120.0), "suspend"),
    (_policy(cpu_idle_timeout=0), _kernel(gpus=0), None),
    (_policy(cpu_idle_timeout=-1), _kernel(gpus=0), "suspend"),
    (_policy(cpu_idle_timeout=3600), _kernel(gpus=1), "suspend"),
    (_policy(idle_timeout=0, checkpoint_interval=60), _kernel(idle_seconds=5.0), "checkpoint"),
    (_policy(idle_timeout=0, checkpoint_interval=60), _kernel(idle_seconds=5.0, checkpoint_age=30.0), None),
    (_policy(idle_timeout=0, checkpoint_interval=60), _kernel(idle_seconds=5.0, checkpoint_age=120.0), "checkpoint"),
    # nothing ran since the last checkpoint: another one would hold the same state
    (_policy(idle_timeout=0, checkpoint_interval=60), _kernel(idle_seconds=500.0, checkpoint_age=120.0), None),
    (_policy(park_timeout=600), _kernel(state="parked", parked_for=601.0), "convert"),
    (_policy(park_timeout=600), _kernel(state="parked", parked_for=10.0), None),
    (_policy(park_timeout=0), _kernel(state="parked", parked_for=10.0 ** 6), None),
])
def test_decide(policy, kernel, expected):
    assert decide(policy, kernel, NOW).action == expected


def test_every_decision_says_why():
    assert decide(_policy(), _kernel(), NOW).reason == "idle 15 min (timeout 10 min)"
    assert decide(_policy(), _kernel(idle_seconds=180.0), NOW).reason == "kept: idle 3 min of 10 min (timeout 10 min)"
    assert decide(_policy(), _kernel(busy=True), NOW).reason == "kept: a cell runs"
    assert decide(_policy(), _kernel(gpu_utilization=73), NOW).reason == "kept: its GPU is busy (73%)"
    assert decide(_policy(reclaim="on_demand"), _kernel(), NOW).reason == "kept: idle 15 min, nobody waits for a GPU"


def test_the_rhythm_sets_each_kernels_limit_from_its_own_pauses():
    policy = _policy(idle_timeout=3600, rhythm=True, rhythm_wait_cost=400, rhythm_min=30, rhythm_gaps=3)
    # quick cells, and one long break: 60 s holds every short pause and gives up the break
    quick = _kernel(gaps=[20, 30, 25, 22, 28, 3000])
    # a few minutes of thought between cells, each cheaper to hold than a wait: kept through them
    slow = _kernel(gaps=[150, 200, 120, 180, 160])
    # pauses of ten minutes: each costs more to hold than a 400 GPU-second wait: suspended early
    long = _kernel(gaps=[500, 600, 420, 550, 480])
    assert idle_limit(policy, quick) == (60, "its rhythm: 1 of the last 6 pauses were longer")
    assert idle_limit(policy, slow) == (300, "its rhythm: 0 of the last 5 pauses were longer")
    assert idle_limit(policy, long) == (30, "its rhythm: 5 of the last 5 pauses were longer")
    assert idle_limit(policy, _kernel(gaps=[20, 3000])) == (3600, "timeout 60 min")  # too few pauses yet
    # a kernel holding four GPUs costs four times as much to keep idle: a shorter limit
    four = _kernel(gaps=[100, 120, 90, 3000], gpus=4)
    one = _kernel(gaps=[100, 120, 90, 3000], gpus=1)
    assert idle_limit(policy, four)[0] < idle_limit(policy, one)[0]
    assert decide(policy, _kernel(gaps=quick.gaps, idle_seconds=61.0), NOW).action == "suspend"
    assert decide(policy, _kernel(gaps=slow.gaps, idle_seconds=200.0), NOW).action is None


def test_a_new_kernel_takes_its_users_rhythm_until_it_has_its_own():
    policy = _policy(idle_timeout=3600, rhythm=True, rhythm_wait_cost=400, rhythm_min=30, rhythm_gaps=3)
    users = [20.0, 30.0, 25.0, 22.0, 28.0, 3000.0]
    assert idle_limit(policy, _kernel(gaps=[20], user_gaps=users)) == (
        60, "its user's rhythm: 1 of the last 6 pauses were longer")
    assert idle_limit(policy, _kernel(gaps=[150, 200, 120], user_gaps=users))[0] == 300  # its own, once it has them
    assert idle_limit(policy, _kernel(gaps=[20], user_gaps=[20, 30])) == (3600, "timeout 60 min")


def test_no_pauses_never_make_a_rhythm():
    """rhythm_gaps below 1 is refused (a kernelspec's too), and could not break a pass anyway."""
    assert Policy(rhythm_gaps=0).problem() == "rhythm_gaps must be at least 1, not 0"
    policy = _policy(idle_timeout=600, rhythm=True, rhythm_gaps=0)
    assert idle_limit(policy, _kernel(gaps=[], user_gaps=[])) == (600, "timeout 10 min")
    assert plan(lambda _: policy, [_kernel(gaps=[], idle_seconds=700.0)], {}, Floors(), NOW)[0].action == "suspend"


def test_the_rhythm_model_of_pauses():
    # the breaks do not move the typical pause or its spread; their share starts from 5% (worth 20 pauses)
    rhythm = Rhythm.of([100.0] * 10 + [5000.0])
    assert (round(rhythm.typical, 6), rhythm.spread) == (100.0, Rhythm.SPREAD_MIN)
    assert rhythm.breaks == (1 + 0.05 * 20) / (11 + 20)
    assert Rhythm.of([100.0] * 40).breaks == 0.05 * 20 / 60
    spread = Rhythm.of([10.0, 100.0, 1000.0, 100.0, 100.0]).spread  # log quartiles (inclusive) ln 100 +- 0
    assert spread == Rhythm.SPREAD_MIN
    assert math.isclose(Rhythm.of([10.0, 10.0, 1000.0, 1000.0]).spread, (math.log(1000) - math.log(10)) / 1.349)


def test_the_expected_cost_of_a_pause_by_hand():
    steady = Rhythm(typical=100.0, spread=0.2, breaks=0.0)
    # a limit far beyond every pause: hold the mean pause, 100 * e^(0.2^2 / 2), and never wait
    assert math.isclose(steady.expected_cost(10_000.0, 2, 400.0), 2 * 100 * math.exp(0.02), rel_tol=1e-9)
    # a limit far below: hold the limit, and always wait
    assert math.isclose(steady.expected_cost(1.0, 2, 400.0), 2 * 1.0 + 400.0, rel_tol=1e-6)
    # at the typical pause, half the pauses outlast the limit
    assert math.isclose(steady.expected_cost(100.0, 1, 400.0) - steady.expected_cost(100.0, 1, 0.0), 200.0)
    # a break costs the limit held and a wait, whatever the limit
    breaks = Rhythm(typical=100.0, spread=0.2, breaks=0.25)
    assert math.isclose(breaks.expected_cost(10_000.0, 1, 400.0),
                        0.75 * 100 * math.exp(0.02) + 0.25 * (10_000.0 + 400.0), rel_tol=1e-9)


def test_the_rhythm_limit_is_the_least_expected_cost():
    gaps = [100.0, 110.0, 90.0, 105.0, 95.0]
    limit, longer = rhythm_limit(gaps, 1, 400.0, 15.0, 3600.0)
    rhythm = Rhythm.of(gaps)
    costs = {x: rhythm.expected_cost(x, 1, 400.0) for x in [*LIMITS, 3600.0] if 15.0 <= x <= 3600.0}
    assert limit == min(costs, key=costs.get) and longer == 0
    # a wait worth little: give up at once; worth much: hold every typical pause
    assert rhythm_limit(gaps, 1, 1.0, 15.0, 3600.0) == (15.0, 5)
    assert rhythm_limit(gaps, 1, 5000.0, 15.0, 3600.0)[0] >= 180.0


def test_an_open_notebook_is_warned_before_the_suspend_and_keep_running_restarts_the_clock():
    policy = _policy(idle_timeout=600, warn_before=120)
    early = decide(policy, _kernel(idle_seconds=400.0, connections=1), NOW)
    assert early.action is None
    warn = decide(policy, _kernel(idle_seconds=500.0, connections=1), NOW)
    assert (warn.action, warn.due_in, warn.reason) == ("warn", 120, "idle 8 min (timeout 10 min)")
    pending = decide(policy, _kernel(idle_seconds=610.0, connections=1, warned_at=NOW - 100), NOW)
    assert pending.action is None and pending.reason.startswith("warned: suspend in 20 s")
    due = decide(policy, _kernel(idle_seconds=620.0, connections=1, warned_at=NOW - 120), NOW)
    assert due.action == "suspend"
    # nobody to warn: the suspend comes at the limit
    assert decide(policy, _kernel(idle_seconds=600.0), NOW).action == "suspend"
    # "Keep running" is activity: the idle time starts again and the warning is void
    assert decide(policy, _kernel(idle_seconds=0.0, connections=1), NOW).action is None


def _pool(*kernels: KernelView, demand: int = 1, policy: Policy | None = None,
          floors: Floors | None = None) -> dict[str, Decision]:
    chosen = policy or _policy(reclaim="on_demand", demand_idle=60)
    waiting = Demand(demand, [f"kernel w{i}" for i in range(demand)])
    decisions = plan(lambda _: chosen, list(kernels), {"local": waiting}, floors or Floors(), NOW)
    return {d.kernel_id: d for d in decisions}


def test_on_demand_suspends_the_cheapest_and_never_more_than_needed():
    got = _pool(KernelView("short", idle_seconds=10 * MIN, gpus=1, state_bytes=10),
                KernelView("long", idle_seconds=50 * MIN, gpus=1, state_bytes=10 ** 9),
                KernelView("long-light", idle_seconds=50 * MIN + 20, gpus=1, state_bytes=10),
                KernelView("fresh", idle_seconds=30.0, gpus=1))
    # longest idle first (by the minute), then the least state to write: one GPU wanted, one freed
    assert [k for k, d in got.items() if d.action == "suspend"] == ["long-light"]
    assert got["long-light"].reason == "idle 50 min, 1 waiting for a GPU"
    assert got["long-light"].for_demand
    assert got["long"].reason == "kept: enough GPUs are being freed; 1 waiting for a GPU"
    assert got["fresh"].reason == "kept: idle 30 s, under 60 s; 1 waiting for a GPU"


def test_on_demand_prefers_the_kernel_that_frees_more_gpus_and_counts_suspends_under_way():
    got = _pool(KernelView("one", idle_seconds=20 * MIN, gpus=1), KernelView("two", idle_seconds=20 * MIN, gpus=2),
                demand=2)
    assert [k for k, d in got.items() if d.action == "suspend"] == ["two"]
    got = _pool(KernelView("leaving", state="checkpointing", gpus=1), KernelView("idle", idle_seconds=20 * MIN, gpus=1))
    assert got["idle"].action is None  # the suspend under way serves the one waiting


def test_on_demand_does_nothing_while_nobody_waits():
    got = _pool(KernelView("idle", idle_seconds=10 ** 5, gpus=1), demand=0)
    assert got["idle"].action is None
    assert got["idle"].reason == "kept: idle 27.8 h, nobody waits for a GPU"


def test_group_floors_keep_gpus_under_demand_and_idle_limits():
    floors = Floors({"vision": 1}, {"vision": 2, "nlp": 1})
    got = _pool(KernelView("v1", idle_seconds=40 * MIN, gpus=1, group="vision"),
                KernelView("v2", idle_seconds=30 * MIN, gpus=1, group="vision"),
                KernelView("n1", idle_seconds=20 * MIN, gpus=1, group="nlp"), demand=3, floors=floors)
    assert {k: d.action for k, d in got.items()} == {"v1": "suspend", "v2": None, "n1": "suspend"}
    assert got["v2"].reason == "kept: group floor (vision keeps 1 GPU(s))"
    idle = plan(lambda _: _policy(), [KernelView("v", idle_seconds=10 ** 4, gpus=1, group="vision")], {},
                Floors({"vision": 1}, {"vision": 1}), NOW)
    assert (idle[0].action, idle[0].reason) == (None, "kept: group floor (vision keeps 1 GPU(s))")


def test_idle_mode_ignores_demand_and_both_uses_it_after_demand_idle():
    kernel = KernelView("k", idle_seconds=5 * MIN, gpus=1)
    assert _pool(kernel, policy=_policy(reclaim="idle", idle_timeout=3600))["k"].action is None
    assert _pool(kernel, policy=_policy(reclaim="both", idle_timeout=3600, demand_idle=120))["k"].action == "suspend"
    assert _pool(kernel, policy=_policy(reclaim="both", idle_timeout=3600, demand_idle=600))["k"].action is None


def test_a_demand_suspend_of_an_open_notebook_is_warned_first():
    policy = _policy(reclaim="on_demand", demand_idle=60, warn_before=30)
    got = _pool(KernelView("k", idle_seconds=10 * MIN, gpus=1, connections=1), policy=policy)
    assert (got["k"].action, got["k"].due_in, got["k"].for_demand) == ("warn", 30, True)


def test_kernelspec_metadata_overrides_only_known_settings():
    policy = overridden(_policy(), {"gpuckpt": {"idle_timeout": 30, "suspend_connected": False, "bogus": 1}})[0]
    assert (policy.idle_timeout, policy.suspend_connected, policy.checkpoint_interval) == (30, False, 0)


REGULAR = [60.0, 90.0, 45.0, 120.0, 75.0, 60.0, 100.0, 80.0, 3600.0, 70.0]  # a break among short pauses


@pytest.mark.parametrize("budget", [0.08, 0.10, 0.20])
def test_the_wait_budget_limit_is_the_shortest_whose_expected_waits_are_within_it(budget):
    kernel = KernelView("k", idle_seconds=0.0, gpus=1, gaps=REGULAR)
    limit, why = budget_limit(kernel, budget, 3, 30.0, 3600.0)
    rhythm = Rhythm.of(REGULAR)
    assert rhythm.outlasting(limit) <= budget < rhythm.outlasting(max(x for x in LIMITS if x < limit))
    assert why.startswith(f"wait budget {budget:.0%}") and "its pauses" in why


def test_holding_more_gpus_never_makes_the_wait_budget_more_aggressive():
    """The old rhythm priced a wait against GPU-seconds, so an 8-GPU kernel was suspended almost
    at once; under a wait budget the GPUs a kernel holds change nothing."""
    policy = Policy(idle_timeout=3600.0, wait_budget=0.10)
    limits = {gpus: idle_limit(policy, KernelView("k", idle_seconds=0.0, gpus=gpus, gaps=REGULAR))[0]
              for gpus in (1, 2, 8)}
    assert len(set(limits.values())) == 1, limits
    priced = {gpus: idle_limit(Policy(idle_timeout=3600.0, rhythm=True),
                               KernelView("k", idle_seconds=0.0, gpus=gpus, gaps=REGULAR))[0] for gpus in (1, 8)}
    assert priced[8] < priced[1]  # what the budget replaces


def test_the_wait_budget_learns_from_the_kernel_then_its_user_then_the_server():
    policy = Policy(idle_timeout=3600.0, wait_budget=0.10, rhythm_gaps=3)
    slow = [900.0, 1200.0, 1000.0, 1100.0]
    by_server = idle_limit(policy, KernelView("k", idle_seconds=0.0, gaps=[10.0], server_gaps=slow))
    by_user = idle_limit(policy, KernelView("k", idle_seconds=0.0, gaps=[10.0], user_gaps=REGULAR, server_gaps=slow))
    own = idle_limit(policy, KernelView("k", idle_seconds=0.0, gaps=REGULAR, user_gaps=slow, server_gaps=slow))
    assert "the server's" in by_server[1] and "its user's" in by_user[1] and "its pauses" in own[1]
    assert by_server[0] > by_user[0] == own[0]
    assert idle_limit(policy, KernelView("k", idle_seconds=0.0)) == (3600.0, "timeout 60 min")  # nothing seen yet


def test_breaks_more_frequent_than_the_budget_leave_the_timeout():
    breaks = [60.0, 5400.0, 80.0, 6000.0, 70.0, 7000.0, 90.0, 5000.0]  # half of the pauses are breaks
    limit, why = budget_limit(KernelView("k", gaps=breaks), 0.10, 3, 30.0, 1800.0)
    assert limit == 1800.0 and "are breaks; the timeout" in why
