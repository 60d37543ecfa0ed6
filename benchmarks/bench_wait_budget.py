"""The wait budget against fixed timeouts, the rhythm and the oracle, on every kind of trace the
generator makes (several seeds each): the share of cells that waited for a restore, and the idle
GPU-hours returned as a share of what the oracle returns at the same share of waits
(``replay.simulator.oracle_at_waits``: it knows every pause and spends the same number of waits
on the pauses worth most).

    python benchmarks/bench_wait_budget.py [--sessions 300] [--seeds 3] [--budget 0.1] [TRACE ...]

Traces given as files (NotebookOS templates, CSV) are replayed too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_gpuckpt.policy.decisions import Policy  # noqa: E402
from jupyter_gpuckpt.replay import CostModel, Setting, Trace, contended_gpus, generate, read_trace, simulate  # noqa: E402
from jupyter_gpuckpt.replay.generator import SHAPES  # noqa: E402
from jupyter_gpuckpt.replay.simulator import oracle_at_waits  # noqa: E402


def settings(budget: float) -> list[Setting]:
    return [Setting("idle 10m", Policy(idle_timeout=600.0)), Setting("idle 30m", Policy(idle_timeout=1800.0)),
            Setting("rhythm", Policy(idle_timeout=600.0, rhythm=True)),
            Setting(f"budget {budget:.0%}", Policy(idle_timeout=1800.0, wait_budget=budget))]


def rows(trace: Trace, budget: float, costs: CostModel) -> list[str]:
    gpus = contended_gpus(trace)
    cells = []
    for setting in settings(budget):
        f = simulate(trace, setting, gpus, costs)
        oracle = oracle_at_waits(trace, costs, f.cells_waited)
        cells.append(f"{f.cells_waited_share:7.1%} {f.gpu_hours_idle_returned / oracle:7.1%}")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*")
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.10)
    args = parser.parse_args()
    costs = CostModel()
    names = [s.name for s in settings(args.budget)]
    print("trace".ljust(34) + "".join(f"{n:>15}" for n in names))
    print(" " * 34 + "".join(f"{'waited':>7} {'oracle':>7}" for _ in names))
    traces = [generate(args.sessions, seed=seed, shape=shape) for shape in SHAPES for seed in range(args.seeds)]
    traces += [read_trace(path) for path in args.traces]
    for trace in traces:
        print(trace.name[:33].ljust(34) + "".join(f"{c:>15}" for c in rows(trace, args.budget, costs)), flush=True)
    print(f"\nwaited: the share of cells that waited for a restore; of oracle: idle GPU-hours returned, as a share of "
          f"what the oracle returns at that share of waits. Target for the budget: waited <= {args.budget:.0%}, "
          "of oracle >= 90%.")


if __name__ == "__main__":
    main()
