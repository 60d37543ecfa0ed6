"""The restore report counts three kinds: restored, rebuilt (a live part started again: a
pool's workers, a logger's file handler, a cluster) and not restored (not saved, lost here, or
a live part that could not be started again), each with the reason and the cells that make
it again. Nothing whose set-up failed is called restored: it leaves the namespace, with every
other variable that holds it, and rebuild makes it again.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict
from typing import Any

from kernel_processes import Kernel, KernelFactory

from kernel_hooks.report import RestoreReport, SkippedVariable

LIVE = """
import concurrent.futures as cf, logging, os
os.makedirs("logs", exist_ok=True)
pool = cf.ThreadPoolExecutor(2)
log = logging.getLogger("train")
log.setLevel(logging.INFO)
log.addHandler(logging.FileHandler("logs/train.log"))
handlers = log.handlers
same_pool = pool
def square(n):
    return pool.submit(pow, n, 2).result()
data = list(range(5))
"""  # cell 2
REPORT = "import json, kernel_hooks\nprint(json.dumps(kernel_hooks.current().last_restore.to_json()))"


def _report(kernel: Kernel) -> dict[str, Any]:
    return dict(json.loads(kernel.ok(REPORT)))


def test_the_text_counts_each_kind_and_the_json_adds_to_its_fields() -> None:
    skipped = SkippedVariable("gen", "generator", "TypeError: cannot pickle 'generator' object", [3])
    lost = SkippedVariable("fig", "bokeh.Figure", "could not be rebuilt: AttributeError: x", [4])
    failed = SkippedVariable("client", "distributed.client.Client", "dask client of tcp://10.0.0.5:8786 could not "
                             "be set up again: ConnectionError: the scheduler does not answer", [2])
    report = RestoreReport(id="c1", restored=["pool", "loader", "x"], nbytes=2048, skipped=[skipped], lost=[lost],
                           seconds=0.3, started_again=["pool", "loader"], not_set_up=[failed])
    assert str(report).splitlines() == [
        "Restored 3 variables (2 rebuilt: pool, loader; 2.0 KiB) from checkpoint c1 in 0.3 s; 3 not restored.",
        "Not restored, they could not be saved (1):",
        "  gen (generator): TypeError: cannot pickle 'generator' object; re-run cell(s) 3",
        "Not restored, they could not be rebuilt (1):",
        "  fig (bokeh.Figure): could not be rebuilt: AttributeError: x; re-run cell(s) 4",
        "Not restored, they could not be set up again (1):",
        "  client (distributed.client.Client): dask client of tcp://10.0.0.5:8786 could not be set up again: "
        "ConnectionError: the scheduler does not answer; re-run cell(s) 2",
        "Cells to re-run: 2, 3, 4",
    ]
    data = json.loads(json.dumps(report.to_json()))
    # what the server and JupyterLab read keeps its meaning
    assert data["restored"] == ["pool", "loader", "x"] and data["cells_to_rerun"] == [2, 3, 4]
    assert data["skipped"] == [asdict(skipped)] and data["lost"] == [asdict(lost)] and data["text"] == str(report)
    assert data["started_again"] == ["pool", "loader"] and data["not_set_up"] == [asdict(failed)]
    assert data["counts"] == {"restored": 3, "rebuilt": 2, "not_restored": 3}

    many = RestoreReport(id="c2", restored=[f"w{i}" for i in range(10)], nbytes=0, skipped=[],
                         started_again=[f"w{i}" for i in range(10)])
    assert str(many) == ("Restored 10 variables (10 rebuilt: w0, w1, w2, w3, w4, w5, w6, w7 and 2 more; 0 B) "
                         "from checkpoint c2 in 0.0 s.")
    plain = RestoreReport(id="c3", restored=["x"], nbytes=0, skipped=[])
    assert str(plain) == "Restored 1 variable (0 B) from checkpoint c3 in 0.0 s."


def test_live_parts_started_again_count_as_rebuilt_for_the_variable_they_came_back_in(
        kernels: KernelFactory, tmp_path: Any) -> None:
    (tmp_path / "vanishing.py").write_text("class Thing:\n    pass\n")
    k = kernels.start()
    k.ok(LIVE)
    whole = k.save()
    k.ok(f"import sys\nsys.path.append({str(tmp_path)!r})\nfrom vanishing import Thing\n"
         "things = [Thing(), cf.ThreadPoolExecutor(1)]")  # cell 4
    isolated = k.save()
    (tmp_path / "vanishing.py").unlink()

    fresh = kernels.start()
    text = fresh.ok(f"%gpuckpt restore {whole}")
    assert re.match(r"Restored \d+ variables \(2 rebuilt: pool, log; [^)]+\) from checkpoint \S+ in [\d.]+ s\.\n",
                    text), text
    report = _report(fresh)
    # a shared object counts for the first variable that holds it; a notebook function only restores
    assert report["started_again"] == ["pool", "log"] and report["counts"]["rebuilt"] == 2
    assert {"handlers", "same_pool", "square", "data"} <= set(report["restored"])
    assert report["counts"]["not_restored"] == 0
    assert fresh.value("(square(7), same_pool is pool, handlers[0] is log.handlers[0], "
                       "type(handlers[0]).__name__)") == (49, True, True, "FileHandler")

    # read by the isolating unpickler: the lost variables count for nothing, even what they held that started
    again = kernels.start()
    again.ok(f"%gpuckpt restore {isolated}")
    report = _report(again)
    assert [v["name"] for v in report["lost"]] == ["Thing", "things"]
    assert report["started_again"] == ["pool", "log"] and report["cells_to_rerun"] == [4]
    assert again.value("(square(5), len(log.handlers))") == (25, 1)


def test_a_live_part_that_cannot_start_again_is_not_restored_nor_what_holds_it_and_rebuild_makes_them(
        kernels: KernelFactory) -> None:
    k = kernels.start()
    k.ok("import concurrent.futures as cf, logging, os\npool = cf.ThreadPoolExecutor(1)")  # cell 2
    k.ok("os.makedirs('logs', exist_ok=True)\nsink = logging.FileHandler('logs/run.log')\nsinks = {'file': sink}\n"
         "steps = 3")  # cell 3
    checkpoint = k.save()
    k.ok("sink.close()")
    shutil.rmtree(kernels.workdir / "logs")  # the log's folder is gone before the restore

    fresh = kernels.start()
    text = fresh.ok(f"%gpuckpt restore {checkpoint}")
    lines = text.strip().splitlines()
    assert re.match(r"Restored \d+ variables \(1 rebuilt: pool; [^)]+\) from checkpoint \S+ in [\d.]+ s; "
                    r"2 not restored\.$", lines[0]), text
    why = ("logging handler FileHandler could not be set up again: FileNotFoundError: [Errno 2] No such file or "
           f"directory: '{kernels.workdir / 'logs' / 'run.log'}'")
    assert lines[1:] == [
        "Not restored, they could not be set up again (2):",
        f"  sink (logging.FileHandler): {why}; re-run cell(s) 3",
        f"  sinks (dict): holds an object of sink: {why}; re-run cell(s) 3",
        "Cells to re-run: 3",
    ]
    report = _report(fresh)
    assert [(v["name"], v["cells"]) for v in report["not_set_up"]] == [("sink", [3]), ("sinks", [3])]
    assert report["counts"] == {"restored": len(report["restored"]), "rebuilt": 1, "not_restored": 2}
    assert "sink" not in report["restored"] and "steps" in report["restored"]
    assert fresh.value("('sink' in globals(), 'sinks' in globals(), steps, pool.submit(abs, -2).result())") == (
        False, False, 3, 2)

    assert fresh.ok("%gpuckpt rebuild --dry-run").strip().splitlines()[0] == \
        "Rebuilding sink, sinks: re-running cell 3."
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines()[-1] == "Re-ran cell 3: sink, sinks are back."
    fresh.ok("sink.handle(logging.makeLogRecord({'msg': 'after the rebuild'}))\nsink.flush()")
    assert (kernels.workdir / "logs" / "run.log").read_text() == "after the rebuild\n"
    assert fresh.value("sinks['file'] is sink") is True


def test_a_logger_whose_file_handler_cannot_start_again_logs_on_without_it(kernels: KernelFactory) -> None:
    k = kernels.start()
    k.ok("import logging, os\nos.makedirs('logs', exist_ok=True)\nlog = logging.getLogger('trainer')\n"
         "log.addHandler(logging.FileHandler('logs/trainer.log'))\nlog.addHandler(logging.NullHandler())")  # cell 2
    checkpoint = k.save()
    k.ok("[h.close() for h in log.handlers]")
    shutil.rmtree(kernels.workdir / "logs")

    fresh = kernels.start()
    text = fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert "log (logging.Logger): logging handler FileHandler could not be set up again: FileNotFoundError" in text \
        and text.rstrip().endswith("Cells to re-run: 2"), text
    # the logger (a process singleton) keeps the handler that did come back, and logs without raising
    fresh.ok("import logging\nlogging.getLogger('trainer').warning('still logging')")
    assert fresh.value("[type(h).__name__ for h in logging.getLogger('trainer').handlers]") == ["NullHandler"]
