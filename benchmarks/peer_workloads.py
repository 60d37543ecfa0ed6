"""The workloads of ``bench_peers.py``: the cells that build them, and their checks.

The bench process imports this module for the cells, which it runs in kernels as a user
would; the kernels import it (from ``PYTHONPATH``) for :func:`fingerprint` and
:func:`change`, which run through ``exec`` with their own globals, so the user's namespace
holds only what the cells made. Sizes scale linearly with ``scale`` (1.0 is the issue's).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any

CHANGED_FRACTION = 0.01
ARRAYS = 20
LAYER_WIDTH = 2048
DF_BYTES_PER_ROW = {"arrow": 86, "python": 194}
"""``memory_usage(deep=True)`` of one row of (d)'s frame, by where pandas keeps its ``str``
columns (see :func:`string_storage`)."""
NOTEBOOK_SECONDS = 60.0


@dataclass(frozen=True)
class Workload:
    """One workload: how to build it in a kernel, and what a restoring kernel needs."""

    key: str
    title: str
    setup: str
    """A first cell: the imports (a cell of its own, so Kishu's commit after ``cells`` is
    the commit of the data)."""
    cells: tuple[str, ...]
    names: tuple[str, ...]
    """The variables that systems saving "a dict of the variables" save."""
    imports: tuple[str, ...]
    """Imported in restoring kernels before the clock starts (none for the notebook, whose
    restore is compared with re-running it, imports included)."""
    definitions: str = ""
    """Cell defining the notebook's classes, run before restoring with systems that pickle
    classes by reference (torch.save, pickle): without it they cannot load."""


BUILD_A = """\
for _i in range({arrays}):
    globals()[f"a{{_i:02d}}"] = np.random.default_rng(_i).random({length})
del _i
"""

BUILD_B = """\
torch.manual_seed(0)
model = torch.nn.Sequential(*(torch.nn.Linear({width}, {width}) for _ in range({layers}))).to("{device}")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
model(torch.randn(8, {width}, device="{device}")).square().mean().backward()
optimizer.step()
optimizer.zero_grad()
"""

RECORD_CLASS = """\
@dataclasses.dataclass
class Record:
    id: int
    name: str
    score: float
    tags: list
"""

BUILD_C = RECORD_CLASS + """\
records = [Record(i, f"record-{{i:07d}}", i * 0.25, [f"t{{i % 13}}", f"g{{i % 101}}"]) for i in range({n})]
lookup = {{f"key-{{i:07d}}": {{"id": i, "label": f"label {{i % 1000}}", "weight": i / 7}} for i in range({n})}}
"""

BUILD_D = """\
_rng = np.random.default_rng(0)
_n = {rows}
_words = ["alpha", "beta", "gamma", "delta", "épsilon", "ζeta", "eta", "theta"]
df = pd.DataFrame({{
    "id": np.arange(_n, dtype=np.int64), "price": _rng.random(_n) * 100,
    "score": _rng.standard_normal(_n), "ratio": _rng.random(_n).astype(np.float32),
    "qty": _rng.integers(0, 1000, _n, dtype=np.int32), "flag": _rng.random(_n) < 0.5,
    "when": pd.Timestamp("2024-01-01") + pd.to_timedelta(_rng.integers(0, 86400 * 365, _n), unit="s"),
    "city": pd.Categorical.from_codes(_rng.integers(0, 50, _n), [f"city-{{i:02d}}" for i in range(50)]),
    "name": [f"user-{{i:08d}}" for i in range(_n)],
    "note": [None if i % 10 == 0 else f"{{_words[i % 8]}} {{_words[i * 7 % 8]}} #{{i % 9973}}" for i in range(_n)],
}})
del _rng, _n, _words
"""

MLP_CLASS = """\
class MLP(torch.nn.Module):
    def __init__(self, d, h, k):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                                       torch.nn.ReLU(), torch.nn.Linear(h, k))

    def forward(self, x):
        return self.net(x)
