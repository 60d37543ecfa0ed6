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
next cell finds every one set up. On the isolating pass, an object that only a lost variable
held is set up too.

The restore report tells the user what each variable came back as, so each action belongs to
a variable: the one the unpickler was building when the action was given (the pickle calls
:func:`variable_built` as it completes each variable). An object shared between variables
is built, and its action given, within the first of them in the namespace's order, which
the report names for it (as the save counts a shared buffer's bytes for the first variable
that holds it). A variable whose objects started a live part again (an action of a codec in
:data:`_CODECS` ran) is *rebuilt*; one with an object whose set-up failed is *not
restored*: the restore takes it out of the namespace, so that ``%gpuckpt rebuild`` makes it
again, and the report gives the reason and the cells that made it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..report import error_text
from .holding import holding

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
    ("accelerate.state", "accelerate_states"),
    ("torch.utils.tensorboard", "tensorboard_writers"),
    ("wandb.sdk.wandb_run", "wandb_runs"),
    ("mlflow.tracking.fluent", "mlflow_runs"),
    ("distributed", "dask_clusters"),
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

_pending: ContextVar[Activations | None] = ContextVar("_pending", default=None)
"""The unpickling pass under way in this thread, if a restore is collecting its actions."""


def on_commit(what: str, action: Callable[[], None]) -> None:
    """Run ``action`` once the restore unpickling this object commits, or at once if no
    restore is collecting (the object was unpickled some other way).

    An action of a live-object codec (a module of :data:`_CODECS`) that runs counts its
    variable as rebuilt in the restore report; others (a notebook function's source, put
    back for tracebacks) only restore. One that fails leaves its variable not restored, and
    every other variable that holds the object it sets up: a ``functools.partial``'s first
    argument, or the items of the action's ``objects`` (one action for many objects).

    Parameters
    ----------
    what
        The object, as the restore report names it if ``action`` fails ("widget IntSlider ...").
    action
        What the object does to the process: open its comm, configure a logger, start workers.
        Actions run in the order they were given, which is the order the unpickler finished
        the objects: an object's parts (a box's children, a logger's handlers) come first.
    """
    activations = _pending.get()
    if activations is None:
        action()
    else:
        activations.pending.append((what, action))


def variable_built(name: str | None) -> None:
    """Called by the pickle as it completes each variable, after its value: the actions
    given since the last variable completed are this one's."""
    activations = _pending.get()
    if activations is not None and len(activations.pending) > activations.owned:
        activations.owned = len(activations.pending)
        activations.owners.append((activations.owned, name))


def latest_action() -> Callable[[], None] | None:
    """The action last given within the variable being unpickled, if any: a codec whose
    objects come in numbers (a dask collection's futures) adds to it rather than giving one
    per object."""
    activations = _pending.get()
    if activations is None or len(activations.pending) == activations.owned:
        return None
    return activations.pending[-1][1]


@dataclass
class SetUp:
    """What running one pass's actions did, by the variable each belongs to (see the module doc)."""

    started: list[str] = field(default_factory=list)
    """Variables whose objects started a live part again, none failing: the report's rebuilt."""
    failed: dict[str, str] = field(default_factory=dict)
    """Variables with an object whose set-up failed, and why (the first that failed)."""
    unowned: list[str] = field(default_factory=list)
    """Why each action that belongs to no variable (the process's settings) failed."""
    broken: dict[int, tuple[Any, str, str]] = field(default_factory=dict)
    """The objects whose set-up failed (see :func:`on_commit`), by id, with their variable and why."""

    def holders(self, variables: Iterable[tuple[str, Any]], namespace: dict[str, Any]) -> dict[str, str]:
        """Of ``variables`` (names and values), those not failed that hold an object whose
        set-up failed (a collection built on a persisted one holds its futures), and why: an
        object shared between variables is set up within the first of them only."""
        if not self.broken:
            return {}
        held = holding([(name, value) for name, value in variables if name not in self.failed],
                       self.broken.keys(), skip=namespace)
        return {name: "holds an object of {1}: {2}".format(*self.broken[oid]) for name, oid in held.items()}


_LIVE_CODECS = frozenset(f"{__package__}.{codec}" for _, codec in _CODECS)


def _starts_live_part(action: Callable[[], None]) -> bool:
    """Whether ``action`` was given by a live-object codec (its function is one of theirs)."""
    while isinstance(action, functools.partial):
        action = action.func
    return getattr(action, "__module__", None) in _LIVE_CODECS


def _objects(action: Callable[[], None]) -> Iterable[Any]:
    """What ``action`` sets up (see :func:`on_commit`)."""
    if isinstance(action, functools.partial):
        return action.args[:1]
    objects: Iterable[Any] = getattr(action, "objects", ())
    return objects


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
    """The actions one unpickling pass collected (see :func:`collecting`), and the variable
    each belongs to."""

    def __init__(self) -> None:
        self.pending: list[Action] = []
        self.owners: list[tuple[int, str | None]] = []
        """``(end, name)``: the actions before ``end`` and after the previous entry's are ``name``'s."""
        self.owned = 0
        """How many of the actions belong to a variable completed so far."""

    def run(self, context: CommitContext | None = None) -> SetUp:
        """Run every action, each on its own, once, with ``context`` as :func:`commit_context`;
        returns what they did, by variable (one that fails does not stop the others)."""
        pending, owners = self.pending, [*self.owners, (len(self.pending), None)]
        self.pending, self.owners, self.owned = [], [], 0
        outcome, live = SetUp(), dict[str, None]()  # the variables, in order
        token = _context.set(context)
        try:
            part = 0
            for i, (what, action) in enumerate(pending):
                while owners[part][0] <= i:
                    part += 1
                owner = owners[part][1]
                try:
                    action()
                except Exception as e:
                    if owner is None:
                        outcome.unowned.append(f"{what} was restored but could not be set up again: {error_text(e)}")
                    else:
                        why = f"{what} could not be set up again: {error_text(e)}"
                        outcome.failed.setdefault(owner, why)
                        outcome.broken.update((id(o), (o, owner, why)) for o in _objects(action))
                else:
                    if owner is not None and _starts_live_part(action):
                        live[owner] = None
        finally:
            _context.reset(token)
        outcome.started = [name for name in live if name not in outcome.failed]
        return outcome


@contextlib.contextmanager
def collecting() -> Iterator[Activations]:
    """Collect the actions of the objects unpickled inside, for the restore to run once it commits."""
    activations = Activations()
    token = _pending.set(activations)
    try:
        yield activations
    finally:
        _pending.reset(token)
