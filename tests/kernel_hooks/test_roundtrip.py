"""What is saved: a namespace built cell by cell in one kernel comes back whole in another.

One saving kernel builds every kind of object the checkpoint must carry, saves, and then
computes what it expects next (RNG draws, a training step); a fresh kernel restores the
checkpoint and each test below checks one family of objects there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_processes import Kernel, KernelFactory

CELLS = [
    # builtins and containers, including a self-referencing list
    """
import collections
ints = 42; flt = 3.5; cplx = 1 + 2j; text = "héllo"; raw = b"\\x00\\x01"; nothing = None
lst = [1, [2, 3], {"a": (4, 5)}]; tup = (1, "two"); st = {1, 2}; fs = frozenset({3})
dq = collections.deque([1, 2]); od = collections.OrderedDict(a=1)
rec = []; rec.append(rec)
shared = [1, 2]; holder = {"s": shared}; holder2 = (shared,)
""",
    # notebook functions, lambdas, closures, recursion, classes, modules
    """
import math as m
def square(x): return x * x
def uses_global(): return ints + 1
adder = lambda y: y + ints
def make_counter():
    count = 0
    def inc():
        nonlocal count
        count += 1
        return count
    return inc
counter = make_counter(); counter(); counter()
def fact(n): return 1 if n <= 1 else n * fact(n - 1)
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def norm2(self): return self.x ** 2 + self.y ** 2
p = Point(3, 4)
from dataclasses import dataclass
@dataclass
class Rec:
    name: str
    value: float
r = Rec("a", 1.0)
""",
    # numpy: dtypes, views, non-contiguous, read-only, Fortran order, memmap, objects
    """
import numpy as np
f32 = np.arange(100_000, dtype=np.float32)
small = np.array([1, 2, 3], dtype=np.int8)
i64 = np.arange(50_000, dtype=np.int64).reshape(500, 100)
view = i64[10:20, ::3]
tview = i64.T
rev = f32[::-2]
bools = np.random.default_rng(0).random(100_000) > 0.5
c128 = (np.arange(10_000) * (1 + 1j)).astype(np.complex128)
f16 = np.linspace(0, 1, 50_000, dtype=np.float16)
days = np.arange('2000-01-01', '2200-01-01', dtype='datetime64[D]')
structured = np.zeros(10_000, dtype=[('a', 'i4'), ('b', 'f8')]); structured['a'] = np.arange(10_000)
objarr = np.array([1, "a", None], dtype=object)
readonly = np.frombuffer(bytes(range(256)) * 1000, dtype=np.uint8)
fort = np.asfortranarray(np.arange(40_000.0).reshape(200, 200))
mm = np.memmap("mm.bin", dtype=np.float64, mode="w+", shape=(20_000,)); mm[:] = np.arange(20_000)
""",
    # pandas
    """
import pandas as pd
df = pd.DataFrame({
    "a": np.arange(20_000), "b": np.random.default_rng(1).random(20_000), "s": ["x", "y"] * 10_000,
    "c": pd.Categorical(["u", "v"] * 10_000), "t": pd.date_range("2020-01-01", periods=20_000, freq="min"),
})
series = df["b"]
""",
    # torch tensors, views of one storage, dtypes, autograd
    """
import torch
base = torch.arange(100_000, dtype=torch.float32)
tv = base[10:1000]
tt = base.view(1000, 100).t()
bf = torch.linspace(-1, 1, 40_000).to(torch.bfloat16)
half = torch.linspace(-1, 1, 40_000, dtype=torch.float16)
ti = torch.arange(50_000) % 7
leaf = torch.linspace(-1, 1, 40_000).reshape(200, 200).requires_grad_()
(leaf ** 2).sum().backward()
""",
    # a model, its optimizer and LR scheduler after a few steps
    """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
X = torch.randn(32, 64); Y = torch.randint(0, 10, (32,))
def train_step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(X), Y)
    loss.backward()
    opt.step()
    sched.step()
    return round(loss.item(), 6)
losses = [train_step() for _ in range(3)]
""",
    # RNG states and kernel state the user changed
    """