"""

NOTEBOOK = ("""\
rng = np.random.default_rng(0)
table = pd.DataFrame(rng.standard_normal(({samples}, 32), dtype=np.float32), columns=[f"x{{i}}" for i in range(32)])
teacher = rng.standard_normal((32, 10)).astype(np.float32)
table["label"] = (table.to_numpy() @ teacher).argmax(axis=1)
""", MLP_CLASS + """\
torch.manual_seed(0)
X = torch.tensor(table.drop(columns="label").to_numpy())
y = torch.tensor(table["label"].to_numpy())
model = MLP(32, 512, 10)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
""", """\
history = []
torch.manual_seed(1)
for step in range({steps}):
    idx = torch.randint(0, len(X), (256,))
    loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    history.append(loss.item())
""", """\
with torch.no_grad():
    pred = model(X).argmax(dim=1)
accuracy = float((pred == y).float().mean())
curve = pd.DataFrame({{"step": range(len(history)), "loss": history}})
""")


def string_storage() -> str:
    """Where pandas 3 keeps (d)'s ``str`` columns: in Arrow arrays where pyarrow is
    installed (which our save hands out of band buffer by buffer), else in object arrays
    of Python strings (packed into runs)."""
    return "arrow" if importlib.util.find_spec("pyarrow") is not None else "python"


def build(scale: float, notebook_steps: int = 0, device: str = "cpu") -> dict[str, Workload]:
    """The five workloads at ``scale`` (``notebook_steps`` from :data:`CALIBRATE`), (b)'s
    model and optimizer on torch ``device``."""
    length = max(1, int(2e9 * scale / 8 / ARRAYS))
    layers = max(1, round(250e6 * scale / (LAYER_WIDTH * (LAYER_WIDTH + 1))))
    objects = max(100, int(100_000 * scale))
    rows = max(1000, int(1e9 * scale / DF_BYTES_PER_ROW[string_storage()]))
    samples = max(10_000, int(2_000_000 * scale))
    params = layers * LAYER_WIDTH * (LAYER_WIDTH + 1)
    return {w.key: w for w in (
        Workload("a", f"numpy: {ARRAYS} float64 arrays of {length * 8 / 1e6:.0f} MB", "import numpy as np",
                 (BUILD_A.format(arrays=ARRAYS, length=length),), tuple(f"a{i:02d}" for i in range(ARRAYS)),
                 ("numpy",)),
        Workload("b", f"torch: {params / 1e6:.0f}M parameters with Adam state"
                 + (f" on {device}" if device != "cpu" else ""), "import torch",
                 (BUILD_B.format(width=LAYER_WIDTH, layers=layers, device=device),), ("model", "optimizer"),
                 ("torch",)),
        Workload("c", f"objects: {objects:,} dataclass instances + {objects:,} dicts", "import dataclasses",
                 (BUILD_C.format(n=objects),), ("Record", "records", "lookup"), (),
                 definitions="import dataclasses\n" + RECORD_CLASS),
        Workload("d", f"pandas: {rows:,} rows x 10 mixed columns ({string_storage()} strings)",
                 "import numpy as np\nimport pandas as pd",
                 (BUILD_D.format(rows=rows),), ("df",), ("numpy", "pandas")),
        Workload("e", f"notebook: {samples:,} samples, " + (f"{notebook_steps:,} training steps" if notebook_steps
                                                             else "training steps to be calibrated"),
                 "import numpy as np\nimport pandas as pd\nimport torch",
                 tuple(cell.format(samples=samples, steps=notebook_steps) for cell in NOTEBOOK),
                 ("rng", "table", "teacher", "MLP", "X", "y", "model", "optimizer", "history", "step", "idx",
                  "loss", "pred", "accuracy", "curve"), (), definitions="import torch\n" + MLP_CLASS),
    )}


# Run in the builder kernel after the notebook's first two cells: how many training steps
# make the notebook last ``params["seconds"]``. It trains a copy with its own generator, so
# the notebook's state is as if it had not run.
CALIBRATE = """\
import copy, torch
ns = shell.user_ns
model = copy.deepcopy(ns["model"])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
X, y = ns["X"], ns["y"]
g = torch.Generator().manual_seed(2)
done, started = 0, time.perf_counter()
while time.perf_counter() - started < params["probe"]:
    idx = torch.randint(0, len(X), (256,), generator=g)
    loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    done += 1
