"""The libraries' global settings, so that a restored kernel behaves as the user left it.

They live in the libraries, not in the namespace: matplotlib's backend and rcParams,
scikit-learn's config, numpy's print and floating-point error options, pandas' options,
torch's global switches, bokeh's output (notebook, file) and its model id counter. Each is
captured only for a library the kernel has imported (capture never imports one), as a pickle
of its own, unpickled only once the library is imported again: the checkpoint's own
unpickling imports nothing for them, one that cannot be pickled is left out (and named), and
one that cannot be rebuilt (its class is gone) costs only itself. On restore each is set
back once its library is imported (:mod:`.on_import`), only where it differs from the value
there, and each on its own: one that fails is named, and the others still apply. What each
library needs is one entry of :data:`SETTINGS`.
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import cloudpickle

from ..report import error_text
from .on_import import when_imported

Item = tuple[str, str | None, bytes]
"""One captured value: its entry's name, the option's name in a keyed entry (else None),
and the value's pickle (cloudpickle's: a formatter defined in the notebook pickles too)."""


@dataclass(frozen=True)
class Setting:
    """One value of a library, read with ``get`` (None: nothing to save) and set with ``put``."""

    name: str
    library: str
    """The module that holds it: captured if it is imported, applied once it is."""
    call: str
    """How a user sets it, shown when it could not be saved or restored (``{value}`` filled in)."""
    get: Callable[[Any], Any]
    put: Callable[[Any, Any], None]


@dataclass(frozen=True)
class Options:
    """A library's named options: ``get`` returns those to save, ``put`` sets one."""

    name: str
    library: str
    call: str
    """As :attr:`Setting.call`, with ``{key}`` and ``{value}``."""
    get: Callable[[Any], dict[str, Any]]
    put: Callable[[Any, str, Any], None]


class _Refused(Exception):
    """A setting this kernel should not take; its message is the reason the user reads."""


def _backend(matplotlib: Any) -> Any:
    """The backend chosen, None while matplotlib would still pick one itself."""
    return matplotlib.get_backend(auto_select=False)


def _put_backend(matplotlib: Any, backend: str) -> None:
    """A non-interactive backend (agg, pdf ...) with ``matplotlib.use``; any other the way
    ``%matplotlib`` sets it, which also hooks the GUI's event loop or the inline display
    into the kernel."""
    from IPython import get_ipython
    from matplotlib.backends.registry import BackendFilter, backend_registry

    shell = get_ipython()
    non_interactive = backend_registry.list_builtin(BackendFilter.NON_INTERACTIVE)  # type: ignore[no-untyped-call]
    if shell is None or backend in non_interactive:
        matplotlib.use(backend)
    else:
        shell.enable_matplotlib(backend)


def _changed_rc(matplotlib: Any) -> dict[str, Any]:
    """rcParams that differ from matplotlib's defaults, but the backend (its own entry).

    Read with ``_get``, which matplotlib keeps stable for this: reading ``rcParams[key]``
    picks a backend (importing pyplot) while none is chosen, and warns for deprecated keys.
    """
    params, defaults = matplotlib.rcParams, matplotlib.rcParamsDefault
    return {key: params._get(key) for key in params
            if key != "backend" and params._get(key) != defaults._get(key)}


def _put_rc(matplotlib: Any, key: str, value: Any) -> None:
    matplotlib.rcParams[key] = value


def _changed_pandas(pandas: Any) -> dict[str, Any]:
    """pandas' options that differ from their defaults, leaving out the deprecated ones
    (reading them warns).

    Not all of them: some defaults depend on where pandas was imported (``display.max_columns``
    is 0 where pandas takes itself for a terminal, 20 in a notebook), and saving those would
    carry one kernel's guess into the next. The registry is the only record of the defaults.
    """
    config = pandas._config.config
    deprecated = config._deprecated_options
    return {key: value for key, option in config._registered_options.items()
            if key not in deprecated and (value := pandas.get_option(key)) != option.defval}


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _within_cpus(count: int) -> int:
    """``count`` threads, if this kernel has that many CPUs: a kernel moved to a smaller node
    keeps the thread count it starts with rather than the old node's."""
    if count > _cpus():
        raise _Refused(f"this kernel may use {_cpus()} CPUs")
    return count


def _put_device(torch: Any, device: str) -> None:
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise _Refused("this kernel has no CUDA device")
    torch.set_default_device(device)


