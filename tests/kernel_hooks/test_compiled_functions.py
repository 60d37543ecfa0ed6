"""Functions and modules compiled with ``torch.compile`` come back compiled, the same way, and
compile again on their first call; decorators' wrappers come back wrapping; the globals
dynamo put into the notebook's namespace are neither saved nor reported.

The kernel tests save in one kernel, restore in a fresh one and use what came back there,
against an uninterrupted run where training continues. The in-process tests read what
torch.compile and dynamo left behind, for the cases a kernel test would only slow down.
"""

from __future__ import annotations

from typing import Any

import pytest
from kernel_processes import KernelFactory

torch = pytest.importorskip("torch")
# Importing inductor imports torch.utils.mkldnn, which uses torch.jit.script_method.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

from kernel_hooks.codecs.compiled_functions import compile_again, compile_arguments  # noqa: E402
from kernel_hooks.state.compiler_globals import generated  # noqa: E402
from kernel_hooks.state.namespace import user_variables  # noqa: E402

COMPILED = """
import hashlib, torch, torch.nn as nn

@torch.compile(backend="eager", fullgraph=True, dynamic=True)
def scaled(x, scale=2.0, split=False):
    if split:
        torch._dynamo.graph_break()  # which fullgraph=True refuses
    return torch.sin(x) * scale

@torch.compile(backend="eager")
def with_break(x):
    y = torch.cos(x) + 1
    torch._dynamo.graph_break()  # dynamo installs a function that resumes after it
    return y * 3

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
compiled = torch.compile(model, backend={backend!r})
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.randn(32, 8), torch.randn(32, 1)
losses = []
def step():
    opt.zero_grad()
    loss = nn.functional.mse_loss(compiled(data[0]), data[1])
    loss.backward()
    opt.step()
    losses.append(loss.item().hex())
x = torch.linspace(-1, 1, 5)
scaled(x); with_break(x); step(); step()
"""
RESULT = "(losses, hashlib.sha256(b''.join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())"
DYNAMO_GLOBALS = "sorted(n for n in globals() if n.startswith(('__compiled_fn', '__resume_at', '__builtins_dict')))"


def _restored(kernels: KernelFactory, checkpoint: str) -> Any:
    resumed = kernels.start()
    report = resumed.ok(f"%gpuckpt restore {checkpoint}")
    assert "Not restored" not in report and "Cells to re-run" not in report, report
    return resumed


def test_compiled_functions_and_model_come_back_compiled_and_train_on(kernels: KernelFactory) -> None:
    saving = kernels.start()
    saving.ok(COMPILED.format(backend="aot_eager"))
    assert saving.value(DYNAMO_GLOBALS)  # dynamo did put its globals into the namespace
    out = saving.ok("%gpuckpt save")
    assert "Not saved" not in out, out
    checkpoint = out.strip().splitlines()[-1]
    names = {v["name"] for v in kernels.manifest(checkpoint)["variables"]}
    assert {"scaled", "with_break", "compiled", "model", "opt"} <= names
    assert not [n for n in names if n.startswith("__")], names
    expected = saving.value("(scaled(x).tolist(), scaled(x, 0.5).tolist(), with_break(x).tolist())")
    assert "Unsupported" in (saving.run("scaled(x, split=True)").error or "")

    resumed = _restored(kernels, checkpoint)
    assert resumed.value(DYNAMO_GLOBALS) == []
    assert resumed.value("(type(compiled).__name__, compiled._orig_mod is model, scaled.__wrapped__.__name__, "
                         "torch._dynamo.utils.counters['stats']['unique_graphs'])") == ("OptimizedModule", True, "scaled", 0)
    got = resumed.value("(scaled(x).tolist(), scaled(x, 0.5).tolist(), with_break(x).tolist())")
    assert got == expected
    assert resumed.value("torch._dynamo.utils.counters['stats']['unique_graphs']") >= 3  # compiled again, on first call
    assert "Unsupported" in (resumed.run("scaled(x, split=True)").error or "")  # still fullgraph=True
    resumed.ok("step(); step()")
    assert "Not saved" not in resumed.ok("%gpuckpt save")  # the restored kernel's own dynamo globals are left out

    uninterrupted = kernels.start()
    uninterrupted.ok(COMPILED.format(backend="aot_eager"))
    uninterrupted.ok("step(); step()")
    assert resumed.value(RESULT) == uninterrupted.value(RESULT)


