"""Instances whose state lives in their class: "Borg" singletons, whose every instance's
``__dict__`` is one dict kept as a class attribute (accelerate's ``PartialState``,
``AcceleratorState`` and ``GradientState``), and instances a class keeps in a registry of its
own (a dict or ``WeakValueDictionary`` of them, or a ``WeakSet``).

Pickle saves an instance's ``__dict__``, and loads it into the new instance's own; a class
pickled by reference brings none of its attributes. So each restored Borg instance had a
private copy of the state, the class's dict stayed empty (accelerate's next
``scheduler.step()`` raised "Please make sure to properly initialize your accelerator"), and a
registry lacked the instances restored.

Here such an instance is pickled with where its state lives. The instances of one Borg dict
share one dict again as soon as they are loaded, and when the restore commits, the class's
dict takes that state and every instance uses the class's dict: the checkpoint's state wins
over any the restoring kernel has (instances made there before the restore see it too), as
the restored namespace replaces the user's. A restored instance goes back into its registry
under its key, unless the restoring kernel's registry has that key already: that entry was
made by the library's import or by code run before the restore, and other code may hold it.

Only instances pickled the default way (no pickling hooks of their class, no slots) are
covered, and only class attributes with ordinary names (not ``__dunder__`` ones); the class
dict is found per class, once per pickling pass, so instances of every other class pickle as
fast as before.
"""

from __future__ import annotations

import copyreg
import types
import weakref
from collections.abc import Iterable
from copyreg import __newobj__, _slotnames  # type: ignore[attr-defined]
from typing import Any

from .live_objects import Reducer, on_commit

_HOOKS = ("__reduce_ex__", "__reduce__", "__getstate__", "__setstate__", "__getnewargs_ex__", "__getnewargs__")
_OBJECT = vars(object)
_REGISTRIES = (dict, weakref.WeakValueDictionary, weakref.WeakSet)
Place = tuple[type, str, Any]
"""A class attribute: the class that defines it, its name, and (in a registry) the key."""


def _pickled_by_default(kind: type) -> bool:
    """Whether pickle reduces ``kind``'s instances to the class plus their ``__dict__``."""
    if kind in copyreg.dispatch_table or _slotnames(kind):
        return False
    for name in _HOOKS:
        defined = next((vars(base)[name] for base in kind.__mro__ if name in vars(base)), None)
        if defined is not _OBJECT.get(name):
            return False
    layout = next((vars(base)["__dict__"] for base in kind.__mro__ if "__dict__" in vars(base)), None)
    return type(layout) is types.GetSetDescriptorType


def _class_attributes(kind: type) -> Iterable[tuple[type, str, Any]]:
    """``kind``'s class attributes that may hold instances' state: dicts and weak containers
    under ordinary names, each from the class that defines it (not one it shadows)."""
    seen: set[str] = set()
    for owner in kind.__mro__[:-1]:
        for name, value in vars(owner).items():
            if name in seen or (name.startswith("__") and name.endswith("__")):
                continue
            seen.add(name)
            if type(value) in _REGISTRIES:
                yield owner, name, value


class SharedDict:
    """One class-level dict that instances share, as pickled: where it lives, and its state.

    Pickled as its place, then its state (BUILD), so an instance met while its state is
    pickled finds this object in the memo, and takes the state once it is loaded."""

    def __init__(self, owner: type, name: str) -> None:
        self.owner = owner
        self.name = name
        self.state: dict[str, Any] | None = None
        self.instances: list[Any] = []

    def __reduce__(self) -> Any:
        return SharedDict, (self.owner, self.name), self.state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.state = state
        for obj in self.instances:
            obj.__dict__ = state

    def share(self, obj: Any) -> None:
        """``obj`` uses this state; the class's dict once the restore commits."""
        if not self.instances:
            on_commit(f"the shared state of {self.owner.__qualname__}", self._adopt)
        self.instances.append(obj)
        if self.state is not None:
            obj.__dict__ = self.state

    def _adopt(self) -> None:
        target = vars(self.owner).get(self.name)
        if type(target) is not dict:
            raise TypeError(f"{self.owner.__qualname__}.{self.name} is not a dict in this kernel")
        if target is not self.state and self.state is not None:
            target.clear()
            target.update(self.state)
            for obj in self.instances:
                obj.__dict__ = target
        self.instances.clear()


def _share(obj: Any, shared: SharedDict | tuple[SharedDict, tuple[Any, ...]]) -> None:
    (shared if isinstance(shared, SharedDict) else shared[0]).share(obj)


def borg(obj: Any, companions: tuple[Any, ...]) -> Any:
    """The reduction of ``obj``, an instance whose ``__dict__`` is its class's, with
    ``companions`` pickled beside it: the instances of other classes whose shared state its
    class builds its own on (a codec knows which), so that theirs comes back too.

    Raises
    ------
    TypeError
        ``obj``'s ``__dict__`` is no class attribute of its class.
    """
    state = obj.__dict__
    for owner, name, value in _class_attributes(type(obj)):
        if value is state:
            place = SharedDict(owner, name)
            place.state = state
            return __newobj__, (type(obj),), (place, companions), None, None, _share
    raise TypeError(f"this {type(obj).__qualname__} does not share its class's state")


def _register(obj: Any, state: tuple[dict[str, Any], tuple[Place, ...]]) -> None:
    attrs, places = state
    obj.__dict__.update(attrs)

    def register() -> None:
        for owner, name, key in places:
            registry = vars(owner).get(name)
            if isinstance(registry, weakref.WeakSet):
                registry.add(obj)
            elif isinstance(registry, dict | weakref.WeakValueDictionary) and key not in registry:
                registry[key] = obj

    on_commit(f"{type(obj).__qualname__} in its class's registry", register)


def reducer(obj: Any) -> Reducer | None:
    """A reducer for the instances of ``type(obj)``, for one pickling pass, if they may share
    state through their class (``obj``, the first met, decides for a Borg); else None."""
    kind = type(obj)
    if not _pickled_by_default(kind):
        return None
    state: Any = getattr(obj, "__dict__", None)
    shared: list[tuple[dict[str, Any], SharedDict]] = []
    registered: dict[int, list[Place]] = {}
    for owner, name, value in _class_attributes(kind):
        if value is state:
            shared.append((value, SharedDict(owner, name)))
        members = value.items() if not isinstance(value, weakref.WeakSet) else ((None, m) for m in value)
        for key, member in members:
            if type(member) is kind:
                registered.setdefault(id(member), []).append((owner, name, key))
    if not shared and not registered:
        return None
    for value, place in shared:
        place.state = value

    def reduce(obj: Any) -> Any:
        state = obj.__dict__
        for value, place in shared:
            if state is value:
                return __newobj__, (kind,), place, None, None, _share
        places = registered.get(id(obj))
        if places is not None:
            return __newobj__, (kind,), (state, tuple(places)), None, None, _register
        return NotImplemented

    return reduce
