"""``torch.compile``'s functions and modules, saved as what was compiled and how, and compiled
again the same way on restore.

A function compiled with ``torch.compile`` is a closure of torch/_dynamo/eval_frame.py that
``functools.wraps`` gives the user function's name and module: pickled by value (as a
notebook's functions are), it took dynamo's context along, whose config does not pickle
(``cannot pickle 'ConfigModuleInstance'``). It is saved as the function it wraps and the
arguments of ``torch.compile`` that made it. The restored wrapper compiles on its first call,
as a new one always does: what dynamo compiled (code, guards, kernels) belongs to the saving
process and is not saved; inductor's on-disk caches still serve it.

``OptimizedModule`` has a ``__reduce__`` of its own, the module and dynamo's context, but
torch 2.13 pickles that context without ``fullgraph`` and ``dynamic`` (``OptimizeContext.
__reduce__`` keeps neither): the module goes through the same recipe, which is what torch's
own reduction rebuilds, ``OptimizedModule(module, context)``, with every argument kept.

A module compiled in place (``model.compile(...)``, which sets ``_compiled_call_impl`` to
``torch.compile(model._call_impl, ...)``) lost it: ``Module.__getstate__`` drops it. Such a
module is pickled the way torch pickles it, and compiled in place again with the same
arguments once its state is loaded. Whether a type is a module is asked once per type and
pickling pass; a module not compiled in place costs one lookup in its ``__dict__``.

Only the ``torch.compile`` arguments that its context keeps can come back; each is read from
where torch 2.13 keeps it, and a torch that keeps them elsewhere fails the save of that
variable with the attribute it missed, rather than compiling differently.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any


def compile_again(target: Any, arguments: dict[str, Any]) -> Any:
    """``torch.compile(target, **arguments)``: what the pickle calls on restore."""
    import torch

    return torch.compile(target, **arguments)


def _backend_arguments(backend: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``torch.compile`` arguments, and its ``options``, that made the innermost backend
    ``backend`` of a dynamo context."""
    import torch
    from torch._dynamo.backends.registry import lookup_backend

    if isinstance(backend, torch._TorchCompileInductorWrapper):
        # The mode's settings are in its config already: they come back as options.
        options = dict(backend.config)
        if isinstance(backend, torch._TorchCompileAOTInductorWrapper):
            options["use_aoti"] = True
        return {"backend": "inductor", "name": backend.name}, options
    if isinstance(backend, torch._TorchCompileWrapper):
        name, compiler = backend.compiler_name, backend.compiler_fn
        try:
            registered = lookup_backend(name) is compiler
        except Exception:  # a callable backend, named after its __name__, not registered
            registered = False
        return ({"backend": name if registered else compiler, "mode": backend.kwargs.get("mode")},
                dict(backend.kwargs.get("options") or {}))
    return {"backend": backend}, {}  # a backend callable given to torch._dynamo.optimize


def compile_arguments(context: Any) -> dict[str, Any]:
    """The arguments of ``torch.compile`` that made dynamo's context ``context``, without the
    defaults."""
    from torch._dynamo.eval_frame import innermost_backend

    arguments, options = _backend_arguments(innermost_backend(context.callback))
    arguments.update(fullgraph=context.fullgraph, dynamic=context._dynamic,
                     recompile_limit=context.callback._recompile_limit,
                     isolate_recompiles=context._isolate_recompiles_id != -1,
                     shapes_spec=context._shapes_spec)
    # torch.compile takes guard_filter_fn among the options, and hands it to the context's hooks.
    if context._hooks.guard_filter_fn is not None:
        options["guard_filter_fn"] = context._hooks.guard_filter_fn
    if options:
        arguments["options"] = options
    return {key: value for key, value in arguments.items()
            if value is not None and not (key in ("fullgraph", "isolate_recompiles") and value is False)}


def _optimize_context(wrapper: Any) -> Any:
    """The dynamo context a compile wrapper closes over (its ``self``), or None if it is not
    ``torch.compile``'s (``torch.compiler.disable`` makes one too: it pickles as it is)."""
    from torch._dynamo.eval_frame import OptimizeContext

    code = wrapper.__code__
    if "self" not in code.co_freevars:
        return None
    context = wrapper.__closure__[code.co_freevars.index("self")].cell_contents
    return context if isinstance(context, OptimizeContext) else None


