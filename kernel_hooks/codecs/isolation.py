"""Unpickling a namespace again after an object failed to rebuild, so that only the
variables that depend on it are lost.

The C unpickler rebuilds the whole namespace or nothing: one object that raises (a class
whose module is gone, a ``list`` subclass whose ``extend`` needs attributes its state
sets later) loses every variable. When it fails, :func:`load` reads the same pickle with
:class:`IsolatingUnpickler`, the pure-Python unpickler with the opcodes that run user
code guarded: class lookup, REDUCE, NEWOBJ(_EX), BUILD, APPEND(S), SETITEM(S), ADDITEMS
and FROZENSET. What raises there is *broken*: a new object is replaced by a
:class:`Placeholder`, an object being filled keeps what it has. User code that would be
handed a broken object is not run (its result would be lost anyway); builtin containers
are filled regardless, since that runs no user code.

Every object built from others records them (a container its items, an object its class,
arguments and state). Once the whole pickle is read, everything that depends on a broken
object is known, cycles included (an object may be referenced, through the memo, before
the part that breaks it is read), and the variables whose values are among those are
lost. Every other variable is kept, still sharing objects with the others. This costs
what the pure-Python unpickler does (several times the C one), and only on this path.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from ..report import error_text

_ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None)})
"""Immutable values that hold no other object: never broken, and shared freely (a small
``int`` is one object everywhere), so they are left out of the dependencies."""
_FILLED_SAFELY = frozenset({list, dict, set})
"""Containers that can be filled without running user code (except keys' ``__hash__``)."""


class Placeholder:
    """Stands for an object that was not rebuilt: its rebuilding raised, or was skipped
    because one of its inputs was broken. Never reaches the user's namespace."""

    __slots__ = ("args",)

    def __init__(self, args: tuple[Any, ...] = ()) -> None:
        self.args = args
        """The arguments of the REDUCE it replaces: if the pickle drops it at once, that
        call was a state setter, run for what it did to its arguments."""


_BASE: dict[int, Callable[[Any], None]] = pickle._Unpickler.dispatch
"""The pure-Python unpickler's opcodes, those overridden here included."""


def _filling(opcode: bytes, n: int = 0) -> Callable[[IsolatingUnpickler], None]:
    """The opcode that adds items to the object below them: its last ``n`` objects, or all
    since the mark if ``n`` is 0. It runs unless it would hand user code a broken object;
    pickle takes the items off the stack before it calls anything, so the object is on top
    when that raises."""
    base = _BASE[opcode[0]]

    def load(self: IsolatingUnpickler) -> None:
        if n:
            items, target = self.stack[-n:], self.stack[-n - 1]
        else:
            items, target = self.stack, self.metastack[-1][-1]
        if self._link(target, items) and type(target) not in _FILLED_SAFELY:
            if n:
                del self.stack[-n:]
            else:
                self.pop_mark()
            return
        try:
            base(self)
        except Exception as e:
            self._break(target, e)

    return load


class IsolatingUnpickler(pickle._Unpickler):
    """Reads a namespace pickle, losing only the objects that fail to rebuild and those
    built from them (see the module doc); :meth:`lost_reasons` says which, once loaded.

    Parameters
    ----------
    data
        The pickle.
    buffers
        Its out-of-band buffers, in order.
    trusted
        Functions that are always called, broken arguments or not: the one that makes a
        variable's ``(name, value)`` tuple, so a lost variable still has its name.
    """

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(_BASE)
    # The pure-Python unpickler's state, which it does not declare.
    stack: list[Any]
    metastack: list[list[Any]]
    append: Callable[[Any], None]
    pop_mark: Callable[[], list[Any]]

    def __init__(self, data: bytes | bytearray | memoryview, buffers: Iterable[Any],
                 trusted: Iterable[Callable[..., Any]] = ()) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self._trusted = {id(f) for f in trusted}
        self._origins: dict[int, str] = {}
        """Objects that broke, by id, and why."""
        self._tainted: set[int] = set()
        """Objects known to be broken or built from a broken one while reading."""
        self._parents: dict[int, list[int]] = {}
        """For each object, those built from it."""
        self._kept: dict[int, Any] = {}
        """Every object in the dependencies, kept alive so that no id is reused."""

    # Dependencies

    def _link(self, result: Any, inputs: Iterable[Any]) -> bool:
        """Record that ``result`` was built from ``inputs``; whether it is now tainted."""
        if type(result) in _ATOMS:
            return False
        rid = id(result)
        self._kept[rid] = result
        tainted = self._tainted
        hit = rid in tainted
        for item in inputs:
            if type(item) in _ATOMS:
                continue
            iid = id(item)
            self._kept[iid] = item
            self._parents.setdefault(iid, []).append(rid)
            hit = hit or iid in tainted
        if hit:
            tainted.add(rid)
        return hit

    def _break(self, obj: Any, error: Exception) -> None:
        self._kept[id(obj)] = obj
        self._origins.setdefault(id(obj), error_text(error))
        self._tainted.add(id(obj))

    def _broken(self, error: Exception) -> Placeholder:
        placeholder = Placeholder()
        self._break(placeholder, error)
        return placeholder

    def lost_reasons(self) -> dict[int, str]:
        """Every object that depends on a broken one, by id, with the reason of one that
        broke. Only complete once the pickle is read: a dependency may come after its use."""
        reasons = dict(self._origins)
        queue = list(reasons)
        for oid in queue:  # grows as it goes: a breadth-first walk up the dependencies
            for parent in self._parents.get(oid, ()):
                if parent not in reasons:
                    reasons[parent] = reasons[oid]
                    queue.append(parent)
        return reasons

    # Opcodes that run user code

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception as e:
            return self._broken(e)

    def _call(self, func: Any, args: tuple[Any, ...], call: Callable[[], Any]) -> Any:
        """``call()`` (which calls ``func`` with ``args``), unless an input is broken."""
        inputs = (func, *args)
        if any(id(x) in self._tainted for x in inputs if type(x) not in _ATOMS):
            result: Any = Placeholder(args)
        else:
            try:
                result = call()
            except Exception as e:
                result = self._broken(e)
                result.args = args
        self._link(result, inputs)
        return result

    def load_reduce(self) -> None:
        stack = self.stack
        args = stack.pop()
        func = stack[-1]
        if id(func) in self._trusted:
            stack[-1] = func(*args)
            self._link(stack[-1], args)
        else:
            stack[-1] = self._call(func, args, lambda: func(*args))

    dispatch[pickle.REDUCE[0]] = load_reduce

    def load_newobj(self) -> None:
        stack = self.stack
        args = stack.pop()
        cls = stack[-1]
        stack[-1] = self._call(cls, args, lambda: cls.__new__(cls, *args))

    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        stack = self.stack
        kwargs = stack.pop()
        args = stack.pop()
        cls = stack[-1]
        stack[-1] = self._call(cls, (*args, kwargs), lambda: cls.__new__(cls, *args, **kwargs))

    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def load_build(self) -> None:
        stack = self.stack
        state = stack.pop()
        inst = stack[-1]
        if self._link(inst, (state,)):
            return
        stack.append(state)
        try:
            _BASE[pickle.BUILD[0]](self)
        except Exception as e:
            self._break(inst, e)

    dispatch[pickle.BUILD[0]] = load_build

    def load_frozenset(self) -> None:
        items = self.pop_mark()
        try:
            result: Any = frozenset(items)  # hashes the items: user code
        except Exception as e:
            result = self._broken(e)
        self._link(result, items)
        self.append(result)

    dispatch[pickle.FROZENSET[0]] = load_frozenset

    # Opcodes that only build tuples, or drop objects

    def _tuple(self, n: int) -> None:
        """A TUPLE1/2/3 opcode: the last ``n`` objects become a tuple."""
        stack = self.stack
        result = tuple(stack[-n:])
        stack[-n:] = [result]
        self._link(result, result)

    def load_tuple(self) -> None:
        result = tuple(self.pop_mark())
        self._link(result, result)
        self.append(result)

    dispatch[pickle.TUPLE[0]] = load_tuple

    dispatch[pickle.TUPLE1[0]] = lambda self: self._tuple(1)
    dispatch[pickle.TUPLE2[0]] = lambda self: self._tuple(2)
    dispatch[pickle.TUPLE3[0]] = lambda self: self._tuple(3)

    def load_pop(self) -> None:
        dropped = self.stack[-1] if self.stack else None
        if type(dropped) is Placeholder:
            # A REDUCE dropped at once ran a state setter, ``setter(obj, state)``: the
            # objects it was to complete are incomplete. (A recursive tuple also drops the
            # items it re-reads from the memo; a placeholder among them taints their
            # arguments too: more lost than needed, in a rare case, never less.)
            for arg in dropped.args:
                self._link(arg, (dropped,))
        _BASE[pickle.POP[0]](self)

    dispatch[pickle.POP[0]] = load_pop
    # Filling an object: user code for anything but a builtin container.
    dispatch[pickle.APPEND[0]] = _filling(pickle.APPEND, 1)
    dispatch[pickle.SETITEM[0]] = _filling(pickle.SETITEM, 2)
    dispatch[pickle.APPENDS[0]] = _filling(pickle.APPENDS)
    dispatch[pickle.SETITEMS[0]] = _filling(pickle.SETITEMS)
    dispatch[pickle.ADDITEMS[0]] = _filling(pickle.ADDITEMS)


def load(data: bytes | bytearray | memoryview, buffers: Iterable[Any], variable: Callable[..., Any]
         ) -> tuple[list[tuple[str | None, Any]], dict[str | None, str]]:
    """Unpickle a namespace pickle (a list of ``(name, value)`` tuples made by ``variable``),
    losing only the variables that depend on an object that failed to rebuild.

    Parameters
    ----------
    data, buffers
        The pickle and its out-of-band buffers, in order.
    variable
        The function the pickle calls to make each ``(name, value)`` tuple.

    Returns
    -------
    The variables kept, in order, and for each variable lost the reason of what broke.
    Raises what the unpickler raises outside user code (a corrupt pickle, say).
    """
    unpickler = IsolatingUnpickler(data, buffers, trusted=(variable,))
    payload: list[tuple[str | None, Any]] = unpickler.load()
    reasons = unpickler.lost_reasons()
    kept, lost = [], {}
    for name, value in payload:
        if type(value) not in _ATOMS and id(value) in reasons:
            lost[name] = reasons[id(value)]
        else:
            kept.append((name, value))
    return kept, lost
