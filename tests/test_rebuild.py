"""``%gpuckpt rebuild`` and the server's ``rebuild`` call, plus the magic's wording."""

from __future__ import annotations

import json

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
print(json.dumps(answer(get_ipython(), {"call": "rebuild", "args": {}}, channel)))
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

    assert fresh.ok("%gpuckpt rebuild").strip() == "Re-ran cells 3, 5: sock, gen are back."
    assert fresh.value("len(In)") == history + 2  # the two cells asking, not those re-run
    assert fresh.value("(type(sock).__name__, list(gen))") == ("socket", [0, 5, 10])
    assert fresh.ok("%gpuckpt rebuild").strip() == f"Nothing left to rebuild from checkpoint {checkpoint}."


def test_the_server_call_answers_what_was_rebuilt(kernels):
    checkpoint = _saved_with_skipped(kernels)
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    answer = json.loads(fresh.ok(FAKE_CHANNEL))
    assert answer == {"ok": True, "result": {
        "checkpoint": checkpoint, "cells": [3, 5], "names": ["sock", "gen"], "missing": [], "failed": None,
        "text": "Re-ran cells 3, 5: sock, gen are back.",
    }}
    assert fresh.value("list(gen)") == [0, 5, 10]


def test_a_cell_that_fails_stops_the_rebuild_and_later_cells_do_not_run(kernels):
    k = kernels.start()
    k.ok("import socket")  # cell 2
    k.ok("sock = socket.socket()")  # cell 3
    k.ok("limit = 3")  # cell 4
    k.ok("gen = (i for i in range(limit))")  # cell 5
    k.ok("del limit")  # cell 6
    k.ok("sock2 = socket.socket()")  # cell 7
    checkpoint = k.save()

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    outcome = fresh.run("%gpuckpt rebuild")
    assert outcome.error == "NameError: name 'limit' is not defined"  # the cell's own traceback, then:
    assert outcome.stderr.strip().splitlines()[-1] == (
        "UsageError: Re-ran cell 3. Cell 5 failed while rebuilding: NameError: name 'limit' is not defined; "
        "stopped, later cells were not run.")
    assert fresh.value("['sock' in dir(), 'gen' in dir(), 'sock2' in dir()]") == [True, False, False]

    fresh.ok("limit = 2")
    assert fresh.ok("%gpuckpt rebuild").strip() == "Re-ran cells 3, 5, 7: sock, gen, sock2 are back."
    assert fresh.value("(list(gen), type(sock2).__name__)") == ([0, 1], "socket")


def test_rebuild_before_any_restore_runs_nothing(kernel):
    assert kernel.ok("%gpuckpt rebuild").strip() == "Nothing to rebuild: no checkpoint was restored in this kernel."


def test_usage_errors_say_usage_once_and_list_rebuild(kernel):
    outcome = kernel.run("%gpuckpt bogus")
    assert outcome.stderr.strip() == (  # one line: argparse prints nothing of its own
        "UsageError: argument command: invalid choice: 'bogus' (choose from 'save', 'restore', 'list', 'rebuild'); "
        "usage: %gpuckpt save | restore ID | list | rebuild [--store DIR]")


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
