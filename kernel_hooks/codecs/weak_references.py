"""Weak references, saved as weak references to the objects of the same checkpoint.

A weak reference (``weakref.ref`` and its subclasses, ``WeakMethod``, the weak containers
``WeakSet``, ``WeakKeyDictionary`` and ``WeakValueDictionary``, and ``finalize``) is pickled
as the call that makes it again, with its referent among the call's arguments. The
unpickler's memo holds every object it builds until the load ends, so the referent exists,
once, while the reference is made; once the load ends, only what holds it strongly keeps it.
So a reference comes back pointing at the restored object where the saved graph holds that
object elsewhere (the memo makes the two one object), and dead where only weak references
held it (in the saving kernel something that was not saved kept it alive): such a referent is
written, and dropped by the restore. A dead reference comes back dead.

A load that rebuilt weak references ends with :func:`settling`: a referent in a reference
cycle is not freed when the memo goes, only by the garbage collector, which is paused while
unpickling.

A reference's callback is pickled with it, and runs, as it would have in the saving kernel,
when the restore drops its referent (the weak containers' own callbacks remove the dead
entries). A finalizer, though, is armed only once the restore commits, and only if its object
is alive: a restore that fails must not run the clean-up (a ``TemporaryDirectory`` deletes its
folder) of objects it drops.

A callback runs at the end of the load, before the namespace holds the restored variables: one
that reads a notebook global does not find it yet. A ``weakref.proxy`` cannot be saved: Python
gives no way to reach a proxy's referent (pickle, asking the proxy how to reduce it, got the
referent's answer and saved a strong copy of it), so a variable holding one is not saved, and
the save report says why.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from copyreg import _slotnames  # type: ignore[attr-defined]
from typing import Any

from .live_objects import Reducer, on_commit

_rebuilt: ContextVar[list[bool] | None] = ContextVar("_rebuilt", default=None)
"""Whether the load under way (see :func:`settling`) rebuilt a weak reference."""


@contextlib.contextmanager
def settling() -> Iterator[None]:
    """Around a load: once it has returned (its memo gone), if it rebuilt weak references,
    collect the young generation, so a referent only they hold is gone even in a reference
    cycle, and the references are dead when the restore hands them over. Everything the load
    built is young, as no collection ran while it did. After loading 200,000 dataclass
    instances that took 30 to 85 ms (2 shared cores), work the kernel's first automatic
    collection would otherwise have done."""
    rebuilt = [False]
    token = _rebuilt.set(rebuilt)
    try:
        yield
    finally:
        _rebuilt.reset(token)
    if rebuilt[0]:
        gc.collect(0)


def _note() -> None:
    rebuilt = _rebuilt.get()
    if rebuilt is not None:
        rebuilt[0] = True


class _Gone:
    """A referent dropped as soon as its reference is made: makes dead references of any kind."""

    __slots__ = ("__weakref__",)

    def method(self) -> None:
        """Bound, for a dead ``WeakMethod``."""


def _state(obj: Any, internal: frozenset[str] = frozenset()) -> Any:
    """What a subclass keeps beyond its weak base (the names in ``internal``), as pickle's
    BUILD takes it: a dict, or ``(dict or None, slots)``; None where there is nothing."""
    attrs = {k: v for k, v in getattr(obj, "__dict__", {}).items() if k not in internal}
    slots = {name: getattr(obj, name) for name in _slotnames(type(obj))
             if name not in internal and hasattr(obj, name)}
    if slots:
        return attrs or None, slots
    return attrs or None


def _ref(kind: type[weakref.ref[Any]], referent: Any, callback: Callable[[Any], Any] | None) -> weakref.ref[Any]:
    """A reference of class ``kind`` (its slots and attributes come after, by BUILD)."""
    _note()
    return weakref.ref.__new__(kind, referent, callback)


def _dead_ref(kind: type[weakref.ref[Any]]) -> weakref.ref[Any]:
    return weakref.ref.__new__(kind, _Gone())


def _reduce_ref(ref: weakref.ref[Any]) -> Any:
    referent = ref()
    if referent is None:  # its callback, if any, has run
        return _dead_ref, (type(ref),), _state(ref)
    return _ref, (type(ref), referent, ref.__callback__), _state(ref)


_METHOD_SLOTS = frozenset({"_func_ref", "_meth_type", "_alive"})
"""What ``WeakMethod`` keeps of its own; it makes them again from the method."""


def _weak_method(kind: type[weakref.WeakMethod[Any]], method: Any, callback: Callable[[Any], Any] | None
                 ) -> weakref.WeakMethod[Any]:
    _note()
    return kind(method, callback)


def _dead_method(kind: type[weakref.WeakMethod[Any]]) -> weakref.WeakMethod[Any]:
    return kind(_Gone().method)


def _reduce_method(ref: weakref.WeakMethod[Any]) -> Any:
    method = ref()
    state = _state(ref, _METHOD_SLOTS)
    if method is None:
        return _dead_method, (type(ref),), state
    # WeakMethod keeps the user's callback only in the closure of the callback it gives ref
    # (``_cb``), beside a weak reference to itself that must not be pickled.
    wrapper = ref.__callback__
    cells = {} if wrapper is None else dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or (), strict=True))
    if "callback" not in cells:
        raise TypeError(f"cannot find the callback of a {type(ref).__name__} in this Python's weakref module")
    return _weak_method, (type(ref), method, cells["callback"].cell_contents), state


_CONTAINER_STATE = frozenset({"data", "_remove", "_pending_removals", "_iterating", "_dirty_len"})
"""What the weak containers keep of their own; ``__init__`` makes it again."""


def _weak_set(kind: type[weakref.WeakSet[Any]], members: list[Any]) -> weakref.WeakSet[Any]:
    _note()
    found = kind.__new__(kind)
    weakref.WeakSet.__init__(found, members)
    return found


def _reduce_set(found: weakref.WeakSet[Any]) -> Any:
    return _weak_set, (type(found), list(weakref.WeakSet.__iter__(found))), _state(found, _CONTAINER_STATE)


WeakMapping = weakref.WeakKeyDictionary[Any, Any] | weakref.WeakValueDictionary[Any, Any]


def _weak_mapping(kind: type[WeakMapping], base: type[WeakMapping], items: list[tuple[Any, Any]]) -> WeakMapping:
    _note()
    mapping: Any = kind.__new__(kind)
    base.__init__(mapping, items)
    return mapping  # type: ignore[no-any-return]


def _reduce_key_mapping(mapping: weakref.WeakKeyDictionary[Any, Any]) -> Any:
    items = list(weakref.WeakKeyDictionary.items(mapping))
    return _weak_mapping, (type(mapping), weakref.WeakKeyDictionary, items), _state(mapping, _CONTAINER_STATE)


def _reduce_value_mapping(mapping: weakref.WeakValueDictionary[Any, Any]) -> Any:
    items = list(weakref.WeakValueDictionary.items(mapping))
    return _weak_mapping, (type(mapping), weakref.WeakValueDictionary, items), _state(mapping, _CONTAINER_STATE)


def _finalizer(kind: type[weakref.finalize[..., Any]]) -> weakref.finalize[..., Any]:
    """A finalizer outside finalize's registry: dead until armed."""
    return kind.__new__(kind)


