"""``%gpuckpt rebuild`` and the server's ``rebuild`` call, plus the magic's wording.

A rebuild re-runs the fewest recorded cells that make what the restore left out, and only
those names come out of it: restored variables keep their objects (unless ``--keep``),
temporaries the cells make are removed, and the random number generators are put back.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from server_fixtures import api, run, start_kernel

from kernel_hooks.report import RestoreReport, SkippedVariable

FAKE_CHANNEL = """
import json
from kernel_hooks.ipython.server_calls import answer
class Channel:
    def __init__(self):
        self.sent = []
    def send(self, data):
        self.sent.append(data)
channel = Channel()
print(json.dumps(answer(get_ipython(), {"call": "rebuild", "args": %s}, channel)))
"""


def _saved_with_skipped(kernels):
    """A checkpoint whose generator and socket were skipped: cells 3 and 5 rebuild them."""
    k = kernels.start()
    k.ok("import socket")  # cell 2
    k.ok("sock = socket.socket()")  # cell 3
    k.ok("step = 5")  # cell 4
    k.ok("gen = (i * step for i in range(3))")  # cell 5
    return k.save()


def test_rebuild_reruns_the_cells_of_what_was_not_restored(kernels):
    checkpoint = _saved_with_skipped(kernels)
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    history = fresh.value("len(In)")

    # the plan first, with what the cells do beyond their names; then what came back
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines() == [
        "Rebuilding sock, gen: re-running cells 3, 5.",
        "  cell 3: sock",
        "    sends requests or opens connections: socket.socket",
        "  cell 5: gen",
        "Re-ran cells 3, 5: sock, gen are back.",
    ]
    assert fresh.value("len(In)") == history + 2  # the two cells asking, not those re-run
    assert fresh.value("(type(sock).__name__, list(gen))") == ("socket", [0, 5, 10])
    assert fresh.ok("%gpuckpt rebuild").strip() == f"Nothing left to rebuild from checkpoint {checkpoint}."


def test_the_server_call_answers_what_was_rebuilt(kernels):
    checkpoint = _saved_with_skipped(kernels)
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    plan = {"names": ["sock", "gen"], "needs": {"sock": [3], "gen": [5]}, "unresolved": [], "cells": [
        {"cell": 3, "rebuilds": ["sock"], "feeds": [], "reassigns": [], "made_from": {},
         "effects": [{"kind": "network", "what": "socket.socket"}], "unbound": []},
        {"cell": 5, "rebuilds": ["gen"], "feeds": [], "reassigns": [], "made_from": {}, "effects": [],
         "unbound": []},
    ]}
    planned = json.loads(fresh.ok(FAKE_CHANNEL % '{"dry_run": True}'))["result"]
    assert planned["plan"] == plan and planned["dry_run"] is True and planned["cells"] == []
    assert planned["text"].splitlines()[0] == "Rebuilding sock, gen: re-running cells 3, 5."
    assert fresh.value("'gen' in dir()") is False  # a dry run runs nothing

    answer = json.loads(fresh.ok(FAKE_CHANNEL % "{}"))
    assert answer == {"ok": True, "result": {
        "checkpoint": checkpoint, "cells": [3, 5], "names": ["sock", "gen"], "missing": [], "failed": None,
        "plan": plan, "dry_run": False, "discarded": {}, "kept": {}, "removed": [], "rng_restored": False,
        "warnings": [], "text": "Re-ran cells 3, 5: sock, gen are back.",
    }}
    assert fresh.value("list(gen)") == [0, 5, 10]
    bad = json.loads(fresh.ok(FAKE_CHANNEL % '{"keep": "yes"}'))
    assert bad["ok"] is False and bad["error"].startswith("TypeError: keep must be true or false")


def test_a_cell_that_fails_stops_the_rebuild_and_later_cells_do_not_run(kernels):
    k = kernels.start()
    k.ok("import socket\nopen('data.txt', 'w').write('a\\nb\\n')")  # cell 2
    k.ok("sock = socket.socket()")  # cell 3
    k.ok("lines = (line for line in open('data.txt').readlines())")  # cell 4: reads the file now
    k.ok("sock2 = socket.socket()")  # cell 5
    checkpoint = k.save()

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}\nimport os\nos.remove('data.txt')")
    outcome = fresh.run("%gpuckpt rebuild")
    assert outcome.error == "FileNotFoundError: [Errno 2] No such file or directory: 'data.txt'"
    assert outcome.stderr.strip().splitlines()[-1] == (  # after the cell's own traceback
        "UsageError: Re-ran cell 3. Cell 4 failed while rebuilding: FileNotFoundError: [Errno 2] No such file or "
        "directory: 'data.txt'; stopped, later cells were not run.")
    assert fresh.value("['sock' in dir(), 'lines' in dir(), 'sock2' in dir()]") == [True, False, False]

    fresh.ok("open('data.txt', 'w').write('c\\n')")
    # sock is back already: only what is still missing is rebuilt
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines()[-1] == "Re-ran cells 4, 5: lines, sock2 are back."
    assert fresh.value("(list(lines), type(sock2).__name__)") == (["c\n"], "socket")


def test_rebuild_before_any_restore_runs_nothing(kernel):
    assert kernel.ok("%gpuckpt rebuild").strip() == "Nothing to rebuild: no checkpoint was restored in this kernel."


def test_usage_errors_say_usage_once_and_list_rebuild(kernel):
    outcome = kernel.run("%gpuckpt bogus")
    assert outcome.stderr.strip() == (  # one line: argparse prints nothing of its own
        "UsageError: argument command: invalid choice: 'bogus' (choose from 'save', 'restore', 'list', 'rebuild'); "
        "usage: %gpuckpt save | restore ID | list [--store DIR] | rebuild [--keep] [--dry-run]")


def test_one_variable_is_counted_in_the_singular(kernels):
    k = kernels.start()
    k.ok("x = 1")
    out = k.ok("%gpuckpt save")
    assert out.startswith("Saved 1 variable (")
    checkpoint = out.strip().splitlines()[-1]
    report = kernels.start().ok(f"%gpuckpt restore {checkpoint}")
    assert report.startswith("Restored 1 variable (")
    assert "Out" not in report  # the saving kernel had no outputs


def test_a_kernel_that_showed_outputs_is_told_they_are_not_restored(kernels):
    k = kernels.start()
    k.ok("x = 1")
    k.run("x + 1")  # an output: Out[2] is 2
    checkpoint = k.save()
    report = kernels.start().ok(f"%gpuckpt restore {checkpoint}")
    assert "Outputs of earlier cells (Out, _) are not restored." in report


def test_the_report_says_outputs_are_not_restored_only_when_there_were_some():
    lost = SkippedVariable("fig", "bokeh.Figure", "could not be rebuilt: AttributeError: x", [4])
    report = RestoreReport(id="c1", restored=["x", "y"], nbytes=0, skipped=[], lost=[lost], had_outputs=True)
    assert str(report).splitlines()[1:] == [
        "Not restored, they could not be rebuilt (1):",
        "  fig (bokeh.Figure): could not be rebuilt: AttributeError: x; re-run cell(s) 4",
        "Outputs of earlier cells (Out, _) are not restored.",
        "Cells to re-run: 4",
    ]
    assert "Out" not in str(RestoreReport(id="c1", restored=["x"], nbytes=0, skipped=[]))


def _trained(kernels):
    """A restored training notebook whose loader (a generator) was not saved: cell 3 made it
    with the model and optimizer, which cell 4 then trained."""
    k = kernels.start()
    k.ok("import torch")  # cell 2
    k.ok("torch.manual_seed(0)\nloader = (b for b in torch.ones(8, 4).split(4))\nmodel = torch.nn.Linear(4, 2)\n"
         "opt = torch.optim.AdamW(model.parameters(), lr=0.1)")  # cell 3
    k.ok("model(torch.ones(3, 4)).sum().backward()\nopt.step()")  # cell 4
    trained = k.value("model.weight.detach().tolist()")
    checkpoint = k.save()
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    fresh.ok("restored = (model, opt)")
    return fresh, trained


def test_a_cell_rerun_for_one_name_leaves_the_restored_model_and_optimizer_alone(kernels):
    fresh, trained = _trained(kernels)
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines() == [
        "Rebuilding loader: re-running cell 3.",
        "  cell 3: loader",
        "    also assigns model, opt: kept as restored",
        "    reseeds or draws from the random number generators: torch.manual_seed",
        "The random number generators are put back as restored afterwards.",
        "Re-ran cell 3: loader is back. Kept the restored model, opt: what cell 3 assigned to them was discarded. "
        "Put the random number generators back as restored.",
    ]
    assert fresh.value("restored[0] is model and restored[1] is opt") is True
    assert fresh.value("model.weight.detach().tolist()") == trained
    assert fresh.value("(opt.param_groups[0]['params'][0] is model.weight, int(opt.state[model.weight]['step']))") \
        == (True, 1)
    assert fresh.value("[len(batch) for batch in loader]") == [4, 4]


def test_keep_takes_what_the_cell_assigned_and_warns(kernels):
    fresh, trained = _trained(kernels)
    out = fresh.ok("%gpuckpt rebuild --keep").strip().splitlines()
    assert "    also assigns model, opt: replaced by the cell's new ones (--keep)" in out
    assert out[-1] == (
        "Re-ran cell 3: loader is back. Replaced the restored model, opt with what cell 3 assigned, as asked. "
        "Put the random number generators back as restored. "
        "Warning: model, opt now hold what the cells assigned, not what was restored.")
    assert fresh.value("restored[0] is model or restored[1] is opt") is False
    assert fresh.value("model.weight.detach().tolist()") != trained  # freshly initialised, untrained
    assert fresh.value("opt.param_groups[0]['params'][0] is model.weight") is True


def test_a_reseeding_cell_is_announced_before_it_runs_and_the_generators_come_back_as_restored(kernels):
    k = kernels.start()
    k.ok("import random, socket")  # cell 2
    k.ok("random.seed(1)\nsock = socket.socket()\nprint('cell 3 ran')")  # cell 3
    k.ok("first = random.random()")  # cell 4
    checkpoint = k.save()
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    fresh.ok("expected = random.Random()\nexpected.setstate(random.getstate())")  # the next draw, undrawn

    out = fresh.ok("%gpuckpt rebuild").strip().splitlines()
    assert out.index("    reseeds or draws from the random number generators: random.seed") < out.index("cell 3 ran")
    assert out[-1] == "Re-ran cell 3: sock is back. Put the random number generators back as restored."
    assert fresh.value("random.random() == expected.random()") is True


def test_a_deleted_helper_is_made_again_for_the_rebuild_and_removed_after(kernels):
    k = kernels.start()
    k.ok("offset = 10")  # cell 2
    k.ok("gen = (x for x in [i + offset for i in range(3)])")  # cell 3: offset is read now, not as gen runs
    k.ok("del offset")  # cell 4
    checkpoint = k.save()
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines() == [
        "Rebuilding gen: re-running cells 2, 3.",
        "  cell 2: offset, for the cells after it (removed afterwards)",
        "  cell 3: gen",
        "Re-ran cells 2, 3: gen is back. Removed offset, which the checkpoint did not have.",
    ]
    assert fresh.value("(list(gen), 'offset' in dir())") == ([10, 11, 12], False)


def test_only_the_fewest_cells_run_though_five_assigned_the_name(kernels):
    k = kernels.start()
    for code in ("gen = iter([])", "gen = iter([1])", "base = 10", "gen = iter([2])", "gen = iter([3])",
                 "tmp = base * 2", "gen = (x for x in [i + tmp for i in range(3)])", "del tmp"):
        k.ok(code)  # cells 2 to 9: gen assigned by 2, 3, 5, 6 and last by 8, from tmp (7), gone since
    checkpoint = k.save()
    fresh = kernels.start()
    report = fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert "gen (generator): TypeError: cannot pickle 'generator' object; re-run cell(s) 7, 8" in report
    assert report.strip().splitlines()[-1] == "Cells to re-run: 7, 8"
    assert fresh.ok("%gpuckpt rebuild --dry-run").strip().splitlines()[0] == "Rebuilding gen: re-running cells 7, 8."
    assert fresh.value("'gen' in dir()") is False
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines()[-1] == (
        "Re-ran cells 7, 8: gen is back. Removed tmp, which the checkpoint did not have.")
    assert fresh.value("(list(gen), base, 'tmp' in dir())") == ([20, 21, 22], 10, False)


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "rebuild_skipped": "always"}])
async def test_a_resume_that_rebuilds_by_itself_never_overwrites_a_restored_variable(
        jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "totals = [1, 2]\nrows = (i for i in range(3))")  # cell 1
    await run(jp_serverapp, kernel_id, "totals.append(3)")  # cell 2
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    deadline = asyncio.get_running_loop().time() + 60
    while not (model["report"] or {}).get("rebuilt"):
        assert asyncio.get_running_loop().time() < deadline, "the resume did not rebuild"
        await asyncio.sleep(0.1)
        model = await api(jp_fetch, "kernels", kernel_id)
    planned = model["report"]["rebuild_plan"]  # recorded before the cells ran
    assert [(c["cell"], c["rebuilds"], c["reassigns"]) for c in planned["cells"]] == [(1, ["rows"], ["totals"])]
    rebuilt = model["report"]["rebuilt"]
    assert (rebuilt["cells"], rebuilt["names"], rebuilt["discarded"], rebuilt["failed"]) == (
        [1], ["rows"], {"totals": 1}, None)
    assert model["notice"] == rebuilt["text"] == (
        "Re-ran cell 1: rows is back. Kept the restored totals: what cell 1 assigned to it was discarded.")
    assert (await run(jp_serverapp, kernel_id, "print(totals, next(rows))")).strip() == "[1, 2, 3] 0"
