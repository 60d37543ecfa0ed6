"""The rebuild planner on small histories: which cells rebuild a name, and what they do beside."""

from __future__ import annotations

from IPython.core.inputtransformer2 import TransformerManager

from kernel_hooks.state.history import analyse
from kernel_hooks.state.lineage import cells_to_rebuild, plan_rebuild


def history(*cells: str) -> list[str]:
    """``In`` as IPython keeps it: entry 0 empty, then each cell's code turned into Python."""
    return ["", *(TransformerManager().transform_cell(cell) for cell in cells)]


def effects(plan, cell):
    return [(e.kind, e.what) for c in plan.cells if c.cell == cell for e in c.effects]


def test_only_the_last_cell_that_made_a_name_and_what_it_reads_are_rerun():
    cells = history(
        "gen = iter([])",  # 1
        "gen = iter([1])",  # 2
        "base = 10",  # 3
        "gen = iter([2])",  # 4
        "gen = iter([3])",  # 5
        "tmp = base * 2",  # 6
        "gen = (i + tmp for i in range(3))",  # 7: five cells assigned gen, this one last
        "del tmp",  # 8
    )
    plan = plan_rebuild(cells, ["gen"], available={"base"})
    assert plan.numbers == [6, 7] and plan.needs == {"gen": [6, 7]}
    assert (plan.cells[0].rebuilds, plan.cells[0].feeds) == ([], ["tmp"])  # made for cell 7, removed after
    assert plan.cells[1].rebuilds == ["gen"]
    # without base in the namespace, its cell is traced too
    assert plan_rebuild(cells, ["gen"], available=set()).numbers == [3, 6, 7]


def test_a_restored_input_is_used_as_it_is_even_if_a_later_cell_changed_it():
    cells = history("step = 5", "gen = (i * step for i in range(3))", "step = 7")
    assert plan_rebuild(cells, ["gen"], available={"step"}).numbers == [2]


def test_what_a_cell_binds_before_it_reads_it_is_not_an_input():
    cells = history("x = 1", "x = 2\ny = x + 1", "z = z_seed = 3\nw = z + y")
    assert analyse(cells[2]).reads == set()
    assert analyse(cells[3]).reads == {"y"}
    assert plan_rebuild(cells, ["y"], available=set()).numbers == [2]
    assert plan_rebuild(cells, ["w"], available=set()).numbers == [2, 3]


def test_augmented_assignment_reads_the_name_so_its_history_is_traced():
    cells = history("n = 0", "n += 1", "other = 1", "n += 2")
    assert plan_rebuild(cells, ["n"], available={"other"}).numbers == [1, 2, 4]


def test_comprehensions_lambdas_and_class_bodies_read_at_once_function_bodies_when_called():
    cells = history(
        "limit = 3",  # 1
        "scale = 2",  # 2
        "cfg = {'k': 1}",  # 3
        "rows = [i * scale for i in range(limit) if i != skip]",  # 4
        "key = (lambda r: r[factor])",  # 5
        "class Holder:\n    size = width\n    def get(self):\n        return cfg",  # 6
        "def make():\n    return dict(cfg)",  # 7
        "made = make()",  # 8
        "lazy = make",  # 9
    )
    assert analyse(cells[4]).reads == {"scale", "range", "limit", "skip"}  # i is the comprehension's own
    assert analyse(cells[5]).reads == {"factor"}
    assert analyse(cells[6]).reads == {"width"}  # cfg is read when get() runs
    assert plan_rebuild(cells, ["rows"], available={"skip"}).numbers == [1, 2, 4]
    # make() runs in cell 8 and reads cfg: its cell comes too, whether make is restored or not
    assert plan_rebuild(cells, ["made"], available={"make"}).numbers == [3, 8]
    assert plan_rebuild(cells, ["made"], available=set()).numbers == [3, 7, 8]
    # only a reference to make: nothing runs its body
    assert plan_rebuild(cells, ["lazy"], available={"make"}).numbers == [9]


def test_every_way_to_bind_a_name_is_a_binding():
    cell = analyse(TransformerManager().transform_cell(
        "import numpy as np, os.path\n"
        "from collections import OrderedDict as OD\n"
        "for i, (a, b) in enumerate(pairs):\n    last = a\n"
        "with open(p) as fh, lock:\n    text = fh.read()\n"
        "if (n := len(text)) > 3:\n    big = True\n"
        "try:\n    risky()\nexcept ValueError as err:\n    caught = err\n"
        "match cmd:\n    case [first, *rest] if first > lim:\n        picked = rest\n"
        "def f(): pass\n"
        "class C: pass\n"
        "%time timed = slow()\n"
        "%%capture --no-stderr captured\n"
    ))
    assert cell.binds >= {"np", "os", "OD", "i", "a", "b", "last", "fh", "text", "n", "big", "err", "caught",
                          "first", "rest", "picked", "f", "C", "timed"}
    assert cell.imports == {"np": "numpy", "os": "os", "OD": "collections.OrderedDict"}
    assert {"pairs", "p", "lock", "risky", "cmd", "lim", "slow"} <= cell.reads
    assert not {"a", "fh", "text", "first", "err"} & cell.reads
    assert "captured" in analyse(TransformerManager().transform_cell("%%capture captured\nprint(1)\n")).binds


def test_a_function_that_assigns_a_global_binds_it_where_it_is_called():
    cells = history("def connect():\n    global conn\n    conn = open_it(url)", "url = 'x'", "connect()")
    assert plan_rebuild(cells, ["conn"], available={"connect", "url"}).numbers == [3]
    assert plan_rebuild(cells, ["conn"], available={"url"}).numbers == [1, 3]
    assert plan_rebuild(cells, ["conn"], available={"connect"}).numbers == [2, 3]


