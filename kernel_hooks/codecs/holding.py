"""Which variables hold an object, through the references the garbage collector sees.

The restore report asks this only when an object could not be set up again (see
:meth:`.live_objects.SetUp.holders`): the object was unpickled within the first variable
that holds it, and every other variable that reaches it (``y = x * 2`` holds the futures of
a persisted ``x``) does not work either. Only then, so a restore that sets everything up
walks nothing.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Collection, Iterable
from typing import Any


def _referents(obj: Any) -> Iterable[Any]:
    """What ``obj`` refers to, less what every variable could reach: a module's or a class's
    contents, and a function's globals (a notebook function's are the namespace)."""
    if isinstance(obj, (types.ModuleType, type)):
        return ()
    if isinstance(obj, types.FunctionType):
        return [*(obj.__closure__ or ()), *(obj.__defaults__ or ()), obj.__kwdefaults__, obj.__dict__]
    return gc.get_referents(obj)


def holding(variables: Iterable[tuple[str, Any]], targets: Collection[int], skip: object) -> dict[str, int]:
    """For each variable (a name and its value) that reaches an object whose id is in
    ``targets``, the id of one it reaches. ``skip`` (the namespace) is not followed.

    Objects the collector does not track hold no tracked object, and are not followed either;
    an object reached by an earlier walk that found nothing is not walked again.
    """
    clean = {id(skip)}
    found = {}
    for name, value in variables:
        hit = _reach(value, targets, clean)
        if hit is not None:
            found[name] = hit
    return found


def _reach(value: Any, targets: Collection[int], clean: set[int]) -> int | None:
    if id(value) in targets:
        return id(value)
    seen = {id(value)}
    queue = [value]
    while queue:
        for ref in _referents(queue.pop()):
            rid = id(ref)
            if rid in targets:
                return rid
            if rid not in seen and rid not in clean and gc.is_tracked(ref):
                seen.add(rid)
                queue.append(ref)
    clean |= seen
    return None
