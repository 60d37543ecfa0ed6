"""The libraries' global settings come back with the variables (issue 25, points 4 and 5).

Each test sets them in one real kernel, checkpoints, and restores into a fresh kernel:
matplotlib's backend and rcParams, scikit-learn's config, numpy's print and error options,
pandas' options, torch's switches; what cannot come back is named in the restore report.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from kernel_processes import Kernel, KernelFactory
from server_fixtures import api, run, start_kernel

SETTINGS = """
import random, numpy as np, torch
torch.set_num_interop_threads(1)  # before any parallel work, as torch requires
import matplotlib, sklearn, pandas as pd
from cycler import cycler
%matplotlib inline
matplotlib.rcParams["lines.linewidth"] = 3.5
matplotlib.rcParams["axes.prop_cycle"] = cycler(color=["red", "green"])
sklearn.set_config(assume_finite=True, working_memory=256, display="text")
def bracketed(x):
    return f"<{x:.1f}>"
np.set_printoptions(precision=3, threshold=50, formatter={"float_kind": bracketed})
np.seterr(divide="raise", over="ignore")
pd.set_option("display.max_rows", 7)
pd.set_option("display.precision", 2)
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True, warn_only=True)
torch.set_grad_enabled(False)
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
torch.set_float32_matmul_precision("medium")
torch.set_default_device("meta")
random.seed(0); np.random.seed(0); torch.manual_seed(0)
"""

READ = """(
    matplotlib.get_backend(), matplotlib.rcParams["lines.linewidth"], matplotlib.rcParams["axes.prop_cycle"].by_key(),
    {k: v for k, v in sklearn.get_config().items() if k in ("assume_finite", "working_memory", "display")},
    repr(np.array([1.25, 2.5])), np.get_printoptions()["threshold"], np.geterr()["divide"], np.geterr()["over"],
    pd.get_option("display.max_rows"), pd.get_option("display.precision"),
    str(torch.get_default_dtype()), torch.get_num_threads(), torch.get_num_interop_threads(),
    torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
    torch.is_grad_enabled(), torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
    torch.get_float32_matmul_precision(), str(torch.get_default_device()),
)"""
SET_BACK = (
    "inline", 3.5, {"color": ["red", "green"]},
    {"assume_finite": True, "working_memory": 256, "display": "text"},
    "array([<1.2>, <2.5>])", 50, "raise", "ignore",
    7, 2,
    "torch.float64", 1, 1,
    True, True,
    False, True, True,
    "medium", "meta",
)
DRAWS = "(random.random(), float(np.random.random()), torch.rand(1, device='cpu').item())"


def _restore(kernels: KernelFactory, checkpoint: str, before: str = "", **env: str) -> tuple[Kernel, str]:
    """A fresh kernel (with ``env``, running ``before`` first) with ``checkpoint`` restored;
    the magic's report."""
    k = kernels.start(**env)
    if before:
        k.ok(before)
    outcome = k.run(f"%gpuckpt restore {checkpoint}")
    assert outcome.error is None, outcome.error
    assert outcome.stderr == ""  # no warning of the restore's own
    return k, outcome.stdout


def test_every_setting_comes_back_and_the_random_streams_do_not_move(kernels):
    saver = kernels.start()
    saver.ok(SETTINGS)
    assert saver.value(READ) == SET_BACK
    checkpoint = saver.save()
    expected = saver.value(DRAWS)
    k, report = _restore(kernels, checkpoint)
    assert "Warning" not in report, report
    assert k.value(DRAWS) == expected
    assert k.value(READ) == SET_BACK
    # set back the IPython way: figures show after each cell
    k.ok("torch.set_default_device('cpu')")
    figure = k.run("import matplotlib.pyplot as plt\nplt.plot([1, 2]);")
    assert any(text.startswith("<Figure size") for text in figure.displays), figure.displays


def test_a_non_interactive_backend_comes_back_with_matplotlib_use(kernels):
    saver = kernels.start()
    saver.ok("import matplotlib\nmatplotlib.use('agg')\nmatplotlib.rcParams['figure.dpi'] = 50")
    k, report = _restore(kernels, saver.save())
    assert k.value("(matplotlib.get_backend(), matplotlib.rcParams['figure.dpi'], matplotlib.is_interactive())") == (
        "agg", 50.0, False)