rate = done / (time.perf_counter() - started)
# 1.3: the probe ran while the machine was busier than a later re-run may find it
result = {"steps": max(10, int(1.3 * rate * params["seconds"]))}
"""


# -- run inside kernels --------------------------------------------------------------------

def _sample_sum(values: Any, step: int = 4099) -> float:
    return round(float(values.reshape(-1)[::step].astype("float64").sum()), 6)


def fingerprint(key: str, ns: dict[str, Any]) -> dict[str, Any]:
    """A JSON-able digest of workload ``key``'s variables in namespace ``ns``, by part."""
    if key == "a":
        return {f"a{i:02d}": _sample_sum(ns[f"a{i:02d}"]) for i in range(ARRAYS)}
    if key == "b":
        return _torch_fingerprint(ns["model"], ns["optimizer"])
    if key == "c":
        import dataclasses

        records, lookup = ns["records"], ns["lookup"]
        return {"sizes": [len(records), len(lookup)], "ids": sum(r.id for r in records),
                "scores": sum(r.score for r in records), "records": [repr(r) for r in records[::997]],
                "lookup": [repr(v) for v in list(lookup.items())[::997]],
                "class": dataclasses.is_dataclass(records[0]) and type(records[0]) is ns["Record"]}
    if key == "d":
        df = ns["df"]
        return {"shape": list(df.shape), "dtypes": [[str(t), getattr(t, "storage", None)] for t in df.dtypes],
                **{c: _sample_sum(df[c].to_numpy(), 1) for c in ("id", "price", "score", "ratio", "qty", "flag")},
                "when": [str(df["when"].min()), str(df["when"].max())],
                "city": df["city"].cat.codes.to_numpy()[::997].tolist(),
                **{c: _strings_digest(df[c]) for c in ("name", "note")}}
    if key == "e":
        return {**_torch_fingerprint(ns["model"], ns["optimizer"]),
                "table": [_sample_sum(ns["table"]["x0"].to_numpy(), 1), int(ns["table"]["label"].sum())],
                "X": _sample_sum(ns["X"].numpy()), "history": round(sum(ns["history"]), 4),
                "accuracy": ns["accuracy"], "curve": ns["curve"].shape[0], "pred": int(ns["pred"].sum()),
                "class": type(ns["model"]) is ns["MLP"]}
    raise ValueError(key)


def _strings_digest(column: Any) -> str:
    """A digest of every value of a string column, in order: pandas' hash of each value
    (the same for Arrow and object storage; a missing value gets a hash of its own): 0.6 s
    for 2.9M strings, against 1.7 s to hash their repr."""
    import hashlib

    import pandas as pd

    return hashlib.sha256(pd.util.hash_pandas_object(column, index=False).to_numpy().tobytes()).hexdigest()


def state_bytes(ns: dict[str, Any], names: tuple[str, ...]) -> int:
    """Memory held by the variables ``names``: every object reachable from them, counted
    once, numpy data with the arrays owning it, torch storages by address, and pyarrow
    arrays by their own ``sys.getsizeof`` (which counts their buffers, and whose chunks
    are not shown to the GC)."""
    import gc
    import sys
    import types

    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    seen: set[int] = set()
    storages: set[int] = set()
    total = 0
    stack = [ns[name] for name in names if name in ns]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        kind = type(obj).__module__
        # pandas' __sizeof__ is its deep memory usage: its parts are counted on their own
        total += object.__sizeof__(obj) if kind.startswith("pandas") else sys.getsizeof(obj)
        if kind.startswith("torch") and hasattr(obj, "untyped_storage"):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                total += storage.nbytes()
        elif kind == "numpy" and str(getattr(obj, "dtype", "")) == "object":
            stack.extend(obj.ravel().tolist())  # numpy does not show the GC an array's items
        stack.extend(gc.get_referents(obj))
    return total