import os, random, sys
random.seed(7); np.random.seed(7); torch.manual_seed(7)
os.makedirs("sub", exist_ok=True); os.chdir("sub")
sys.path.insert(0, "/opt/extra_first"); sys.path.append("/opt/extra_last")
os.environ["MY_SETTING"] = "on"; del os.environ["GPUCKPT_TEST_BASE"]
""",
]

AFTER = """(
    [random.random(), float(np.random.rand()), torch.rand(1).item()],
    train_step(), [round(float(p.sum()), 5) for p in model.parameters()],
)"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, Kernel, dict]]:
    factory = KernelFactory(tmp_path_factory.mktemp("roundtrip"))
    try:
        saver = factory.start(GPUCKPT_TEST_BASE="present")
        for cell in CELLS:
            saver.ok(cell)
        count = saver.value("get_ipython().execution_count")
        checkpoint = saver.save()  # cell count + 1
        history = saver.value("In[1:-1]")  # up to the save cell (not this one)
        facts = {
            "checkpoint": checkpoint,
            "history": history,
            "after": saver.value(AFTER),
            "next_count": count + 2,
        }
        restorer = factory.start(GPUCKPT_TEST_BASE="present")
        facts["report"] = restorer.ok(f"%gpuckpt restore {checkpoint}")
        facts["restored_count"] = restorer.value("get_ipython().execution_count")
        facts["restored_history"] = restorer.value(f"In[1:{len(history) + 1}]")
        yield saver, restorer, facts
    finally:
        factory.close()


def test_builtins_and_containers(pair):
    _, k, _ = pair
    assert k.value("(ints, flt, cplx, text, raw, nothing)") == (42, 3.5, 1 + 2j, "héllo", b"\x00\x01", None)
    assert k.value("(lst, tup, st, sorted(fs), list(dq), dict(od))") == (
        [1, [2, 3], {"a": (4, 5)}], (1, "two"), {1, 2}, [3], [1, 2], {"a": 1})
    assert k.value("(type(fs).__name__, type(dq).__name__, type(od).__name__, rec[0] is rec)") == (
        "frozenset", "deque", "OrderedDict", True)


def test_objects_shared_between_variables_stay_shared(pair):
    _, k, _ = pair
    assert k.value("holder['s'] is shared and holder2[0] is shared") is True
    assert k.value("opt.param_groups[0]['params'][0] is model[0].weight") is True
    assert k.value("all(p in opt.state for p in model.parameters())") is True


def test_functions_closures_and_classes(pair):
    _, k, _ = pair
    assert k.value("(square(7), adder(1), fact(5), counter(), m.sqrt(16))") == (49, 43, 120, 3, 4.0)
    # notebook functions see the restored namespace, including later changes to it
    assert k.value("(uses_global(), [ints := 100, uses_global(), adder(0)][1:])") == (43, [101, 100])
    assert k.value("(p.norm2(), isinstance(p, Point), type(p) is Point)") == (25, True, True)
    assert k.value("(repr(r), r == Rec('a', 1.0))") == ("Rec(name='a', value=1.0)", True)


def test_modules_are_reimported(pair):
    _, k, _ = pair
    assert k.value("(m is __import__('math'), np is __import__('numpy'), torch.__name__)") == (True, True, "torch")


def test_numpy_arrays_every_dtype_and_layout(pair):
    _, k, _ = pair
    assert k.value("bool((f32 == np.arange(100_000, dtype=np.float32)).all()) and f32.dtype == np.float32") is True
    assert k.value("(small.tolist(), str(small.dtype))") == ([1, 2, 3], "int8")
    assert k.value("(view.shape, view.strides, view.flags.c_contiguous, int(view.sum()))") == (
        (10, 34), (800, 24), False, sum(r * 100 + c for r in range(10, 20) for c in range(0, 100, 3)))
    assert k.value("(tview.shape, bool((tview == i64.T).all()), bool(tview.flags.f_contiguous))") == ((100, 500), True, True)
    assert k.value("(rev[0].item(), rev[-1].item(), len(rev))") == (99999.0, 1.0, 50000)
    assert k.value("(int(bools.sum()) == int((np.random.default_rng(0).random(100_000) > 0.5).sum()), bools.dtype.name)") == (True, "bool")
    assert k.value("(c128[3].item(), f16.dtype.name, str(days[-1]), days.dtype.name)") == ((3 + 3j), "float16", "2199-12-31", "datetime64[D]")
    assert k.value("(int(structured['a'].sum()), structured.dtype.names)") == (49995000, ("a", "b"))
    assert k.value("objarr.tolist()") == [1, "a", None]
    assert k.value("(readonly.flags.writeable, int(readonly[300]))") == (False, 300 % 256)
    assert k.value("(fort.flags.f_contiguous, fort[3, 5].item())") == (True, 605.0)
    assert k.value("(type(mm).__name__, mm[123].item())") == ("ndarray", 123.0)


