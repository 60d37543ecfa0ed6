"""Wrappers that borrow another function's identity, saved as "wrap that function again the
same way".

A decorator's wrapper made with ``functools.wraps`` carries the wrapped function's name,
module and ``__wrapped__``. One whose code is the notebook's pickles by value with its
closure, as every notebook function does: that is wrapping again the same way. One whose code
is a library's but which took a notebook function's identity is pickled by value too (by
name, the restoring kernel would not find it), with its closure and the library globals its
code reads; that holds where those pickle (``torch.no_grad()`` as a decorator, say). Where a
library's way of wrapping is known, the wrapper is saved as that way and the function it
wraps, and wrapped again on restore:

* ``torch.compile`` (:mod:`.compiled_functions`): the function, or module, and the arguments
  it was compiled with; it compiles again on first call. A module compiled in place
  (``model.compile()``) is compiled in place again;
* ``functools.lru_cache`` and ``functools.cache``: not functions, but pickled by name, which
  the restoring kernel's namespace does not hold while it unpickles; saved as the cached
  function and the cache's parameters, and back with an empty cache.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any


def _found_by_name(obj: Any) -> bool:
    """Whether pickling ``obj`` by its module and qualified name finds it again in another
    process: not for the notebook's ``__main__``, whose names the restore fills only after
    unpickling."""
    module_name = getattr(obj, "__module__", None)
    found = sys.modules.get(module_name) if module_name and module_name != "__main__" else None
    for part in getattr(obj, "__qualname__", "<locals>").split("."):
        found = getattr(found, part, None)
    return found is obj


def reduce_function(func: types.FunctionType) -> Any:
    """The reduction of ``func``, a library's function that has ``__wrapped__``, as its
    library's way of wrapping applied again; None where that way is not known, or where its
    name finds it (a library's own compiled function): it pickles as any function."""
    if "_torchdynamo_orig_callable" in func.__dict__ and "torch._dynamo" in sys.modules and not _found_by_name(func):
        from . import compiled_functions

        return compiled_functions.reduce_function(func)
    return None


def instance_reducer(kind: type, protocol: int) -> Callable[[Any], Any] | None:
    """A reducer for ``kind``'s instances, for one pickling pass, if a known library may have
    wrapped a method of theirs in place (an ``nn.Module`` compiled with ``model.compile()``);
    else None."""
    if "torch._dynamo" in sys.modules:
        from . import compiled_functions

        return compiled_functions.module_reducer(kind, protocol)
    return None


def cache_again(func: Any, parameters: dict[str, Any]) -> Any:
    """``functools.lru_cache(**parameters)(func)``: what the pickle calls on restore."""
    return functools.lru_cache(maxsize=parameters["maxsize"], typed=parameters["typed"])(func)


def _reduce_cache(cached: Any) -> Any:
    if _found_by_name(cached):
        return NotImplemented
    return cache_again, (cached.__wrapped__, cached.cache_parameters())


def reducers() -> dict[type, Any]:
    """The reducers for the wrappers of known libraries that are not functions, by type."""
    table: dict[type, Any] = {functools._lru_cache_wrapper: _reduce_cache}
    if "torch._dynamo" in sys.modules:
        from . import compiled_functions

        table.update(compiled_functions.reducers())
    return table
