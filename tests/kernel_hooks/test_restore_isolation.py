"""One object that fails to rebuild costs only the variables built from it, not the restore."""

from __future__ import annotations

import json

# Like bokeh's PropertyValueList: pickle fills a list subclass (extend) before it restores
# the instance's __dict__ (BUILD), so an extend() that needs an attribute __init__ set
# raises in every kernel that unpickles it.
TRACKED = """
class Tracked(list):
    def __init__(self, *args, owner=None):
        super().__init__(*args)
        self._owners = {owner}
    def extend(self, items):
        self._owners.add("extend")
        super().extend(items)
"""


def test_an_object_that_fails_to_rebuild_loses_only_the_variables_that_hold_it(kernels):
    k = kernels.start()
    k.ok("import numpy as np, torch\ntorch.manual_seed(0)")  # cell 2
    k.ok("model = torch.nn.Linear(4, 2)\nopt = torch.optim.Adam(model.parameters(), lr=0.01)\n"
         "model(torch.ones(3, 4)).sum().backward()\nopt.step()")  # cell 3
    k.ok("arr = np.arange(100_000, dtype=np.float64)\nplain = {'a': [1, 2, 3]}")  # cell 4
    k.ok(TRACKED)  # cell 5
    k.ok("broken = Tracked([1, 2, 3], owner='figure')")  # cell 6
    k.ok("holder = {'b': broken, 'n': 1}")  # cell 7
    weights = k.value("model.weight.detach().tolist()")
    checkpoint = k.save()

    fresh = kernels.start()
    out = fresh.ok(f"%gpuckpt restore {checkpoint}")
    reason = "could not be rebuilt: AttributeError: 'Tracked' object has no attribute '_owners'"
    assert "Not restored, they could not be rebuilt (2):" in out
    assert f"broken (__main__.Tracked): {reason}; re-run cell(s) 6" in out
    assert f"holder (dict): {reason}; re-run cell(s) 6, 7" in out  # it holds broken, which is lost too
    assert out.strip().splitlines()[-1] == "Cells to re-run: 6, 7"

    report = json.loads(fresh.ok("import json, kernel_hooks\n"
                                 "print(json.dumps(kernel_hooks.current().last_restore.to_json()))"))
    assert sorted(report["restored"]) == ["Tracked", "arr", "model", "np", "opt", "plain", "torch"]
    assert [(v["name"], v["reason"], v["cells"]) for v in report["lost"]] == [
        ("broken", reason, [6]), ("holder", reason, [6, 7])]
    assert report["skipped"] == [] and report["cells_to_rerun"] == [6, 7]
    assert report["text"] == out.strip()

    assert fresh.value("opt.param_groups[0]['params'][0] is model.weight") is True
    assert fresh.value("model.weight.detach().tolist()") == weights
    assert fresh.value("int(opt.state[model.weight]['step'])") == 1
    assert fresh.value("(float(arr.sum()), plain)") == (4999950000.0, {"a": [1, 2, 3]})
    assert fresh.value("('broken' in dir(), 'holder' in dir())") == (False, False)

    # The lost variables' cells rebuild them from the restored class.
    assert fresh.ok("%gpuckpt rebuild").strip().splitlines()[-1] == "Re-ran cells 6, 7: broken, holder are back."
    assert fresh.value("(list(holder['b']), holder['b'] is broken)") == ([1, 2, 3], True)


def test_a_class_whose_module_is_gone_loses_its_instances_only(kernels, tmp_path):
    (tmp_path / "vanishing.py").write_text("class Thing:\n    def __init__(self):\n        self.v = 1\n")
    k = kernels.start()
    k.ok(f"import sys\nsys.path.append({str(tmp_path)!r})\nfrom vanishing import Thing\n"
         "thing = Thing()\nthings = [thing, 2]\nshared = [1, 2]\nboth = (shared, 3)")  # cell 2
    checkpoint = k.save()
    (tmp_path / "vanishing.py").unlink()

    fresh = kernels.start()
    out = fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert "Not restored, they could not be rebuilt (3):" in out
    assert "thing (vanishing.Thing): could not be rebuilt: ModuleNotFoundError: No module named 'vanishing'" in out
    assert fresh.value("(both[0] is shared, both, sys.path[-1])") == (True, ([1, 2], 3), str(tmp_path))
    assert fresh.value("[name in dir() for name in ('thing', 'things', 'Thing')]") == [False, False, False]


def test_a_pickle_that_fails_outside_user_code_still_restores_nothing(kernels):
    k = kernels.start()
    k.ok("import numpy as np\nx = 1\narr = np.zeros(100_000)")
    checkpoint = k.save()
    manifest = kernels.manifest(checkpoint)
    del manifest["buffers"][-1]  # the pickle now asks for a buffer that is not there
    kernels.rewrite_manifest(checkpoint, manifest)

    fresh = kernels.start()
    fresh.ok("x = 'before'")
    outcome = fresh.run(f"%gpuckpt restore {checkpoint}")
    assert outcome.error is not None
    assert f"could not rebuild the variables of checkpoint {checkpoint}: UnpicklingError" in outcome.error
    assert fresh.value("(x, 'arr' in dir())") == ("before", False)
