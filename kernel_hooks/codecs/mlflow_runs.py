"""mlflow runs started with ``mlflow.start_run()``: an ``ActiveRun`` that was active comes back
active again, the same run, so ``mlflow.log_metric`` after the restore logs to it.

An ``ActiveRun`` is a record of the run (its info and data when it started) and pickles as
one; what makes it active is mlflow's stack of the runs started and not ended in the thread
(``active_run()`` is its top), and the tracking URI the run is stored under: both are
mlflow's globals, which a restored kernel has fresh. A restored record alone would leave no
run active, and the next ``mlflow.log_metric`` would start a new run. So an active run is
saved with the tracking URI and the stack of run ids (a nested run's parents under it), and
once the restore commits (see :func:`.live_objects.on_commit`) the URI is set and each run
of the stack started again by id, ``mlflow.start_run(run_id=...)``, as mlflow continues a
run (its status goes back to running). The first saved run's set-up does it; the others of
the same stack find it done. Metrics logged with ``synchronous=False`` are flushed at the
save, so they are in the store the restored run reads.

A run stored on this machine's disk (a sqlite database, a file store) whose store is gone by
the restore is not started again, and the restore report says so: ``start_run`` would make an
empty store, and log the rest of the run where its start is not. A run ended before the save
comes back as the record it is. What else the fluent API keeps (the active experiment, set by
``mlflow.set_experiment``; autologging) is not carried over, nor is an active run that no
variable holds (``mlflow.start_run()`` not assigned).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any
from urllib.parse import urlparse

import mlflow
from mlflow.tracking.fluent import ActiveRun, _active_run_stack

from .live_objects import Reducer, on_commit


def _started() -> list[str]:
    """The ids of the runs active in this thread, outermost first (mlflow keeps them in this
    stack, and ``active_run()`` shows only its top)."""
    return [run.info.run_id for run in _active_run_stack.get()]  # type: ignore[no-untyped-call]


def _local_store(uri: str) -> str | None:
    """The file or folder holding a tracking store on this machine's disk, or None for a server."""
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        return parsed.path[1:]  # sqlite:///relative.db, sqlite:////absolute.db
    if parsed.scheme in ("", "file"):
        return parsed.path
    return None


def _start_again(run: ActiveRun, uri: str, stack: list[str]) -> None:
    """Start ``run``'s stack again (``run`` first: the restore reports its variable if this fails)."""
    started = _started()
    if started == stack:
        return  # by the set-up of another saved run of this stack
    if started:
        raise RuntimeError(f"mlflow run {started[-1]} is active in this kernel already")
    store = _local_store(uri)
    if store is not None and not os.path.exists(store):
        raise FileNotFoundError(f"its tracking store is gone, with the run: {store}")
    mlflow.set_tracking_uri(uri)
    for depth, run_id in enumerate(stack):
        mlflow.start_run(run_id=run_id, nested=depth > 0)


def _active_run(kind: type[ActiveRun], state: dict[str, Any], uri: str, stack: list[str]) -> ActiveRun:
    run = kind.__new__(kind)
    run.__dict__.update(state)
    on_commit(f"mlflow run {run.info.run_id}", partial(_start_again, run, uri, stack))
    return run


def _reduce_active_run(run: ActiveRun) -> Any:
    stack = _started()
    if run.info.run_id not in stack:
        return NotImplemented  # ended: the record it is, pickled as such
    mlflow.flush_async_logging()
    return _active_run, (type(run), dict(vars(run)), mlflow.get_tracking_uri(), stack)


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {ActiveRun: _reduce_active_run}
