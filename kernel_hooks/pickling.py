"""Pickling a kernel's namespace in one pass, with notebook code and big buffers handled.

:class:`NamespacePickler` extends cloudpickle (which pickles lambdas, closures and
classes defined in the notebook by value) in three ways:

* array and tensor data goes out of band (see :mod:`.arrays`);
* functions defined in the notebook get the restoring kernel's namespace as their
  globals, so after restore they see (and change) the user's variables, as before;
* each variable is wrapped in a :class:`Variable` marker, so the pickler knows which
  variable it is in: that attributes buffers and bytes to variables, and names the
  variable that made pickling fail.

Everything is pickled once, so objects shared between variables stay shared.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle

from .arrays import OutOfBand


class Variable:
    """A name and its value, as pickled; unpickles to a ``(name, value)`` tuple."""

    __slots__ = ("name", "value")

    def __init__(self, name: str | None, value: Any) -> None:
        self.name = name
        self.value = value


def _variable(name: str | None, value: Any) -> tuple[str | None, Any]:
    return name, value


class _EmptyCell:
    """Stands for a closure cell that had no value yet."""


def _target_namespace() -> dict[str, Any]:
    """The namespace notebook functions run in, in the kernel that unpickles them."""
    from IPython.core.getipython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def _make_function(code: types.CodeType, name: str,
                   cells: tuple[types.CellType, ...] | None) -> types.FunctionType:
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
    # Empty cells now, filled by the state setter: that breaks cycles such as a
    # recursive closure, whose cell holds the function itself.
    return _make_function, (func.__code__, func.__name__, cells), state, None, None, _set_function_state


class NamespacePickler(cloudpickle.Pickler):  # type: ignore[misc]
    """Pickles :class:`Variable` lists for one kernel namespace (see the module doc)."""

    def __init__(self, file: io.RawIOBase, out: OutOfBand, namespace: dict[str, Any],
                 on_variable: Callable[[str | None], None] | None = None) -> None:
        # cloudpickle's table is a ChainMap, which the C pickler must call into Python to
        # search for every object; a plain dict snapshot is looked up in C (30% faster on
        # many small objects).
        self.dispatch_table = dict(cloudpickle.Pickler.dispatch_table)
        super().__init__(file, protocol=5, buffer_callback=out.buffer_callback)
        self._out = out
        self._on_variable = on_variable
        self._namespace = namespace
        self._reducers = out.reducers()
        self._reducers[Variable] = self._reduce_variable
        self.types_seen: set[type] = set()
        self.modules_seen: set[str] = set()
        self._plain: set[type] = set()
        """Types of objects already seen that no override handles (one set lookup each)."""

    def _reduce_variable(self, var: Variable) -> Any:
        self._out.current_var = var.name
        if self._on_variable is not None:
            self._on_variable(var.name)
        return _variable, (var.name, var.value)

    def reducer_override(self, obj: Any) -> Any:
        # The C pickler calls this for every object that is not a builtin atom or
        # container (each dataclass instance, say): answer repeat types at once.
        kind = type(obj)
        if kind in self._plain:
            return NotImplemented
        self.types_seen.add(kind)
        reducer = self._reducers.get(kind)
        if reducer is not None:
            return reducer(obj)
        if kind is types.FunctionType:
            if obj.__globals__ is self._namespace:
                return _reduce_notebook_function(obj)
            self.modules_seen.add(obj.__module__ or "")
        elif isinstance(obj, type):
            self.modules_seen.add(obj.__module__)
        elif kind is types.ModuleType:
            self.modules_seen.add(obj.__name__)
            return NotImplemented
        else:
            self._plain.add(kind)
            return NotImplemented  # cloudpickle only overrides functions and classes
        return super().reducer_override(obj)

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


def load(data: bytes | bytearray | memoryview, buffers: list[Any]) -> Any:
    """Unpickle a namespace pickle, given its out-of-band buffers in order."""
    return pickle.loads(data, buffers=buffers)
