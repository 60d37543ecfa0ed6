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

Only the ``torch.compile`` arguments that its context keeps can come back; each is read from
where torch 2.13 keeps it, and a torch that keeps them elsewhere fails the save of that
variable with the attribute it missed, rather than compiling differently.
"""

from __future__ import annotations

import importlib
import sys
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