def _arm(finalizer: weakref.finalize[..., Any], state: tuple[Any, ...]) -> weakref.finalize[..., Any]:
    obj, func, args, kwargs, at_exit = state
    referent = weakref.ref(obj)
    _note()

    def arm() -> None:
        live = referent()
        if live is not None:
            weakref.finalize.__init__(finalizer, live, func, *args, **kwargs)
            finalizer.atexit = at_exit

    on_commit(f"the finalizer of a {type(obj).__name__}", arm)
    return finalizer


def _reduce_finalizer(finalizer: weakref.finalize[..., Any]) -> Any:
    found = finalizer.peek()
    if found is None:
        return _finalizer, (type(finalizer),)
    obj, func, args, kwargs = found
    return _finalizer, (type(finalizer),), (obj, func, args, kwargs, finalizer.atexit), None, None, _arm


def _refuse_proxy(proxy: Any) -> Any:
    raise TypeError("a weakref.proxy cannot be saved: Python gives no way to reach its referent; "
                    "hold a weakref.ref instead")


_FAMILIES: dict[type, Reducer] = {
    weakref.ProxyType: _refuse_proxy,
    weakref.CallableProxyType: _refuse_proxy,
    weakref.ref: _reduce_ref,
    weakref.WeakMethod: _reduce_method,
    weakref.WeakSet: _reduce_set,
    weakref.WeakKeyDictionary: _reduce_key_mapping,
    weakref.WeakValueDictionary: _reduce_value_mapping,
    weakref.finalize: _reduce_finalizer,
}
_OWN_PICKLING = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")


def reducers() -> dict[type, Reducer]:
    """The reducers by exact type: each kind above and its subclasses defined so far, but for
    a subclass with a pickling hook of its own (it said how it is to be pickled) and its
    subclasses. The nearest kind in a class's MRO gives its reducer (``WeakMethod`` is a ``ref``)."""
    table: dict[type, Reducer] = {}
    for base, reduce in _FAMILIES.items():  # a subclass after its base: it overrides it
        queue = [base]
        while queue:
            kind = queue.pop()
            table[kind] = reduce
            subclasses: list[type] = type.__subclasses__(kind)
            queue += [sub for sub in subclasses
                      if sub not in _FAMILIES and not any(name in vars(sub) for name in _OWN_PICKLING)]
    return table
