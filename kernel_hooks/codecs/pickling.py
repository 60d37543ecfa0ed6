"""Pickling a kernel's namespace in one pass, with notebook code and big buffers handled.

:class:`NamespacePickler` extends cloudpickle (which pickles lambdas, closures and
classes defined in the notebook by value) in three ways:

* array and tensor data goes out of band (see :mod:`.arrays`);
* functions defined in the notebook get the restoring kernel's namespace as their
  globals, so after restore they see (and change) the user's variables, as before, and
  bring the source of the cells that defined them, for tracebacks;
* each variable is wrapped in a :class:`Variable` marker, so the pickler knows which
  variable it is in: that attributes buffers and bytes to variables, and names the
  variable that made pickling fail.

Everything is pickled once, so objects shared between variables stay shared. If some
object then fails to rebuild, :func:`load_isolated` loses only the variables built from it
(see :mod:`.isolation`).
"""

from __future__ import annotations

import contextlib
import copyreg
import gc
import io
import linecache
import pickle
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from copyreg import __newobj__, _slotnames  # type: ignore[attr-defined]
from typing import Any

import cloudpickle

from . import isolation, reducer_table, shared_state, weak_references, wrapped_functions
from .arrays import OutOfBand
from .live_objects import on_commit, variable_built


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Automatic garbage collection off inside, and back as it was after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Variable:
    """A name and its value, as pickled; unpickles to a ``(name, value)`` tuple."""

    __slots__ = ("name", "value")

    def __init__(self, name: str | None, value: Any) -> None:
        self.name = name
        self.value = value


def _variable(name: str | None, value: Any) -> tuple[str | None, Any]:
    """The pickle calls this once each variable's value is built: the live objects' actions
    given until now are this variable's (see :func:`.live_objects.variable_built`)."""
    variable_built(name)
    return name, value


class _EmptyCell:
    """Stands for a closure cell that had no value yet."""


def _target_namespace() -> dict[str, Any]:
    """The namespace notebook functions run in, in the kernel that unpickles them."""
    from IPython.core.getipython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


Source = tuple[str, list[str] | None]
"""Where a notebook function's code was compiled from (a cell's file name), and that file's
lines if ``linecache`` had them."""


def _cache_source(filename: str, lines: list[str]) -> None:
    """Give ``linecache`` a notebook file's lines as IPython does for each cell it runs (no
    modification time: ``checkcache`` keeps the entry), unless it has that file already."""
    linecache.cache.setdefault(filename, (sum(map(len, lines)), None, lines, filename))


