"""A structural fingerprint of an object's state, computed inside a kernel, to tell whether an
object restored from a checkpoint equals the one that was saved.

It walks the object graph from the object and writes one line per object met, ``path<TAB>
token``, and hashes the lines. What each token holds:

* ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``: the type and the
  value (a long string or bytes by length and sha256);
* ``list`` and ``tuple`` (in order), ``dict`` (in key order, as dict equality ignores insertion
  order; an ``OrderedDict`` in its order; keys that are not plain values in insertion order,
  which pickle keeps), ``set`` and ``frozenset`` (their items in an order of their own
  leading lines), and subclasses of these with their attributes;
* numpy arrays and scalars, torch tensors: dtype, shape (and a tensor's device, grad and
  ``requires_grad``) and the sha256 of the bytes; an object array by its items;
* pandas ``DataFrame``, ``Series`` and ``Index``: type, shape, dtypes, names, index and the
  values of each column;
* classes, modules, library functions: by qualified name; a class defined in ``__main__``
  also by its attributes, a Python function also by its code (bytecode, constants, names),
  defaults, closure and attributes;
* an object whose state is all in Python (``__dict__`` and slots, as CPython's own test for
  pickling by default decides): its type and those, read directly, calling none of its hooks
  (matplotlib's ``CallbackRegistry.__getstate__`` advances a counter);
* any other object (state kept in C): its type and what ``__reduce_ex__(4)`` says rebuilds it,
  or, if it cannot be reduced, its ``__dict__``, slots and the attributes its type exposes.

An object met again is written as a reference to the path where it was met first, so cycles
end and shared objects show as shared; immutable values and library classes are written in
full each time, as which of them are shared is up to Python. Ignored by design, as they are
the process's, not the object's: locks, weak references and weak containers, threads, the
kernel's own machinery (IPython, ipykernel, comms, zmq, tornado, asyncio) and memory addresses
in strings; each is written as its type alone.

Imports nothing at module level beyond the standard library, so a kernel that loads it
imports no library its cells did not.
"""

from __future__ import annotations

import collections
import copyreg
import hashlib
import json
import re
import struct
import sys
import threading
import types
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LONG = 200
"""Strings and bytes longer than this are written by length and hash."""
SORT_LINES = 50
"""How many leading lines of a set's item order it (see :func:`_sort_key`)."""
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_VALUES = (type(None), bool, int, float, complex)
_IGNORED = (type(threading.Lock()), type(threading.RLock()), weakref.ref, weakref.ProxyType,
            weakref.CallableProxyType, weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet,
            threading.Thread)
_MACHINERY = frozenset({"IPython", "ipykernel", "comm", "zmq", "tornado", "jupyter_client", "asyncio"})
"""Top-level packages of the kernel's own objects (a widget's comm leads to the whole kernel)."""
_CODE_ATTRS = ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_flags", "co_names", "co_varnames",
               "co_freevars", "co_cellvars")


_POINTER = struct.calcsize("P")


def _python_layout(kind: type) -> bool:
    """Whether instances of ``kind`` keep no state in C: none beyond ``object``'s but a
    ``__dict__``, a weak reference list and slots (the test CPython's ``object.__reduce_ex__``
    makes before it pickles an object by its ``__dict__`` and slots)."""
    if kind.__itemsize__:
        return False
    size = object.__basicsize__ + _POINTER * len(copyreg._slotnames(kind))  # type: ignore[attr-defined]
    size += _POINTER * ((kind.__dictoffset__ > 0) + (kind.__weakrefoffset__ > 0))
    return kind.__basicsize__ <= size


def _qualname(kind: Any) -> str:
    return f"{getattr(kind, '__module__', None)}.{getattr(kind, '__qualname__', getattr(kind, '__name__', '?'))}"