def _torch_fingerprint(model: Any, optimizer: Any) -> dict[str, Any]:
    weights = list(model.parameters())
    return {"weights": [_sample_sum(p.detach().cpu().numpy()) for p in weights],
            "adam": [_sample_sum(s["exp_avg_sq"].cpu().numpy()) for s in optimizer.state.values()],
            "devices": sorted({str(p.device) for p in weights}
                              | {str(s["exp_avg"].device) for s in optimizer.state.values()}),
            "gradients": [p.grad is not None for p in weights],
            "shared": all(a is b for a, b in zip(optimizer.param_groups[0]["params"], weights, strict=True))}


def change(key: str, ns: dict[str, Any], seed: int, total: int) -> int:
    """Overwrite about :data:`CHANGED_FRACTION` of workload ``key``'s data in place, in
    contiguous runs (as an update of some rows or layers would); return the bytes changed.

    ``total`` is the state's size (:func:`state_bytes`): the arrays of (a), (b) and (e)
    get :data:`CHANGED_FRACTION` of it; (c) and (d) that fraction of their records or rows.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    if key == "a":
        arrays = [ns[f"a{i:02d}"] for i in range(0, ARRAYS, ARRAYS // 4)]
        return _overwrite(arrays, total, rng)
    if key == "b":
        weights = [_flat(p) for p in ns["model"].parameters() if p.dim() == 2]
        return _overwrite(weights[::max(1, len(weights) // 4)][:4], total, rng)
    if key == "e":
        return _overwrite([_flat(ns["X"])], total, rng)
    if key == "c":
        records = ns["records"]
        count = math.ceil(len(records) * CHANGED_FRACTION)
        start = (len(records) - count) // 2
        for r in records[start:start + count]:
            r.score = float(rng.random())
        return count
    if key == "d":
        df = ns["df"]
        count = math.ceil(len(df) * CHANGED_FRACTION)
        start = (len(df) - count) // 2
        changed = 0
        for column in ("price", "score", "ratio", "qty"):
            values = df[column].to_numpy()
            new = (rng.random(count) * 100).astype(values.dtype)
            df.iloc[start:start + count, df.columns.get_loc(column)] = new
            changed += new.nbytes
        return changed
    raise ValueError(key)


def _flat(tensor: Any) -> Any:
    """A 1-D tensor over all of ``tensor``'s storage, on its device, in memory order
    (whatever its strides)."""
    import torch

    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(tensor.untyped_storage()).detach()


def _overwrite(arrays: list[Any], total: int, rng: Any) -> int:
    """Overwrite the middle of the memory of each of ``arrays`` (contiguous numpy arrays,
    or 1-D tensors from :func:`_flat`), together ``CHANGED_FRACTION`` of ``total`` bytes."""
    per_array = total * CHANGED_FRACTION / len(arrays)
    changed = 0
    for arr in arrays:
        if hasattr(arr, "untyped_storage"):
            import torch

            count = min(arr.numel(), math.ceil(per_array / arr.element_size()))
            start = (arr.numel() - count) // 2
            arr[start:start + count] = torch.from_numpy(rng.random(count)).to(arr.dtype).to(arr.device)
            changed += count * arr.element_size()
            continue
        if not arr.flags.c_contiguous:
            raise ValueError("only contiguous memory can be overwritten in place through reshape")
        flat = arr.reshape(-1)
        count = min(flat.size, math.ceil(per_array / flat.itemsize))
        start = (flat.size - count) // 2
        flat[start:start + count] = rng.random(count).astype(flat.dtype)
        changed += count * flat.itemsize
    return changed