def _located(code: types.CodeType, filename: str) -> types.CodeType:
    """``code``, and the code it holds (nested functions, lambdas, comprehensions), compiled
    from ``filename``: cloudpickle names every code object it pickles ``<dynamic-code>``, so
    that the pickle does not depend on where a function was defined."""
    consts = tuple(_located(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _make_function(code: types.CodeType, name: str, cells: tuple[types.CellType, ...] | None,
                   source: Source | None = None) -> types.FunctionType:
    """A notebook function in this kernel's namespace, its code back under its file (None: a
    checkpoint saved before functions carried it), whose lines ``linecache`` gets once the
    restore commits (see :func:`.live_objects.on_commit`)."""
    if source is not None:
        filename, lines = source
        code = _located(code, filename)
        if lines is not None:
            on_commit(f"the source of {filename}", lambda: _cache_source(filename, lines))
    return types.FunctionType(code, _target_namespace(), name, None, cells)


def _set_function_state(func: types.FunctionType, state: dict[str, Any]) -> types.FunctionType:
    for cell, value in zip(func.__closure__ or (), state.pop("cells"), strict=True):
        if value is not _EmptyCell:
            cell.cell_contents = value
    func.__dict__.update(state.pop("dict"))
    for attr, value in state.items():
        setattr(func, attr, value)
    return func


def _reduce_notebook_function(func: types.FunctionType) -> Any:
    closure = func.__closure__ or ()
    contents = []
    for cell in closure:
        try:
            contents.append(cell.cell_contents)
        except ValueError:
            contents.append(_EmptyCell)
    state = {
        "cells": tuple(contents), "dict": dict(func.__dict__),
        "__defaults__": func.__defaults__, "__kwdefaults__": func.__kwdefaults__,
        "__qualname__": func.__qualname__, "__module__": func.__module__,
        "__doc__": func.__doc__, "__annotations__": func.__annotations__,
    }
    cells = tuple(types.CellType() for _ in closure) if func.__closure__ is not None else None
    # Its file, and the lines of the cell that defined it: the restoring kernel's linecache does
    # not have the saving kernel's cells, and a traceback through it showed no source.
    # linecache gives one list per file, which the pickle then holds once.
    filename = func.__code__.co_filename
    source: Source = (filename, linecache.getlines(filename) or None)
    # Empty cells now, filled by the state setter: that breaks cycles such as a
    # recursive closure, whose cell holds the function itself.
    return _make_function, (func.__code__, func.__name__, cells, source), state, None, None, _set_function_state


_UNSEEN = object()
_OBJECT = vars(object)
_DEFAULT_LOOKUPS = ("__reduce_ex__", "__reduce__", "__getstate__", "__getnewargs_ex__", "__getnewargs__",
                    "__getattribute__", "__getattr__")
"""Attributes the C pickler and ``object.__reduce_ex__`` look up on a type to reduce its instances."""


def _type_attr(kind: type, name: str) -> Any:
    """``name`` as the type ``kind`` defines or inherits it (not its metaclass), else None."""
    for base in kind.__mro__:
        if name in vars(base):
            return vars(base)[name]
    return None


def _default_newobj_args(obj: Any, protocol: int) -> tuple[type] | None:
    """``(type(obj),)`` if the C pickler reduces every instance of ``type(obj)`` with a
    non-empty ``__dict__`` to ``copyreg.__newobj__(type)`` plus that dict as state, as
    ``object.__reduce_ex__`` does for a plain class (a dataclass, say); else None.

    Which is decided by the type alone once it keeps ``object``'s reduction hooks and has
    no slots; the one instance reduced here settles what only C can tell (its layout).
    """
    kind = type(obj)
    if (kind in copyreg.dispatch_table or issubclass(kind, (list, dict))
            or any(_type_attr(kind, name) is not _OBJECT.get(name) for name in _DEFAULT_LOOKUPS)
            or type(_type_attr(kind, "__dict__")) is not types.GetSetDescriptorType
            or _slotnames(kind)):
        return None
    try:
        reduced = obj.__reduce_ex__(protocol)
    except Exception:
        return None
    state = obj.__dict__
    if (type(reduced) is tuple and len(reduced) == 5 and reduced[0] is __newobj__
            and reduced[1] == (kind,) and reduced[1][0] is kind
            and (reduced[2] is state or (reduced[2] is None and not state))
            and reduced[3] is None and reduced[4] is None):
        return (kind,)
    return None


class NamespacePickler(cloudpickle.Pickler):  # type: ignore[misc]
    """Pickles :class:`Variable` lists for one kernel namespace (see the module doc)."""

    def __init__(self, file: io.RawIOBase, out: OutOfBand, namespace: dict[str, Any],
                 on_variable: Callable[[str | None], None] | None = None) -> None:
        super().__init__(file, protocol=5, buffer_callback=out.buffer_callback)
        self._out = out
        self._on_variable = on_variable
        self._namespace = namespace
        self._reducers = reducer_table.reducers(out)
        self._reducers[Variable] = self._reduce_variable
        self._cloudpickle_table = {
            kind: reduce for kind, reduce in cloudpickle.Pickler.dispatch_table.items()
            if copyreg.dispatch_table.get(kind) is not reduce
        }
        """cloudpickle's own reducers (modules, code, properties ...), applied where the C
        pickler would have looked them up in its ``dispatch_table``."""
        self.types_seen: set[type] = set()
        self.modules_seen: set[str] = set()
        self._instances: dict[type, tuple[type] | None] = {}
        """Types seen that no override handles: None, or the arguments that reduce their
        instances as ``object.__reduce_ex__`` does, without its lookups."""

    @property
    def dispatch_table(self) -> Any:
        """Absent, so the C pickler reads ``copyreg.dispatch_table`` itself: with a table of
        its own, every object reduced the default way raised and caught a ``KeyError`` (5%
        of pickling 200,000 dataclass instances)."""
        raise AttributeError("dispatch_table")

    def dump(self, obj: Any) -> None:
        """Pickle ``obj`` with automatic garbage collection paused: pickling makes no
        garbage to speak of, but a collection it triggered, for what the user's cells left,
        traversed the whole heap (a first save after building 200,000 dataclass instances
        and dicts: 1.2 to 1.4 s, 1.0 to 1.1 s without). That collection is left to the
        kernel's next cells; a suspended kernel never runs it.

        The memo (a reference to every object pickled) is emptied before collection
        resumes: the collector traverses it, and with 1M entries each collection that met
        the young pickler took 0.06 to 0.1 s (one or two per save of 200,000 objects)."""
        with _gc_paused():
            try:
                super().dump(obj)
            finally:
                self.clear_memo()

    def _reduce_variable(self, var: Variable) -> Any:
        self._out.current_var = var.name
        if self._on_variable is not None:
            self._on_variable(var.name)
        return _variable, (var.name, var.value)

    def reducer_override(self, obj: Any) -> Any:
        # The C pickler calls this for every object that is not a builtin atom or
        # container (each dataclass instance, say): answer repeat types at once. Reducing
        # an instance of a plain class here, as object.__reduce_ex__ would (the pickle is
        # the same, byte for byte), pickled 200,000 dataclass instances 5 to 10% faster.
        kind = type(obj)
        args = self._instances.get(kind, _UNSEEN)
        if args is None:
            return NotImplemented
        if args is not _UNSEEN:
            state = obj.__dict__
            # The C pickler finds these two on the instance too.
            if state and "__getstate__" not in state and "__reduce_ex__" not in state:
                return __newobj__, args, state
            return NotImplemented
        self.types_seen.add(kind)
        reducer = self._reducers.get(kind)
        if reducer is not None:
            return reducer(obj)
        if kind is types.FunctionType:
            if obj.__globals__ is self._namespace:
                return _reduce_notebook_function(obj)
            if "__wrapped__" in obj.__dict__:  # a library's wrapper, maybe under a notebook function's name
                rewrap = wrapped_functions.reduce_function(obj)
                if rewrap is not None:
                    self.modules_seen.add(obj.__globals__.get("__name__") or "")
                    return rewrap
            self.modules_seen.add(obj.__module__ or "")
        elif isinstance(obj, type):
            self.modules_seen.add(obj.__module__)
            # copyreg caches a class's slot names on the class when the first instance is
            # pickled, and cloudpickle pickles a notebook class's __dict__ by value: fill the
            # cache first, so the class pickles the same in every save. Else the second save
            # found every pickle chunk after the class moved, and rewrote them all.
            _slotnames(obj)
        else:
            if kind is types.ModuleType:
                self.modules_seen.add(obj.__name__)
            reducer = self._cloudpickle_table.get(kind)
            if reducer is not None:
                return reducer(obj)
            reducer = shared_state.reducer(obj)
            if reducer is not None:  # instances that share state through their class
                self._reducers[kind] = reducer
                return reducer(obj)
            reducer = wrapped_functions.instance_reducer(kind, self.proto)
            if reducer is not None:  # instances that may have a method wrapped in place (model.compile())
                self._reducers[kind] = reducer
                return reducer(obj)
            self._instances[kind] = _default_newobj_args(obj, self.proto)
            return self.reducer_override(obj)
        return super().reducer_override(obj)  # cloudpickle: functions and classes

    def module_names(self) -> set[str]:
        """Modules whose objects, classes or functions were pickled."""
        return self.modules_seen | {t.__module__ for t in self.types_seen}


class CountingWriter(io.RawIOBase):
    """A write-only sink that only counts, for the trial pass."""

    def __init__(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.count += n
        return n


def probe(namespace: dict[str, Any], names: Iterable[str], reason: Callable[[BaseException], str]
          ) -> dict[str, str]:
    """Pickle each variable alone, writing nothing; return {name: why it failed}."""
    failures = {}
    for name in names:
        out = OutOfBand(sink=None)
        try:
            NamespacePickler(CountingWriter(), out, namespace).dump([Variable(name, namespace[name])])
        except Exception as e:
            failures[name] = reason(e)
        finally:
            out.release()
    return failures


def load(data: bytes | bytearray | memoryview, buffers: Iterable[Any]) -> Any:
    """Unpickle a namespace pickle, given its out-of-band buffers in order.

    Automatic garbage collection is paused meanwhile: every container the pickle creates
    counts towards the next collection, and the collections that triggered, over the
    whole growing heap, took half of unpickling 200,000 dataclass instances and 200,000
    dicts (1.1 to 1.5 s, 0.6 to 0.9 s without). Those objects are then collected as
    usual: the kernel's next collections took about 0.2 s longer, once. A load that rebuilt
    weak references ends with one collection of the young generation (see
    :func:`.weak_references.settling`).
    """
    with _gc_paused(), weak_references.settling():
        return pickle.loads(data, buffers=buffers)


def load_isolated(data: bytes | bytearray | memoryview, buffers: Iterable[Any]
                  ) -> tuple[list[tuple[str | None, Any]], dict[str | None, str]]:
    """Unpickle a namespace pickle as :func:`load` does, losing only the variables that
    depend on an object that fails to rebuild: for when :func:`load` has failed, since it
    runs the pure-Python unpickler (see :mod:`.isolation`).

    Returns the ``(name, value)`` tuples kept and, for each variable lost, why.
    """
    with _gc_paused(), weak_references.settling():
        return isolation.load(data, buffers, _variable)
