"""Live objects: those holding threads, processes, locks, comms or open files, which a
pickle cannot take as they are, rebuilt as working objects of the same class.

Each codec module knows one kind (locks, loggers, the standard streams, progress bars,
executors and pools, torch DataLoaders, ipywidgets, bokeh models) and gives a reducer per
base class; it is imported only once the user's code has imported its library, so saving
imports none of these libraries itself. The pickler's reducer table is keyed by exact type, so each base
class's reducer is entered for every subclass defined so far (the notebook's too: the
table is built for each pickling pass). A subclass with pickling hooks of its own keeps
them: it said how it is to be pickled.

What a live object does to the process when it comes back (a widget opens its comm, a
logger takes its handlers, a pool starts its workers) waits until the restore commits: the
codecs hand it to :func:`on_commit` while unpickling, and the restore runs the
:class:`Activations` of the pass it keeps once the namespace has the variables (and the
kernel its working directory, ``sys.path`` and environment), with a :class:`CommitContext`
the actions read (whether the notebook's page kept its comms). A restore that fails, or a
pass read again (see :mod:`.isolation`), drops them, so the kernel is left as it was and
nothing is opened twice. Until then such an object is only built (a bare pool, a handler
without its stream, a widget without its comm), and only the restore holds it; the user's
next cell finds every one set up. One whose set-up fails stays in the namespace without it
(a widget with no comm, a pool never started), and the restore report says which. On the
isolating pass, an object that only a lost variable held is set up too.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..report import error_text

Reducer = Callable[[Any], Any]

_CODECS = (
    ("threading", "locks"),
    ("logging", "loggers"),
    ("sys", "std_streams"),  # always
    ("concurrent.futures", "executors"),
    ("multiprocessing", "executors"),
    ("tqdm", "progress_bars"),
    ("torch.utils.data", "data_loaders"),
    ("ipywidgets", "widgets"),
    ("bokeh.model", "bokeh_models"),
    ("astropy.wcs", "wcs_params"),
    ("matplotlib.cbook", "matplotlib_callbacks"),
)
"""(the library that must be imported already, the codec module for its objects)."""

_OWN_PICKLING = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")

_PLACES: weakref.WeakKeyDictionary[type, dict[type, int | None]] = weakref.WeakKeyDictionary()
"""What :func:`_place` found, by class: the table is built for every pickling pass (one per
variable when they are probed), and this took three quarters of building it."""


def _place(kind: type, base: type) -> int | None:
    """How far up ``kind``'s MRO ``base`` is, or None if ``kind`` or a class between it and
    ``base`` defines a pickling hook of its own."""
    places = _PLACES.setdefault(kind, {})
    if base not in places:
        place: int | None = None
        for depth, cls in enumerate(kind.__mro__):
            if cls is base:
                place = depth
                break
            if any(name in vars(cls) for name in _OWN_PICKLING):
                break
        places[base] = place
    return places[base]


def _with_subclasses(base: type) -> list[type]:
    """``base`` and every subclass of it defined so far."""
    found: list[type] = [base]
    queue, seen = [base], {base}
    while queue:
        subclasses: list[type] = type.__subclasses__(queue.pop())
        for sub in subclasses:
            if sub not in seen:
                seen.add(sub)
                found.append(sub)
                queue.append(sub)
    return found


def reducers() -> dict[type, Reducer]:
    """The reducers for the live objects of the libraries the kernel has imported, by
    exact type. Where two bases both cover a class, the nearer one in its MRO wins."""
    families: dict[type, Reducer] = {}
    loaded: set[str] = set()
    for library, codec in _CODECS:
        if library in sys.modules and codec not in loaded:
            loaded.add(codec)
            families.update(importlib.import_module(f"{__package__}.{codec}").families())
    table: dict[type, Reducer] = {}
    depth: dict[type, int] = {}
    for base, reduce in families.items():
        for kind in _with_subclasses(base):
            place = _place(kind, base)
            if place is not None and place < depth.get(kind, sys.maxsize):
                table[kind], depth[kind] = reduce, place
    return table


Action = tuple[str, Callable[[], None]]
"""What an object does once the restore commits, and what it is, for the report."""

_pending: ContextVar[list[Action] | None] = ContextVar("_pending", default=None)
"""The actions of the unpickling pass under way in this thread, if a restore is collecting them."""


def on_commit(what: str, action: Callable[[], None]) -> None:
    """Run ``action`` once the restore unpickling this object commits, or at once if no
    restore is collecting (the object was unpickled some other way).

    Parameters
    ----------
    what
        The object, as the restore report names it if ``action`` fails ("widget IntSlider ...").
    action
        What the object does to the process: open its comm, configure a logger, start workers.
        Actions run in the order they were given, which is the order the unpickler finished
        the objects: an object's parts (a box's children, a logger's handlers) come first.
    """
    pending = _pending.get()
    if pending is None:
        action()
    else:
        pending.append((what, action))


@dataclass(frozen=True)
class CommitContext:
    """What the restore knows about where its objects come back, for their actions to read
    (:func:`commit_context`)."""

    comms_kept: bool = False
    """The notebook's page still holds the comms the saving kernel had open, under their ids
    (see :data:`gpuckpt_store.protocol.COMMS_KEPT`): an object takes its comm back without
    opening it again."""


_context: ContextVar[CommitContext | None] = ContextVar("_context", default=None)


def commit_context() -> CommitContext:
    """The context of the restore whose actions are running; the default one (nothing kept)
    for an action run at once, outside a restore."""
    return _context.get() or CommitContext()


class Activations:
    """The actions one unpickling pass collected (see :func:`collecting`)."""

    def __init__(self) -> None:
        self.pending: list[Action] = []

    def run(self, context: CommitContext | None = None) -> list[str]:
        """Run every action, each on its own, once, with ``context`` as :func:`commit_context`;
        returns why each that failed did (its object is restored, without what the action does)."""
        failures = []
        pending, self.pending = self.pending, []
        token = _context.set(context)
        try:
            for what, action in pending:
                try:
                    action()
                except Exception as e:
                    failures.append(f"{what} was restored but could not be set up again: {error_text(e)}")
        finally:
            _context.reset(token)
        return failures


@contextlib.contextmanager
def collecting() -> Iterator[Activations]:
    """Collect the actions of the objects unpickled inside, for the restore to run once it commits."""
    activations = Activations()
    token = _pending.set(activations.pending)
    try:
        yield activations
    finally:
        _pending.reset(token)