def _bokeh_state(io: Any) -> Any:
    """bokeh's output state, None while there is none: ``curstate()`` would make one, and with
    it a document whose models take ids, and saving must change nothing. ``_STATE`` is where
    ``curstate()`` keeps it (no API reads it without making it)."""
    return io.state._STATE


def _notebook_output(io: Any) -> str | None:
    state = _bokeh_state(io)
    return state.notebook_type if state is not None and state.notebook else None


def _put_notebook_output(io: Any, notebook_type: str) -> None:
    """What ``output_notebook`` sets, through ``curstate()``'s own method: ``output_notebook``
    also loads BokehJS into the page (a new output), which the notebook's page still has."""
    io.state.curstate().output_notebook(notebook_type)


def _file_output(io: Any) -> tuple[Any, str, str, Any] | None:
    state = _bokeh_state(io)
    file = state.file if state is not None else None
    return None if file is None else (file.filename, file.title, file.resources.mode, file.resources.root_dir)


def _advance_ids(serialization: Any, last: int) -> None:
    """Number bokeh's new models on from the saving kernel's last id, as they would have been
    there, and so past every restored model's: a new model under a restored one's id would
    take its place in a document. bokeh keeps the counter in ``_simple_id`` (``make_id``), with
    no API to read or set it."""
    with serialization._simple_id_lock:
        serialization._simple_id = max(serialization._simple_id, last)