def test_numpy_views_share_memory_after_restore(pair):
    _, k, _ = pair
    assert k.value("(np.shares_memory(view, i64), np.shares_memory(tview, i64), np.shares_memory(rev, f32))") == (True, True, True)
    k.ok("i64[10, 0] = -5")
    assert k.value("(view[0, 0].item(), tview[0, 10].item())") == (-5, -5)


def test_pandas_objects(pair):
    _, k, _ = pair
    assert k.value("(df.shape, list(df.columns), df['s'].iloc[1], str(df['c'].dtype), str(df['t'].iloc[-1]))") == (
        (20_000, 5), ["a", "b", "s", "c", "t"], "y", "category", "2020-01-14 21:19:00")
    assert k.value("bool((series == pd.Series(np.random.default_rng(1).random(20_000), name='b')).all())") is True


def test_torch_tensors_dtype_shape_strides_views_grad(pair):
    _, k, _ = pair
    assert k.value("(tv.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), tv.storage_offset())") == (True, 10)
    assert k.value("(tuple(tt.shape), tt.stride(), tt[3, 2].item())") == ((100, 1000), (1, 100), 203.0)
    k.ok("base[11] = -1.0")
    assert k.value("(tv[1].item(), tt[11, 0].item())") == (-1.0, -1.0)
    assert k.value("(str(bf.dtype), str(half.dtype), str(ti.dtype), round(bf[-1].item(), 3), int(ti.sum()))") == (
        "torch.bfloat16", "torch.float16", "torch.int64", 1.0, sum(i % 7 for i in range(50_000)))
    assert k.value("(leaf.requires_grad, leaf.is_leaf, bool(torch.equal(leaf.grad, 2 * leaf.detach())))") == (True, True, True)
    assert k.value("(model[0].weight.requires_grad, type(model[0].weight).__name__)") == (True, "Parameter")


def test_training_resumes_identically(pair):
    saver, k, facts = pair
    # RNG draws, one more training step (dropout, Adam state, LR schedule) and parameters
    assert k.value(AFTER) == facts["after"]
    assert k.value("sched.get_last_lr()") == saver.value("sched.get_last_lr()")


def test_kernel_state(pair):
    _, k, facts = pair
    # the first cell after the restore is numbered as if the saving kernel went on
    assert facts["restored_count"] == facts["next_count"]
    assert facts["restored_history"] == facts["history"]
    assert k.value("os.getcwd().endswith('/work/sub')") is True
    assert k.value("(sys.path[0], sys.path[-1])") == ("/opt/extra_first", "/opt/extra_last")
    assert k.value("(os.environ.get('MY_SETTING'), 'GPUCKPT_TEST_BASE' in os.environ)") == ("on", False)


def test_restore_report(pair):
    _, _, facts = pair
    report = facts["report"]
    assert report.startswith("Restored ")
    assert f"from checkpoint {facts['checkpoint']}" in report
    assert "Not restored" not in report


def test_rng_of_a_library_no_variable_needs_is_set_when_it_is_imported(kernels):
    """A kernel that imported torch and numpy but holds none of their objects: the restore
    imports neither (torch alone takes seconds), and the first import afterwards gets the
    saved generator states, so the draws go on as in the saving kernel."""
    saver = kernels.start()
    saver.ok("import random, numpy, torch\nrandom.seed(1); numpy.random.seed(2); torch.manual_seed(3)\n"
             "del numpy, torch\nnotes = ['plain']")
    checkpoint = saver.save()
    draws = "(random.random(), float(numpy.random.rand()), torch.rand(1).item())"
    expected = saver.value(f"(lambda random, numpy, torch: {draws})(*map(__import__, ('random', 'numpy', 'torch')))")
    k = kernels.start()
    k.ok(f"%gpuckpt restore {checkpoint}")
    assert k.value("notes") == ["plain"]
    assert k.value("sorted(m for m in ('numpy', 'torch') if m in __import__('sys').modules)") == []
    k.ok("import random, numpy, torch")
    assert k.value(draws) == expected
    assert k.value("'exec_module' in vars(torch.__spec__.loader)") is False  # the import hook is gone
