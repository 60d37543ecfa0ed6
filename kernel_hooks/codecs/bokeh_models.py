"""bokeh models (figures, glyphs, sources, ranges ...): each comes back with its id and the
properties that were set on it, as bokeh's own deserializer rebuilds a document.

Pickled the default way, a model failed to load with ``'PropertyValueList' object has no
attribute '_owners'``: bokeh wraps list, dict and set property values in containers that
notify the models owning them on every change, and create that set of owners in
``__init__``. Pickle rebuilds a ``list`` subclass without calling ``__init__`` and then fills
it through ``append``/``extend``, which the container overrides to notify owners it does not
have yet. Pickled whole, a model would also bring its document, with that document's locks
and sessions.

So a model is made as ``bokeh.core.serialization.Deserializer`` makes one:
``cls.__new__(cls, id=...)`` (deferred initialization), then ``HasProps.__init__`` (not the
class's own ``__init__``, which would make default glyphs, tools or axes), here given the
properties that were set on it (those ``query_properties_with_values(include_defaults=False)``
names, serialized or not: a unit such as ``radius_units``, a slider's ``value_throttled``),
each as its attribute reads: the value as it was set; the defaults bokeh made for the
instance (a figure's ranges, a source's selection) are put back where bokeh keeps them,
as defaults, not as set values. Not as
``properties_with_values`` gives it, serialized: ``plot.line(xs, ys)`` sets a glyph's ``x``
to the column name ``"x"``, which serializes to ``field("x")``, the default, and setting a
property to its default does not mark it set, so the glyph came back without ``x`` and
``y`` in its JSON (bokeh's own ``clone()`` and JSON round trip lose them alike).

Containers are saved as plain lists, dicts and sets, and bokeh's markers for values not
given (``Unspecified`` in a glyph's ``field("x")``, ``Undefined``, ``Intrinsic``) as the
very markers, which bokeh tests by identity (a copy failed to serialize). Models shared by
several others, or by several variables, stay shared. Python callbacks (``on_change``,
``on_event``, for bokeh server apps) are not kept.

A model refers to its document, so the document comes back with any model of it: its
roots, title, theme, configuration (the ``DocumentConfig`` model, with its id, which every
JSON of the document carries), template variables and JavaScript event callbacks (not a
custom template, nor Python or session callbacks), and, if it was ``curdoc()``, as
``curdoc()`` again, so ``show`` adds to it as before (bokeh's output settings and its id
counter are settings: see ``bokeh.*`` in :mod:`..state.settings`). Its roots are added, and
it is made current, once the restore commits (see :func:`.live_objects.on_commit`): adding
a root walks every model it reaches, which the unpickler may not have finished, since a
root refers to its document and the document to its roots.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from bokeh.core.has_props import HasProps
from bokeh.core.property.descriptors import PropertyDescriptor
from bokeh.core.property.singletons import Intrinsic, Undefined
from bokeh.core.property.wrappers import (
    PropertyValueContainer,
    PropertyValueDict,
    PropertyValueList,
    PropertyValueSet,
)
from bokeh.document import Document
from bokeh.model import Model
from bokeh.themes import Theme, built_in_themes
from bokeh.themes import default as default_theme
from bokeh.util.dataclasses import Unspecified

from .live_objects import Reducer, on_commit


def _new_model(kind: type[Model], model_id: str) -> Model:
    return kind.__new__(kind, id=model_id)  # type: ignore[arg-type]


def _set_properties(model: Model, saved: tuple[dict[str, Any], Document | None, dict[str, Any]]) -> None:
    properties, _, made = saved  # its document adds it, with its root, once the restore commits
    HasProps.__init__(model, **properties)
    for name, value in made.items():
        # As bokeh's descriptor keeps a default it made for this instance (``_get_default``):
        # given to __init__, it would count as set by the user (and serialize as such).
        descriptor = model.lookup(name)
        value = descriptor.property.wrap(value)
        if isinstance(value, PropertyValueContainer):
            value._register_owner(model, descriptor)
        model._unstable_default_values[name] = value


def _is_property(descriptor: Any) -> bool:
    """Not an alias (``Toolbar.toggleable``): reading a deprecated one warns."""
    return isinstance(descriptor, PropertyDescriptor)


def _reduce_model(model: Model) -> Any:
    # A property with no default that was never set (``plot.circle(x, y)`` leaves a Circle's
    # radius so) is Undefined, which HasProps.__init__ leaves unset again.
    set_ = model.query_properties_with_values(_is_property, include_defaults=False, include_undefined=True)
    made = {name: model._unstable_default_values[name] for name in set_ if name in model._unstable_default_values}
    properties = {name: value if value is Undefined else getattr(model, name) for name, value in set_.items()
                  if name not in made}
    return _new_model, (type(model), model.id), (properties, model.document, made), None, None, _set_properties


def _is_current(document: Document) -> bool:
    """Whether ``document`` is ``curdoc()``, read without making bokeh's state: ``curstate()``
    makes it when there is none, and with it a document whose models take ids, and saving
    must change nothing. ``_STATE`` is where ``curstate()`` keeps it (no API reads it)."""
    state_module = sys.modules.get("bokeh.io.state")
    state = getattr(state_module, "_STATE", None)
    return state is not None and state.document is document


def _theme(document: Document) -> Theme | str | None:
    """The document's theme as its setter takes it: None for the default, a built-in one's name."""
    theme = document.theme
    if theme is default_theme:
        return None
    return next((name for name, built_in in built_in_themes.items() if built_in is theme), theme)


def _reduce_document(document: Document) -> Any:
    state = {"title": document.title, "theme": _theme(document), "config": document.config,
             "roots": document.roots, "template_variables": dict(document.template_variables),
             "js_event_callbacks": dict(document.callbacks.js_event_callbacks), "current": _is_current(document)}
    return Document, (), state, None, None, _set_document_state


def _set_document_state(document: Document, state: dict[str, Any]) -> None:
    # bokeh has no API that gives a document its configuration: Document.from_json sets it so.
    document._config = state["config"]
    document.title = state["title"]
    document.theme = state["theme"]
    document.template_variables.update(state["template_variables"])
    for event, callbacks in state["js_event_callbacks"].items():
        document.js_on_event(event, *callbacks)
    on_commit(f"bokeh document {state['title']!r}", partial(_attach_roots, document, state["roots"], state["current"]))


def _attach_roots(document: Document, roots: list[Model], current: bool) -> None:
    for root in roots:
        document.add_root(root)
    if current:
        from bokeh.io.doc import set_curdoc

        set_curdoc(document)


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {
        Model: _reduce_model,
        Document: _reduce_document,
        PropertyValueList: lambda values: (list, (list(values),)),
        PropertyValueDict: lambda values: (dict, (dict(values),)),
        PropertyValueSet: lambda values: (set, (set(values),)),
        # A string names the marker in its class's module: pickle saves a reference to it.
        type(Unspecified): lambda _: "Unspecified",
        type(Undefined): lambda _: "Undefined",
        type(Intrinsic): lambda _: "Intrinsic",
    }