SETTINGS: tuple[Setting | Options, ...] = (
    # the backend first: setting it changes rcParams (interactive), which then come back as they were
    Setting("matplotlib.backend", "matplotlib", "matplotlib.use({value!r})", _backend, _put_backend),
    Options("matplotlib.rcParams", "matplotlib", "matplotlib.rcParams[{key!r}] = {value!r}", _changed_rc, _put_rc),
    Options("sklearn.config", "sklearn", "sklearn.set_config({key}={value!r})",
            lambda sklearn: sklearn.get_config(), lambda sklearn, key, value: sklearn.set_config(**{key: value})),
    # set_printoptions resets what it is not given (the formatter): all of them at once
    Setting("numpy.printoptions", "numpy", "numpy.set_printoptions(**{value!r})",
            lambda np: np.get_printoptions(), lambda np, value: np.set_printoptions(**value)),
    Setting("numpy.errors", "numpy", "numpy.seterr(**{value!r})",
            lambda np: np.geterr(), lambda np, value: np.seterr(**value)),
    Options("pandas.options", "pandas", "pandas.set_option({key!r}, {value!r})",
            _changed_pandas, lambda pandas, key, value: pandas.set_option(key, value)),
    Setting("torch.default_dtype", "torch", "torch.set_default_dtype(torch.{value})",
            lambda torch: str(torch.get_default_dtype()).removeprefix("torch."),
            lambda torch, value: torch.set_default_dtype(getattr(torch, value))),
    Setting("torch.num_threads", "torch", "torch.set_num_threads({value!r})",
            lambda torch: torch.get_num_threads(), lambda torch, value: torch.set_num_threads(_within_cpus(value))),
    # settable once, and only before inter-op parallel work starts
    Setting("torch.num_interop_threads", "torch", "torch.set_num_interop_threads({value!r})",
            lambda torch: torch.get_num_interop_threads(),
            lambda torch, value: torch.set_num_interop_threads(_within_cpus(value))),
    Setting("torch.deterministic_algorithms", "torch",
            "torch.use_deterministic_algorithms({value[0]!r}, warn_only={value[1]!r})",
            lambda torch: (torch.are_deterministic_algorithms_enabled(),
                           torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda torch, value: torch.use_deterministic_algorithms(value[0], warn_only=value[1])),
    Setting("torch.grad_enabled", "torch", "torch.set_grad_enabled({value!r})",
            lambda torch: torch.is_grad_enabled(), lambda torch, value: torch.set_grad_enabled(value)),
    Setting("torch.cudnn.benchmark", "torch", "torch.backends.cudnn.benchmark = {value!r}",
            lambda torch: torch.backends.cudnn.benchmark,
            lambda torch, value: setattr(torch.backends.cudnn, "benchmark", value)),
    Setting("torch.cudnn.deterministic", "torch", "torch.backends.cudnn.deterministic = {value!r}",
            lambda torch: torch.backends.cudnn.deterministic,
            lambda torch, value: setattr(torch.backends.cudnn, "deterministic", value)),
    Setting("torch.float32_matmul_precision", "torch", "torch.set_float32_matmul_precision({value!r})",
            lambda torch: torch.get_float32_matmul_precision(),
            lambda torch, value: torch.set_float32_matmul_precision(value)),
    Setting("torch.default_device", "torch", "torch.set_default_device({value!r})",
            lambda torch: str(torch.get_default_device()), _put_device),
    # the ids first: setting the output may make bokeh's state, whose document's models take ids
    Setting("bokeh.ids", "bokeh.util.serialization", "bokeh.util.serialization._simple_id = {value!r}",
            lambda serialization: serialization._simple_id, _advance_ids),
    Setting("bokeh.output_notebook", "bokeh.io", "bokeh.io.output_notebook(notebook_type={value!r})",
            _notebook_output, _put_notebook_output),
    Setting("bokeh.output_file", "bokeh.io", "bokeh.io.output_file(*{value!r})", _file_output,
            lambda io, value: io.state.curstate().output_file(*value)),
)
_ENTRIES = {entry.name: entry for entry in SETTINGS}
_ORDER = {entry.name: i for i, entry in enumerate(SETTINGS)}
_MISSING = object()


class _Unread:
    """Stands for a value that could not be unpickled, in messages."""

    def __repr__(self) -> str:
        return "..."


def describe(name: str, key: str | None, value: Any) -> str:
    """The call that sets ``value``, as the user would write it (cut to 160 characters)."""
    entry = _ENTRIES.get(name)
    try:
        text = entry.call.format(key=key, value=value) if entry is not None else f"{name} {key or ''}".strip()
    except Exception:  # a value whose repr fails (a user's formatter), or that was not read
        text = f"{name} {key or ''}".strip()
    return text if len(text) <= 160 else text[:157] + "..."


def _reason(error: Exception) -> str:
    return str(error) if isinstance(error, _Refused) else error_text(error)


def capture() -> tuple[list[Item], dict[str, str]]:
    """The settings of the libraries imported, and those left out: what, and why (it could
    not be read, or pickled). A getter that warns counts as failed: saving shows no warning.
    """
    values: list[tuple[str, str | None, Any]] = []
    left_out: dict[str, str] = {}
    for entry in SETTINGS:
        module = sys.modules.get(entry.library)
        if module is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                value = entry.get(module)
        except Exception as e:
            left_out[entry.name] = _reason(e)
            continue
        if isinstance(entry, Options):
            values += [(entry.name, key, option) for key, option in value.items()]
        elif value is not None:
            values.append((entry.name, None, value))
    items: list[Item] = []
    for name, key, value in values:
        try:
            items.append((name, key, cloudpickle.dumps(value)))
        except Exception as e:
            left_out[describe(name, key, value)] = error_text(e)
    return items, left_out


def apply(items: Sequence[Item]) -> list[str]:
    """Set the captured settings back, each library's once it is imported.

    Returns
    -------
    list of str
        Why each setting of a library imported by now could not be restored. One whose
        library is imported later says so then, as a ``RuntimeWarning``.
    """
    failures: list[str] = []
    groups: dict[str, list[Item]] = {}
    for item in sorted(items, key=lambda item: _ORDER.get(item[0], -1)):
        entry = _ENTRIES.get(item[0])
        if entry is None:
            failures.append(f"{describe(*item)} could not be restored: this version does not know the setting")
        else:
            groups.setdefault(entry.library, []).append(item)
    for library, group in groups.items():
        when_imported(library, partial(_apply_group, group, failures if library in sys.modules else None))
    return failures


def _apply_group(items: list[Item], failures: list[str] | None, module: Any) -> None:
    """Set one library's settings, appending each failure to ``failures`` (None: warn).

    Warnings are errors meanwhile: a deprecated option is refused, not set (matplotlib warns
    before it sets one), and the restore shows no warning of its own.
    """
    current: dict[str, Any] = {}
    for name, key, data in items:
        entry = _ENTRIES[name]
        value: Any = _Unread()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                value = pickle.loads(data)
                if isinstance(entry, Options):
                    if name not in current:  # read after the entries before it, which may change it
                        current[name] = entry.get(module)
                    if key is not None and current[name].get(key, _MISSING) != value:
                        entry.put(module, key, value)
                elif entry.get(module) != value:
                    entry.put(module, value)
        except Exception as e:
            text = f"{describe(name, key, value)} could not be restored: {_reason(e)}"
            if failures is None:
                warnings.warn(text, RuntimeWarning, stacklevel=2)
            else:
                failures.append(text)