def _sha(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _text(value: str | bytes) -> str:
    if isinstance(value, str):
        value = _ADDRESS.sub("0x?", value)
    if len(value) <= LONG:
        return repr(value)
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return f"len={len(value)} sha={_sha(data)}"


class _Enough(Exception):
    """A walk wrote all the lines it was asked for."""


def _sort_key(obj: Any) -> str:
    """The digest of ``obj``'s first :data:`SORT_LINES` lines: enough to order a set's items
    the same in every process (their own order can differ after a restore), without walking,
    for each item, a graph that may lead back to the set (a walk for a sort key stops at sets)."""
    walk = _Walk(limit=SORT_LINES)
    try:
        walk.visit(obj, "")
    except _Enough:
        pass
    return _digest(walk.lines)


def _key_label(key: Any) -> str | None:
    """A dict key as it shows in a path, if it is short and plain: its repr."""
    if type(key) in (str, int, float, bool, type(None)) and len(repr(key)) <= 60:
        return repr(key)
    return None


class _Walk:
    """One fingerprint: the lines written so far and the objects met (kept alive, so that a
    temporary made while reducing cannot free its id for another)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.lines: list[str] = []
        self.seen: dict[int, str] = {}
        """The path of each object met, by id."""
        self.kept: list[Any] = []
        self.numpy = sys.modules.get("numpy")
        self.torch = sys.modules.get("torch")
        self.pandas = sys.modules.get("pandas")
        self.scalars: tuple[type, ...] = () if self.numpy is None else (self.numpy.generic,)

    def emit(self, path: str, token: str) -> None:
        self.lines.append(f"{path}\t{token}")
        if self.limit is not None and len(self.lines) >= self.limit:
            raise _Enough

    def visit(self, obj: Any, path: str) -> None:
        kind = type(obj)
        if kind in _VALUES:
            self.emit(path, f"{kind.__name__}:{obj!r}")
            return
        if kind in (str, bytes):
            self.emit(path, f"{kind.__name__}:{_text(obj)}")
            return
        # Which immutable value or library class is shared is not state (tuples are shared
        # where Python or a library caches them): those are written in full each time.
        shareable = kind in (tuple, frozenset) or isinstance(obj, (types.ModuleType, *self.scalars)) or (
            isinstance(obj, type) and obj.__module__ != "__main__")
        if not shareable:
            if id(obj) in self.seen:
                self.emit(path, f"ref:{self.seen[id(obj)]}")
                return
            self.seen[id(obj)] = path
        self.kept.append(obj)
        try:
            self._visit(obj, kind, path)
        except RecursionError:
            self.emit(path, f"too deep:{_qualname(kind)}")

    def _visit(self, obj: Any, kind: type, path: str) -> None:
        if isinstance(obj, _IGNORED) or (kind.__module__ or "").split(".")[0] in _MACHINERY:
            self.emit(path, f"ignored:{_qualname(kind)}")
        elif isinstance(obj, type):
            self._class(obj, path)
        elif isinstance(obj, types.ModuleType):
            self.emit(path, f"module:{obj.__name__}")
        elif isinstance(obj, types.FunctionType):
            self._function(obj, path)
        elif isinstance(obj, types.CodeType):
            self._code(obj, path)
        elif isinstance(obj, (types.BuiltinFunctionType, types.MethodWrapperType)):
            self.emit(path, f"builtin:{_qualname(obj)}")
            owner = getattr(obj, "__self__", None)
            if owner is not None and not isinstance(owner, types.ModuleType):
                self.visit(owner, f"{path}.__self__")
        elif isinstance(obj, types.MethodType):
            self.emit(path, "method")
            self.visit(obj.__func__, f"{path}.__func__")
            self.visit(obj.__self__, f"{path}.__self__")
        elif isinstance(obj, (types.WrapperDescriptorType, types.MethodDescriptorType,
                              types.GetSetDescriptorType, types.MemberDescriptorType)):
            self.emit(path, f"descriptor:{_qualname(obj.__objclass__)}.{obj.__name__}")
        elif isinstance(obj, (property, staticmethod, classmethod)):
            self.emit(path, f"{kind.__name__}")
            for attr in ("fget", "fset", "fdel") if isinstance(obj, property) else ("__func__",):
                self.visit(getattr(obj, attr), f"{path}.{attr}")
        elif isinstance(obj, types.CellType):
            self.emit(path, "cell")
            try:
                self.visit(obj.cell_contents, f"{path}.contents")
            except ValueError:
                self.emit(f"{path}.contents", "empty")
        elif not self._library(obj, path):
            self._container(obj, kind, path) or self._object(obj, kind, path)

    # Classes, functions, code

    def _class(self, cls: type, path: str) -> None:
        self.emit(path, f"class:{_qualname(cls)}")
        if cls.__module__ != "__main__":
            return
        self.emit(f"{path}.__bases__", ",".join(_qualname(b) for b in cls.__bases__))
        for name, value in sorted(vars(cls).items()):
            if name not in ("__dict__", "__weakref__", "__module__", "__slotnames__"):  # the last: copyreg's cache
                self.visit(value, f"{path}.{name}")

    def _function(self, func: types.FunctionType, path: str) -> None:
        self.emit(path, f"function:{_qualname(func)}")
        self.visit(func.__code__, f"{path}.__code__")
        self.visit(func.__defaults__, f"{path}.__defaults__")
        self.visit(func.__kwdefaults__, f"{path}.__kwdefaults__")
        self.visit(func.__closure__, f"{path}.__closure__")
        self.visit(func.__dict__, f"{path}.__dict__")

    def _code(self, code: types.CodeType, path: str) -> None:
        attrs = ",".join(f"{a}={getattr(code, a)!r}" for a in _CODE_ATTRS)
        self.emit(path, f"code:{code.co_qualname} {_sha(code.co_code)} {attrs}")
        self.visit(code.co_consts, f"{path}.co_consts")

    # numpy, torch, pandas

    def _library(self, obj: Any, path: str) -> bool:
        """Writes ``obj`` if it is a numpy, torch or pandas object with a token of its own."""
        np, torch, pd = self.numpy, self.torch, self.pandas
        if np is not None and isinstance(obj, np.ndarray):
            self._array(obj, path, f"ndarray:{_qualname(type(obj))}:{obj.dtype.str}:{obj.shape}")
            if hasattr(obj, "__dict__"):  # a subclass's own attributes (astropy's unit, a mask)
                self.visit(vars(obj), f"{path}.__dict__")
        elif np is not None and isinstance(obj, np.generic) and obj.dtype.kind != "O":
            self.emit(path, f"numpy:{_qualname(type(obj))}:{obj.dtype.str}:{obj.tobytes().hex()}")
        elif torch is not None and isinstance(obj, torch.Tensor):
            self._tensor(obj, path)
        elif pd is not None and isinstance(obj, pd.DataFrame):
            self.emit(path, f"DataFrame:{_qualname(type(obj))}:{obj.shape}")
            self.visit(obj.columns, f"{path}.columns")
            self.visit(obj.index, f"{path}.index")
            for i in range(obj.shape[1]):
                column = obj.iloc[:, i]
                self.emit(f"{path}[{i}]", f"dtype:{column.dtype!r}")
                self._array(column.to_numpy(), f"{path}[{i}].values", "values")
            self.visit(obj.attrs, f"{path}.attrs")
        elif pd is not None and isinstance(obj, pd.Series):
            self.emit(path, f"Series:{_qualname(type(obj))}:{obj.shape}:{obj.dtype!r}")
            self.visit(obj.name, f"{path}.name")
            self.visit(obj.index, f"{path}.index")
            self._array(obj.to_numpy(), f"{path}.values", "values")
            self.visit(obj.attrs, f"{path}.attrs")
        elif pd is not None and isinstance(obj, pd.Index):
            self.emit(path, f"Index:{_qualname(type(obj))}:{obj.dtype!r}")
            self.visit(list(obj.names), f"{path}.names")
            self._array(obj.to_numpy(), f"{path}.values", "values")
        else:
            return False
        return True

    def _array(self, array: Any, path: str, token: str) -> None:
        if array.dtype.kind == "O":
            self.emit(path, f"{token}:objects")
            self.visit(array.tolist(), f"{path}.items")
        else:
            self.emit(path, f"{token}:{_sha(self.numpy.ascontiguousarray(array).tobytes())}")

    def _tensor(self, tensor: Any, path: str) -> None:
        torch = self.torch
        token = (f"tensor:{_qualname(type(tensor))}:{tensor.dtype}:{tuple(tensor.shape)}:{tensor.device}"
                 f":grad={tensor.requires_grad}")
        try:
            flat = tensor.detach().cpu().contiguous().reshape(-1)
            data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
            self.emit(path, f"{token}:{_sha(data)}")
        except (RuntimeError, TypeError) as e:  # sparse, quantized or meta tensors
            self.emit(path, f"{token}:{type(e).__name__}")
        if tensor.grad is not None:
            self.visit(tensor.grad, f"{path}.grad")
        if vars(tensor):
            self.visit(vars(tensor), f"{path}.__dict__")

    # Containers and the rest

    def _container(self, obj: Any, kind: type, path: str) -> bool:
        """Writes ``obj`` if it is a builtin container or a subclass of one."""
        if isinstance(obj, (list, tuple)):
            self.emit(path, f"{_qualname(kind)}:{len(obj)}")
            for i, item in enumerate(obj):
                self.visit(item, f"{path}[{i}]")
        elif isinstance(obj, dict):
            self.emit(path, f"{_qualname(kind)}:{len(obj)}")
            # plain keys in their order, as dict equality ignores insertion order (not an
            # OrderedDict's), and after them the others, in insertion order (pickle keeps it)
            items = [(_key_label(key), key, value) for key, value in obj.items()]
            plain = [item for item in items if item[0] is not None]
            if not isinstance(obj, collections.OrderedDict):
                plain.sort(key=lambda item: item[0])
            for label, _, value in plain:
                self.visit(value, f"{path}[{label}]")
            for i, (_, key, value) in enumerate(item for item in items if item[0] is None):
                self.visit(key, f"{path}<key {i}>")
                self.visit(value, f"{path}[<key {i}>]")
            factory = getattr(obj, "default_factory", None)
            if factory is not None:
                self.visit(factory, f"{path}.default_factory")
        elif isinstance(obj, (set, frozenset)):
            # a set's order is not its state: its items in the order of their leading lines
            self.emit(path, f"{_qualname(kind)}:{len(obj)}")
            if self.limit is None:  # a sort key's walk stops here: its graph may lead back to this set
                for i, item in enumerate(sorted(obj, key=_sort_key)):
                    self.visit(item, f"{path}{{{i}}}")
        else:
            return False
        if kind not in (list, tuple, dict, set, frozenset):
            self._attributes(obj, path)
        return True

    def _attributes(self, obj: Any, path: str) -> None:
        state = getattr(obj, "__dict__", None)
        if state:
            self.visit(state, f"{path}.__dict__")
        for name in copyreg._slotnames(type(obj)):  # type: ignore[attr-defined]
            if hasattr(obj, name):
                self.visit(getattr(obj, name), f"{path}.{name}")

    def _c_attributes(self, obj: Any, kind: type, path: str) -> None:
        """The attributes a C type exposes as data descriptors: all of its state one can read."""
        names = sorted({name for cls in kind.__mro__ if cls is not object for name, attr in vars(cls).items()
                        if isinstance(attr, (types.GetSetDescriptorType, types.MemberDescriptorType))
                        and not name.startswith("__")})
        for name in names:
            try:
                value = getattr(obj, name)
            except Exception as e:
                self.emit(f"{path}.{name}", f"unreadable:{type(e).__name__}")
            else:
                self.visit(value, f"{path}.{name}")

    def _object(self, obj: Any, kind: type, path: str) -> None:
        if _python_layout(kind):
            # its state is all in __dict__ and slots: read them, calling none of its hooks
            # (matplotlib's CallbackRegistry.__getstate__ advances a counter, say)
            self.emit(path, f"object:{_qualname(kind)}")
            self._attributes(obj, path)
            return
        try:
            reduced = obj.__reduce_ex__(4)
        except Exception as e:  # not picklable: what Python can see of it
            self.emit(path, f"object:{_qualname(kind)}:not reducible ({type(e).__name__})")
            self._attributes(obj, path)
            self._c_attributes(obj, kind, path)
            return
        if isinstance(reduced, str):
            self.emit(path, f"global:{_qualname(kind)}:{reduced}")
            return
        self.emit(path, f"object:{_qualname(kind)}")
        for label, part in zip(("reduce", "args", "state", "listitems", "dictitems"), reduced, strict=False):
            if label in ("state", "listitems", "dictitems") and part is None:
                continue
            if label in ("listitems", "dictitems"):
                part = list(part)
            if label == "reduce" and getattr(part, "__name__", None) == "__newobj__":
                continue  # the default reduction: the class is in the args and the token
            self.visit(part, f"{path}<{label}>")


def fingerprint(obj: Any, root: str = "") -> list[str]:
    """The lines of ``obj``'s fingerprint (see the module doc), paths starting at ``root``."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        walk = _Walk()
        walk.visit(obj, root)
        return walk.lines
    finally:
        sys.setrecursionlimit(limit)


def _digest(lines: list[str]) -> str:
    return _sha("\n".join(lines).encode("utf-8", "surrogatepass"))


def digest(obj: Any) -> str:
    """The sha256 of ``obj``'s fingerprint lines."""
    return _digest(fingerprint(obj))


def _round_trips(value: Any, root: str) -> dict[str, Any]:
    """Two pickle round trips of ``value`` (with cloudpickle, as the checkpoint pickles): the
    first one's lines, and the paths where the two differ, which vary with every rebuild (a
    timestamp or a counter the class's own pickling takes), or why ``value`` did not pickle."""
    import pickle

    import cloudpickle  # the checkpoint engine's own dependency

    try:
        first, second = (fingerprint(pickle.loads(cloudpickle.dumps(value)), root) for _ in range(2))
    except Exception as e:
        return {"pickle_error": f"{type(e).__name__}: {e}"}
    if len(first) != len(second):
        return {"pickled": first, "varies": None}
    varies = sorted({a.split("\t")[0] for a, b in zip(first, second, strict=True) if a != b})
    return {"pickled": first, "varies": varies}


def dump(names: Iterable[str], path: str, lines: bool = False, round_trips: bool = False) -> None:
    """Write, as JSON to ``path``, for each of ``names`` in the kernel's namespace: its class,
    its digest and whether a second digest agreed, its lines if asked; ``missing`` if the name
    is not there, ``error`` if fingerprinting it raised.

    Parameters
    ----------
    names
        Variables of the IPython namespace (the ``__main__`` module's outside IPython).
    path
        The JSON file to write.
    lines
        Include each fingerprint's lines, to find where two differ.
    round_trips
        Also pickle each value twice, first (pickling can change the object: numpy's masked
        arrays fill in their fill value), and add the first copy's lines (``pickled``) and the
        paths where the two copies differ (``varies``; None if their shapes differ).
    """
    from IPython.core.getipython import get_ipython

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else vars(sys.modules["__main__"])
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in namespace:
            out[name] = {"missing": True}
            continue
        value = namespace[name]
        entry: dict[str, Any] = {"class": _qualname(type(value))}
        try:
            if round_trips:
                entry.update(_round_trips(value, name))
            first = fingerprint(value, name)
            entry.update(digest=_digest(first), stable=fingerprint(value, name) == first)
            if lines:
                entry["lines"] = first
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        out[name] = entry
    Path(path).write_text(json.dumps(out))