IN_PLACE = """
import hashlib, torch, torch.nn as nn
from kernel_hooks.codecs.compiled_functions import compile_arguments

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))

    def forward(self, x, split=False):
        if split:
            torch._dynamo.graph_break()  # which fullgraph=True refuses
        return self.body(x)

def arguments(module):
    wrapper = module._compiled_call_impl
    return compile_arguments(wrapper.__closure__[wrapper.__code__.co_freevars.index("self")].cell_contents)

torch.manual_seed(0)
model = Net()
model.compile(backend="aot_eager", fullgraph=True)
plain = nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.randn(32, 8), torch.randn(32, 1)
losses = []
def step():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(data[0]), data[1])
    loss.backward()
    opt.step()
    losses.append(loss.item().hex())
step(); step()
"""
COMPILED_IN_PLACE = "(arguments(model), model._compiled_call_impl._torchdynamo_orig_callable == model._call_impl)"


def test_a_model_compiled_in_place_comes_back_compiled_the_same_way_and_trains_on(kernels: KernelFactory) -> None:
    saving = kernels.start()
    saving.ok(IN_PLACE)
    checkpoint = saving.save()
    expected = saving.value("model(data[0]).tolist()")
    assert saving.value(COMPILED_IN_PLACE) == ({"backend": "aot_eager", "fullgraph": True}, True)

    resumed = _restored(kernels, checkpoint)
    assert resumed.value(COMPILED_IN_PLACE) == ({"backend": "aot_eager", "fullgraph": True}, True)
    assert resumed.value("(plain._compiled_call_impl, torch._dynamo.utils.counters['stats']['unique_graphs'])") \
        == (None, 0)
    assert resumed.value("model(data[0]).tolist()") == expected
    assert resumed.value("torch._dynamo.utils.counters['stats']['unique_graphs']") >= 1  # compiled again, on first call
    assert "Unsupported" in (resumed.run("model(data[0], split=True)").error or "")  # still fullgraph=True
    resumed.ok("step(); step()")

    uninterrupted = kernels.start()
    uninterrupted.ok(IN_PLACE)
    uninterrupted.ok("step(); step()")
    assert resumed.value(RESULT) == uninterrupted.value(RESULT)


DECORATED = """
import functools, torch

def counted(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)
    wrapper.calls = 0
    return wrapper

@counted
def plus_one(x):
    return x + 1

@torch.no_grad()
def doubled(t):
    return t * 2

@functools.lru_cache(maxsize=16)
def square(n):
    return n * n

@counted
@torch.compile(backend="eager")
def cubed(t):
    return t ** 3

fast_tanh = torch.compile(torch.tanh, backend="eager")
eager_only = torch.compiler.disable(plus_one)
from compiled_library import quartic  # compiled where it is defined: found again by name
w = torch.ones(3, requires_grad=True)
plus_one(1); square(4); cubed(w); fast_tanh(w); quartic(w)
"""
LIBRARY = """
import torch

@torch.compile(backend="eager")
def quartic(t):
    return t ** 4
"""
USE = ("(plus_one(2), plus_one.calls, doubled(w).requires_grad, square(5), square.cache_parameters()['maxsize'], "
       "cubed(w).tolist(), cubed.calls, cubed.__wrapped__._torchdynamo_orig_callable.__name__, "
       "fast_tanh(w).tolist(), eager_only(3), plus_one.calls, quartic(w).tolist())")


def test_decorated_functions_come_back_wrapped_the_same_way(kernels: KernelFactory) -> None:
    (kernels.workdir / "compiled_library.py").write_text(LIBRARY)
    saving = kernels.start()
    saving.ok(DECORATED)
    out = saving.ok("%gpuckpt save")
    assert "Not saved" not in out, out
    checkpoint = out.strip().splitlines()[-1]
    expected = saving.value(USE)

    resumed = _restored(kernels, checkpoint)
    assert resumed.value(USE) == expected
    assert resumed.value("(square.cache_info().currsize, square.__wrapped__.__module__, type(square).__name__)") \
        == (1, "__main__", "_lru_cache_wrapper")
    assert resumed.value("__import__('compiled_library').quartic is quartic")


