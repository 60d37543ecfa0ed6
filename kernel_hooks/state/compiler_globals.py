"""The globals a compiler put into the notebook's namespace, which are not the user's variables.

torch's dynamo installs what it generates for a compiled frame as globals of that frame's
module, the notebook's namespace for a function defined in a cell: ``__compiled_fn_*``,
``__resume_at_*``, ``__builtins_dict___*``, ``___module_*`` and others. Each is told by its name
and its value together, so that no variable of the user's is taken for one:

* those dynamo registers with the hook that removes them once their compiled code is freed
  (``torch._dynamo.utils.CleanupManager``): torch says which they are;
* those a compilation left without that hook (one whose graph break restarted the analysis,
  or that made no graph): by the name dynamo gives them and the kind of value it puts there;
* those it writes without a hook, named from their value: the aliases of modules its guards
  import (``__import_torch_dot__dynamo_dot_utils``) and torch objects it caches.

Saved, they came back into a kernel whose dynamo then installs the same names again when the
compiled functions first run, and refuses a name already there; left out, the restored kernel
makes them itself.
"""

from __future__ import annotations

import builtins
import re
import sys
import types
from collections.abc import Callable
from typing import Any

_ABSENT = object()
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]+")
_UUID = r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"


def _resume_function(name: str, value: Any) -> bool:
    """A function dynamo made to resume a frame after a graph break, or the factory of one."""
    return isinstance(value, types.FunctionType) and (
        value.__name__ == name or value.__module__ == "torch._dynamo.output_graph")


_NAMED: tuple[tuple[re.Pattern[str], Callable[[str, Any], bool]], ...] = (
    (re.compile(r"__builtins_dict___\d+"), lambda name, value: value is vars(builtins)),
    (re.compile(rf"__compiled_fn_\d+({_UUID})?"), lambda name, value: callable(value)),
    (re.compile(r"__resume_at_\d+_\d+"), _resume_function),
)
"""Dynamo's names (``unique_id`` of output_graph.py and symbolic_convert.py) and the values it
installs under them."""


def _named_by_dynamo(name: str, value: Any) -> bool:
    """Whether ``name`` is what dynamo calls ``value`` when it installs it."""
    for pattern, fits in _NAMED:
        if pattern.fullmatch(name):
            return fits(name, value)
    if isinstance(value, types.ModuleType):  # InstructionTranslator.import_source
        return name == "__import_" + value.__name__.replace(".", "_dot_")
    try:  # TorchInGraphFunctionVariable.reconstruct
        qualified = f"{value.__module__}.{value.__name__}"
    except Exception:
        qualified = f"torch_obj_{id(value)}"
    return name == "__" + _NOT_NAME.sub("_", qualified)


def generated(namespace: dict[str, Any]) -> set[str]:
    """The names in ``namespace`` (all of a kernel's namespace, or some of its names) that
    hold what torch's dynamo installed under them."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return set()
    names = set()
    for hooks in list(utils.CleanupManager.instance.values.values()):
        for hook in hooks:
            name = getattr(hook, "name", None)
            if name in namespace and hook.scope.get(name, _ABSENT) is namespace[name]:
                names.add(name)
    names.update(name for name, value in namespace.items()
                 if name.startswith("__") and not name.endswith("__") and _named_by_dynamo(name, value))
    return names
