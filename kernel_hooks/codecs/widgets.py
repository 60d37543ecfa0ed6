"""ipywidgets widgets: a widget comes back with its state and a new comm under its old model
id, so the notebook's outputs that displayed it find it again.

A widget is its traits plus a comm to the frontend; the comm belongs to the saving kernel.
The widget is saved as traitlets pickles a ``HasTraits`` (its ``__dict__``), without the
comm and without the handlers its class registers (``__setstate__`` registers them again),
but with the observers and validators registered on it (``observe``, ``link``, ``interact``,
which traitlets' own pickling would drop). Once the restore commits (see
:func:`.live_objects.on_commit`), its comm comes back in one of two ways, by what the page
has (:attr:`.live_objects.CommitContext.comms_kept`):

- The page dropped its widgets (a failover: it saw the kernel restart; or a fresh kernel): the
  widget is opened as ``Widget.__init__`` opens it: ``Widget.open()`` sends a ``comm_open`` for
  ``jupyter.widget`` carrying the state, with ``comm_id`` set to the old model id (the
  ``model_id`` that ``Widget(model_id=...)`` takes).
- The page kept them (a resume: it never saw the kernel go): a ``comm_open`` would make the page
  put a second model under the id, leaving the views it shows on the first. The comm is
  registered here under the old id without one, and the widget sends its whole state as an
  update of the model the page has. A page loaded later asks ipywidgets for every widget's
  state (``request_states``), which finds these as it finds the others.

A widget restored into a kernel that has a comm under its id already (restored twice) is
opened under a new id. The widgets it holds (children, layout, style) come back first, so its
state refers to them by their ids. A widget that was closed comes back closed.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import comm
from ipywidgets import Widget
from traitlets import EventHandler

from .live_objects import Reducer, commit_context, on_commit

_LEFT_OUT = ("comm", "log", "_property_lock", "_states_to_send")
"""Trait values not saved: the comm; the kernel application's logger, a default each kernel
gives its own; the bookkeeping of a message being handled."""


def _new_widget(kind: Any) -> Any:
    return kind.__new__(kind)


def _open(widget: Any) -> None:
    manager = comm.get_comm_manager()
    if widget._model_id in manager.comms:
        # Restored into the kernel that still has it (restored twice): two comms under
        # one id would take each other's messages, and closing one would unregister both.
        widget._model_id = None
    elif commit_context().comms_kept:
        _reattach(widget, manager)
        return
    widget.open()


def _reattach(widget: Any, manager: Any) -> None:
    """Take back the comm the page kept under the widget's id, and update the page's model."""
    channel = comm.create_comm(target_name="jupyter.widget", comm_id=widget._model_id, primary=False)
    if hasattr(channel, "kernel") and channel.kernel is None:
        # ipykernel's comm finds its kernel as it sends its comm_open, and ipywidgets sends
        # nothing on a comm without one
        from ipykernel.kernelbase import Kernel

        channel.kernel = Kernel.instance()
    manager.register_comm(channel)
    widget.comm = channel  # ipywidgets then handles its messages and lists the widget
    widget.send_state()


def _set_widget_state(widget: Any, saved: dict[str, Any]) -> None:
    widget.__setstate__(saved["state"])  # traitlets: the class's handlers come back
    if saved["open"]:
        on_commit(f"widget {type(widget).__name__} {widget._model_id}", partial(_open, widget))


def _own_handlers(notifiers: dict[str, dict[str, list[Any]]]) -> dict[str, dict[str, list[Any]]]:
    """The observers registered on the widget itself, not by its class."""
    kept: dict[str, dict[str, list[Any]]] = {}
    for name, by_type in notifiers.items():
        for kind, handlers in by_type.items():
            own = [h for h in handlers if not isinstance(h, EventHandler)]
            if own:
                kept.setdefault(name, {})[kind] = own
    return kept


def reduce_widget(widget: Any, drop: Iterable[str] = ()) -> Any:
    """A widget's reduction, leaving out the instance attributes named in ``drop``.

    Parameters
    ----------
    widget
        Any ipywidgets ``Widget``.
    drop
        Attributes another codec sets again on restore (tqdm's bar points back at its bar).
    """
    state = dict(vars(widget))
    for name in drop:
        state.pop(name, None)
    values = dict(state["_trait_values"])
    is_open = values.get("comm") is not None
    for name in _LEFT_OUT:
        values.pop(name, None)
    state["_trait_values"] = values
    state["_trait_notifiers"] = _own_handlers(state["_trait_notifiers"])
    state["_trait_validators"] = {k: v for k, v in state["_trait_validators"].items()
                                  if not isinstance(v, EventHandler)}
    state["_cross_validation_lock"] = False
    return _new_widget, (type(widget),), {"state": state, "open": is_open}, None, None, _set_widget_state


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {Widget: reduce_widget}