def test_what_cannot_come_back_is_named_and_the_rest_still_does(kernels, tmp_path):
    more_threads = len(os.sched_getaffinity(0)) + 1
    gone = tmp_path / "gone"  # a module the restoring kernel will not find
    gone.mkdir()
    (gone / "formats.py").write_text("class Plain:\n    def __call__(self, x):\n        return str(x)\n")
    saver = kernels.start()
    saver.ok(f"""
import sys, numpy as np, torch, pandas as pd
torch.set_num_interop_threads(1)
torch.set_num_threads({more_threads})  # more than the restoring kernel may use
class Counting:  # a formatter that cannot be pickled
    def __init__(self):
        self.counter = (i for i in range(3))
    def __call__(self, x):
        return f"{{x:.1f}}"
pd.set_option("display.float_format", Counting())
sys.path.append({str(gone)!r})
pd.set_option("styler.format.formatter", __import__("formats").Plain())
pd.set_option("display.max_rows", 7)
np.set_printoptions(precision=2)
""")
    checkpoint = saver.save()
    shutil.rmtree(gone)
    # this kernel's torch has set its inter-op threads already: torch allows it once
    k, report = _restore(kernels, checkpoint, before="import torch\ntorch.set_num_interop_threads(2)")
    warnings = [line for line in report.splitlines() if line.startswith("Warning: ")]
    assert len(warnings) == 4, report
    assert warnings[0] == ("Warning: pandas.set_option('styler.format.formatter', ...) could not be restored: "
                           "ModuleNotFoundError: No module named 'formats'")
    assert warnings[1] == (f"Warning: torch.set_num_threads({more_threads}) could not be restored: "
                           f"this kernel may use {more_threads - 1} CPUs")
    assert warnings[2].startswith("Warning: torch.set_num_interop_threads(1) could not be restored: RuntimeError: ")
    assert warnings[3].startswith("Warning: pandas.set_option('display.float_format', <__main__.Counting object at ")
    assert warnings[3].endswith(" was not saved: TypeError: cannot pickle 'generator' object"), warnings[3]
    assert k.value("(pd.get_option('display.max_rows'), pd.get_option('display.float_format'), "
                   "np.get_printoptions()['precision'], torch.get_num_interop_threads())") == (7, None, 2, 2)


def test_a_setting_of_a_library_imported_later_is_set_then(kernels):
    """Libraries imported but none of their objects kept: the restore imports none of them,
    and the user's first import of each gets its settings (and its RNG state), or a warning
    naming the setting that could not be set."""
    more_threads = len(os.sched_getaffinity(0)) + 1
    saver = kernels.start()
    saver.ok(f"import pandas, matplotlib, torch\n%matplotlib inline\npandas.set_option('display.max_rows', 7)\n"
             f"torch.set_num_threads({more_threads}); torch.set_default_dtype(torch.float64); torch.manual_seed(5)\n"
             "del pandas, matplotlib, torch\nnote = 1")
    checkpoint = saver.save()
    expected = saver.value("__import__('torch').rand(1).item()")
    k, report = _restore(kernels, checkpoint)
    assert "Warning" not in report, report
    assert k.value("sorted(m for m in ('pandas', 'matplotlib', 'torch') if m in __import__('sys').modules)") == []
    assert k.value("__import__('pandas').get_option('display.max_rows')") == 7
    assert k.value("__import__('matplotlib.pyplot').pyplot.get_backend()") == "inline"
    outcome = k.run("import torch")
    assert outcome.error is None, outcome.error
    assert (f"RuntimeWarning: torch.set_num_threads({more_threads}) could not be restored: "
            f"this kernel may use {more_threads - 1} CPUs") in outcome.stderr
    assert k.value("(str(torch.get_default_dtype()), torch.rand(1).item())") == ("torch.float64", expected)


def test_a_checkpoint_saved_before_settings_were_saved_still_restores(kernels):
    """Its payload's last entry is the RNG states alone, as the hooks wrote it then."""
    saver = kernels.start()
    saver.ok("import kernel_hooks.saving as saving, kernel_hooks.state.rng as rng\n"
             "saving._process_globals = rng.capture\n"
             "import random, numpy as np\nrandom.seed(3)\nnp.set_printoptions(precision=2)\nweights = np.arange(4.0)")
    checkpoint = saver.save()
    expected = saver.value("random.random()")
    k, report = _restore(kernels, checkpoint)
    assert "Warning" not in report, report
    assert k.value("(random.random(), weights.tolist(), np.get_printoptions()['precision'])") == (
        expected, [0.0, 1.0, 2.0, 3.0], 8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_default_device_comes_back_on_a_gpu_and_is_named_without_one(kernels):
    saver = kernels.start()
    saver.ok("import torch\ntorch.set_default_device('cuda')")
    checkpoint = saver.save()
    k, report = _restore(kernels, checkpoint)
    assert "Warning" not in report, report
    assert k.value("str(torch.get_default_device())") == "cuda:0"
    k, report = _restore(kernels, checkpoint, CUDA_VISIBLE_DEVICES="")
    assert ("Warning: torch.set_default_device('cuda:0') could not be restored: this kernel has no CUDA device"
            in report.splitlines()), report
    assert k.value("str(torch.get_default_device())") == "cpu"


WIDE = "df = pd.DataFrame({f'column_{i:02d}': [i * 1000003] * 3 for i in range(15)})"


async def test_pandas_the_restore_imports_takes_itself_for_a_notebook(jp_fetch, jp_serverapp):
    """pandas decides its display defaults when imported, by whether IPython's
    ``get_ipython`` is in builtins, which only holds in a cell: the server's restore must
    import it as a cell would. (Needs the server calls to run inside ``shell.builtin_trap``.)"""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, f"import pandas as pd\n{WIDE}")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1", mode="suspend")
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running"
    out = await run(jp_serverapp, kernel_id, "import json\n"
                    "print(json.dumps([pd.get_option('display.max_columns'), repr(df)]))")
    max_columns, text = json.loads(out)
    assert max_columns == 20
    assert "..." not in text and all(f"column_{i:02d}" in text for i in range(15)), text
