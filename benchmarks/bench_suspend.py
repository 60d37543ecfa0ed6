"""Suspend and resume of a kernel through a real jupyter_server, timed end to end.

Run: ``python benchmarks/bench_suspend.py [--gb 1.0] [--runs 3]``. A server with the
extension is started in its own process (the same helper the tests use), a kernel holding
``--gb`` of numpy arrays is suspended and resumed ``--runs`` times through the REST API
(``?wait=1``), and the medians are printed: the suspend (checkpoint, process ended) and
the resume (process started, checkpoint restored, variables checked).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from live_server import KERNEL_NAME, running_server  # noqa: E402  (the tests' server helper)

from jupyter_gpuckpt.kernelspec import kernelspec_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="GB of arrays the kernel holds")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        base = Path(tmp)
        spec = base / "data" / "kernels" / KERNEL_NAME
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps(kernelspec_json("bench")))
        with running_server(base) as server:
            kernel_id = server.start_kernel()
            n = int(args.gb * 1e9 / 8 / 8)
            server.run(kernel_id, "import numpy as np\n"
                                  f"arrays = [np.random.default_rng(i).random({n}) for i in range(8)]\n"
                                  "check = float(sum(a.sum() for a in arrays))")
            expected = server.run(kernel_id, "print(check)").strip()
            suspends, resumes = [], []
            for _ in range(args.runs):
                started = time.perf_counter()
                server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
                suspends.append(time.perf_counter() - started)
                started = time.perf_counter()
                server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
                resumes.append(time.perf_counter() - started)
                assert server.run(kernel_id, "print(float(sum(a.sum() for a in arrays)))").strip() == expected
    size = 8 * n * 8 / 1e9
    print(f"kernel holding {size:.2f} GB of numpy arrays, {args.runs} runs")
    print(f"{'operation':<34}{'median s':>10}{'min s':>8}{'max s':>8}{'GB/s':>8}")
    rows = (("suspend, first (all data new)", suspends[:1]), ("suspend, again (data unchanged)", suspends[1:]),
            ("resume", resumes))
    for name, times in rows:
        if times:
            median = statistics.median(times)
            print(f"{name:<34}{median:>10.2f}{min(times):>8.2f}{max(times):>8.2f}{size / median:>8.2f}")
    print("suspend: checkpoint written, process ended; resume: new process, checkpoint read and verified,"
          " variables restored (each timed from the REST request to its answer)")


if __name__ == "__main__":
    main()