def test_deleting_a_name_does_not_make_it_and_a_deleted_helper_is_rebuilt():
    cells = history("limit = 3", "gen = (i for i in range(limit))", "del limit")
    assert analyse(cells[3]).deletes == {"limit"}
    plan = plan_rebuild(cells, ["gen"], available=set())
    assert plan.numbers == [1, 2] and plan.cells[0].feeds == ["limit"]


def test_star_imports_and_run_are_taken_as_the_source_of_a_name_no_cell_spells():
    cells = history("from math import *", "x = 1", "r = pi * x", "%run setup.py", "y = from_script + 1")
    assert analyse(cells[1]).opaque and analyse(cells[4]).opaque
    assert plan_rebuild(cells, ["r"], available={"x"}).numbers == [1, 3]
    assert plan_rebuild(cells, ["y"], available={"get_ipython"}).numbers == [4, 5]
    # a name some cell binds by name comes from that cell, not from a star import after it
    assert plan_rebuild(history("x = 1", "from math import *", "z = x"), ["z"], available=set()).numbers == [1, 3]


def test_a_name_no_cell_assigns_is_unresolved_and_an_input_nothing_has_is_said():
    plan = plan_rebuild(history("a = undefined_thing + 1"), ["a", "ghost"], available=set())
    assert plan.unresolved == ["ghost"] and plan.numbers == [1]
    assert plan.cells[0].unbound == ["undefined_thing"]  # builtins are not listed
    assert "No recorded cell assigns ghost." in plan.text()


def test_effects_beyond_names_are_found_through_import_aliases():
    cells = history(
        "import numpy as np, random, subprocess, requests, torch\nfrom pathlib import Path\nimport pandas as pd",
        "np.random.seed(0)\nrandom.shuffle(items)\ntorch.manual_seed(1)\nx = 1",  # 2
        "with open('out.txt', 'w') as f:\n    f.write('x')\nopen('in.txt').read()\nopen(name, mode)\n"
        "Path('p').write_text('x')\ndf.to_csv('d.csv')\ntorch.save(model, 'm.pt')\ny = 2",  # 3
        "r = requests.get('http://x')\nsubprocess.run(['ls'])\n!ls\nout = !pwd",  # 4
        "model.fit(data)\nd['k'] = 1\nmodel.w = 3\nacc += 1\ns = model.state_dict()\nz = np.zeros(3)",  # 5
    )
    plan = plan_rebuild(cells, ["x", "y", "r", "s"], available={"np", "random", "subprocess", "requests", "torch",
                                                               "Path", "pd", "items", "df", "model", "d", "acc",
                                                               "data", "name", "mode"})
    assert effects(plan, 2) == [("rng", "numpy.random.seed"), ("rng", "random.shuffle"), ("rng", "torch.manual_seed")]
    assert effects(plan, 3) == [
        ("files", "open(..., mode)"), ("files", "f.write"), ("files", "pathlib.Path().write_text"),
        ("files", "df.to_csv"), ("files", "torch.save")]  # open('in.txt') reads; open(name, mode) may write
    assert effects(plan, 4) == [("network", "requests.get"), ("processes", "subprocess.run"),
                                ("processes", "get_ipython().system"), ("processes", "get_ipython().getoutput")]
    # methods on restored variables (not read-only ones, not modules' functions), items and attributes set
    assert effects(plan, 5) == [("in_place", "model.fit(...)"), ("in_place", "d[...] = ..."),
                                ("in_place", "model.w = ..."), ("in_place", "acc += ...")]
    text = plan.text()
    assert "    reseeds or draws from the random number generators: numpy.random.seed" in text
    assert "The random number generators are put back as restored afterwards." in text


def test_a_function_a_cell_calls_brings_its_effects():
    cells = history("def train(steps):\n    model.fit(steps)\n    torch.save(model, 'm.pt')", "done = train(3)")
    plan = plan_rebuild(cells, ["done"], available={"train", "model", "torch"})
    assert effects(plan, 2) == [("files", "torch.save"), ("in_place", "model.fit(...)")]


def test_a_cell_that_reassigns_restored_names_says_they_are_kept_and_what_was_made_from_them():
    cells = history("import torch",
                    "loader = iter(range(3))\nmodel = torch.nn.Linear(4, 2)\n"
                    "opt = torch.optim.AdamW(model.parameters())")
    plan = plan_rebuild(cells, ["loader"], available={"torch", "model", "opt"})
    assert plan.numbers == [2] and plan.cells[0].reassigns == ["model", "opt"] and not plan.cells[0].made_from
    assert plan.text().splitlines() == ["Rebuilding loader: re-running cell 2.", "  cell 2: loader",
                                        "    also assigns model, opt: kept as restored"]
    assert "replaced by the cell's new ones (--keep)" in plan.text(keep=True)
    # rebuilding opt from the same cell: it is made from the cell's new model, which is discarded
    plan = plan_rebuild(cells, ["opt"], available={"torch", "model"})
    assert plan.cells[0].made_from == {"opt": ["model"]}
    assert "    opt is made from the new model of this cell, not the restored one" in plan.text()


def test_the_cells_a_report_names_are_the_traced_ones():
    cells = history("class Tracked(list): pass", "tmp = 2", "broken = Tracked([tmp])", "holder = {'b': broken}",
                    "broken.append(1)", "holder['n'] = 1", "del tmp")
    # holder needs broken, which is missing too; touching them (cells 5, 6) is not making them
    assert cells_to_rebuild(cells, ["broken", "holder"], available={"Tracked"}) == {
        "broken": [2, 3], "holder": [2, 3, 4]}
    assert cells_to_rebuild(cells, [], available=set()) == {}