def test_an_inductor_compiled_model_comes_back_and_trains_on(kernels: KernelFactory) -> None:
    """The default backend, which generates and builds C++ on a CPU (about 20 s the first time
    on a machine, 4 s from inductor's cache)."""
    saving = kernels.start()
    saving.ok(COMPILED.format(backend="inductor"), timeout=300)
    checkpoint = saving.save()
    resumed = _restored(kernels, checkpoint)
    resumed.ok("step(); step()", timeout=300)
    assert resumed.value("(type(compiled.dynamo_ctx).__name__, torch._dynamo.utils.counters['stats']['unique_graphs'] > 0)") \
        == ("OptimizeContext", True)
    uninterrupted = kernels.start()
    uninterrupted.ok(COMPILED.format(backend="inductor"), timeout=300)
    uninterrupted.ok("step(); step()")
    assert resumed.value(RESULT) == uninterrupted.value(RESULT)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_inductor_compiled_model_on_cuda_comes_back_and_trains_on(kernels: KernelFactory) -> None:
    cuda = COMPILED.format(backend="inductor").replace(
        "data = torch.randn(32, 8), torch.randn(32, 1)",
        "model.cuda()\ndata = torch.randn(32, 8, device='cuda'), torch.randn(32, 1, device='cuda')")
    result = RESULT.replace("p.detach()", "p.detach().cpu()")
    saving = kernels.start()
    saving.ok(cuda, timeout=300)
    checkpoint = saving.save()
    resumed = _restored(kernels, checkpoint)
    assert resumed.value("next(compiled.parameters()).device.type") == "cuda"
    resumed.ok("step(); step()", timeout=300)
    assert resumed.value("torch._dynamo.utils.counters['stats']['unique_graphs'] > 0")
    uninterrupted = kernels.start()
    uninterrupted.ok(cuda, timeout=300)
    uninterrupted.ok("step(); step()")
    assert resumed.value(result) == uninterrupted.value(result)


def _context(compiled: Any) -> Any:
    """The dynamo context of what ``torch.compile`` returned."""
    if isinstance(compiled, torch.nn.Module):
        return compiled.dynamo_ctx
    return compiled.__closure__[compiled.__code__.co_freevars.index("self")].cell_contents


def _sine(x: Any) -> Any:
    return torch.sin(x)


@pytest.mark.parametrize("arguments", [
    {"backend": "eager"},
    {"backend": "aot_eager", "fullgraph": True, "dynamic": False, "recompile_limit": 3},
    {"backend": "inductor", "options": {"max_autotune": True, "coordinate_descent_tuning": True}},
    {"backend": "inductor", "dynamic": True, "isolate_recompiles": True, "name": "region"},
    {"backend": "eager", "options": {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}},
], ids=["eager", "fullgraph", "inductor options", "inductor dynamic", "guard filter"])
def test_compile_arguments_are_read_back_from_what_torch_compile_made(arguments: dict[str, Any]) -> None:
    for target in (_sine, torch.nn.Linear(2, 2)):
        made = torch.compile(target, **{**arguments, "options": dict(arguments.get("options", {}))})
        assert compile_arguments(_context(made)) == arguments
        again = compile_again(target, compile_arguments(_context(made)))
        assert compile_arguments(_context(again)) == arguments


def test_a_mode_comes_back_as_its_options() -> None:
    made = torch.compile(_sine, mode="max-autotune-no-cudagraphs")
    again = compile_again(_sine, compile_arguments(_context(made)))
    assert compile_arguments(_context(again)) == compile_arguments(_context(made)) == {
        "backend": "inductor", "options": {"max_autotune": True, "coordinate_descent_tuning": True}}


CELL = """
import math
@torch.compile(backend="eager")
def f(x):
    y = torch.sin(x) + math.pi
    torch._dynamo.graph_break()
    return torch.nn.functional.relu(y * 2)
module = torch.compile(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()), backend="aot_eager")
def kinds(x):
    return isinstance(x, torch.Tensor), torch.float32
f(torch.randn(3)); module(torch.randn(2, 3)); torch.compile(kinds, backend="eager")(torch.randn(2))
__import_math_tools = 3
__builtins_dict___7 = {}
__resume_at_1_2 = "mine"
"""


def test_only_what_dynamo_installed_is_left_out_of_the_variables() -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch}
    before = set(namespace)
    exec(compile(CELL, "<cell>", "exec"), namespace)
    made = {name for name in set(namespace) - before if name.startswith("__") and not name.endswith("__")}
    mine = {"__import_math_tools", "__builtins_dict___7", "__resume_at_1_2"}
    assert any(name.startswith("__compiled_fn") for name in made) and any(
        name.startswith("__resume_at") for name in made - mine)
    assert generated(namespace) == made - mine
    assert set(user_variables(namespace, {})) == {"torch", "math", "f", "module", "kinds"} | mine