def _compiled_target(wrapper: Any) -> Any:
    """What a compile wrapper compiles, without the frame torch wraps some callables in
    (``external_utils.wrap_inline``), which compiling again adds back."""
    from torch._dynamo import external_utils

    target = wrapper._torchdynamo_orig_callable
    if getattr(target, "__globals__", None) is vars(external_utils) and hasattr(target, "__wrapped__"):
        return target.__wrapped__
    return target


def reduce_function(wrapper: Any) -> Any:
    """The reduction of a function ``torch.compile`` made, or None if ``wrapper`` only carries
    its attributes (``functools.wraps`` copies them onto a decorator's wrapper of a compiled
    function, whose id then differs from the one dynamo noted)."""
    if wrapper.__dict__.get("_torchdynamo_wrapper_id") != id(wrapper):
        return None
    context = _optimize_context(wrapper)
    if context is None:
        return None
    return compile_again, (_compiled_target(wrapper), compile_arguments(context))


def _reduce_module(module: Any) -> Any:
    """An ``OptimizedModule`` as ``torch.compile`` of the module it holds; one that
    ``torch.compiler.disable`` made keeps torch's reduction."""
    from torch._dynamo.eval_frame import OptimizeContext

    if not isinstance(module.dynamo_ctx, OptimizeContext):
        return NotImplemented
    return compile_again, (module._orig_mod, compile_arguments(module.dynamo_ctx))


def _build_and_compile(module: Any, state: tuple[Any, Any, dict[str, Any]]) -> Any:
    """Load a module's state as pickle would have (with its own state setter, if its
    reduction has one), then ``module.compile(**arguments)``: the pickle's state setter."""
    own_state, own_setter, arguments = state
    if own_setter is not None:
        own_setter(module, own_state)
    elif own_state is not None:
        module.__setstate__(own_state)  # every nn.Module has it, so pickle's BUILD would call it
    module.compile(**arguments)
    return module


def module_reducer(kind: type, protocol: int) -> Callable[[Any], Any] | None:
    """A reducer for ``kind``'s instances if ``kind`` is an ``nn.Module``, else None: each
    compiled in place with ``torch.compile``'s arguments is pickled as torch reduces it
    (for ``protocol``) and compiled again the same way once loaded; any other pickles as
    before (NotImplemented)."""
    from torch.nn import Module

    if not issubclass(kind, Module):
        return None

    def reduce(module: Any) -> Any:
        wrapper = module.__dict__.get("_compiled_call_impl")
        if type(wrapper) is not types.FunctionType or wrapper.__dict__.get("_torchdynamo_wrapper_id") != id(wrapper):
            return NotImplemented
        context = _optimize_context(wrapper)
        if context is None or _compiled_target(wrapper) != module._call_impl:
            return NotImplemented  # not what Module.compile makes: torch drops it
        reduced = module.__reduce_ex__(protocol)
        if type(reduced) is not tuple:
            return NotImplemented
        func, args, state, items, pairs, setter = (*reduced, None, None, None, None)[:6]
        return func, args, (state, setter, compile_arguments(context)), items, pairs, _build_and_compile

    return reduce


def _reduce_config(config: Any) -> Any:
    """A config module of torch's (``torch._dynamo.config``), by name, as pickle takes a module:
    each is a module of its own ``ModuleType`` subclass, which pickle does not take for one."""
    name: str = config.__name__
    if sys.modules.get(name) is not config:
        return NotImplemented
    return importlib.import_module, (name,)


def reducers() -> dict[type, Any]:
    """The reducers for the objects ``torch.compile`` returns that are not functions, and for
    torch's config modules, which the attributes dynamo gives a compiled function (and
    ``functools.wraps`` copies onto a decorator's wrapper of it) refer to."""
    from torch._dynamo.eval_frame import OptimizedModule
    from torch.utils._config_module import ConfigModule

    table: dict[type, Any] = {OptimizedModule: _reduce_module}
    table.update(dict.fromkeys(ConfigModule.__subclasses__(), _reduce_config))
    return table
