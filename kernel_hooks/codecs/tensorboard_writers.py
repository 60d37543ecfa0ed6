"""torch's tensorboard ``SummaryWriter``: a writer comes back opened again on the same log
dir, appending: it starts a new event file there, as a second process writing to one run
does, and tensorboard reads a dir's event files as one run. The steps are the user's: the
writer keeps none of its own.

A writer holds a ``FileWriter`` whose thread writes the events; neither pickles. The writer
is saved as its settings and the rest of its state, without the file writers (torch makes
them again on the next write after ``close()`` too), and is flushed first: the thread writes
an event to the file when it gets to it, and a kernel ended right after a suspend would lose
those still queued. ``purge_step`` is used when the writer first opens and set to None
then, so it is None in a saved writer and the reopened one purges nothing.

The writer is made bare while unpickling and gets its state and opens its log dir once the
restore commits (see :func:`.live_objects.on_commit`). A log dir that is gone by then
(deleted, or on another machine's disk) is not made again: a writer appending there would
start a log without the events before the suspend, and nothing would say so. The restore
reports the writer not restored, with the reason, and it is never opened: re-running the cell
that made it starts a new log.
A writer that was closed comes back closed, and like any closed writer opens again when used.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from .live_objects import Reducer, on_commit

_FILE_WRITERS = ("file_writer", "all_writers")


def _local(log_dir: str) -> bool:
    """Whether ``log_dir`` is a path on this machine, not a URL (``s3://``, ``gs://``) that
    tensorboard's file system layer writes to."""
    return "://" not in log_dir


def _open_writer(writer: SummaryWriter, state: dict[str, Any], opened: bool) -> None:
    log_dir = str(state["log_dir"])
    if opened and _local(log_dir) and not os.path.isdir(log_dir):
        raise FileNotFoundError(f"its log dir is gone, with the events written before the save: {log_dir}")
    writer.__dict__.update(state, file_writer=None, all_writers=None)
    if opened:
        writer._get_file_writer()  # type: ignore[no-untyped-call]  # as every write does: a new event file


def _writer(kind: type[SummaryWriter], state: dict[str, Any], opened: bool) -> SummaryWriter:
    writer = kind.__new__(kind)
    on_commit(f"tensorboard SummaryWriter on {state['log_dir']}", partial(_open_writer, writer, state, opened))
    return writer


def _reduce_writer(writer: SummaryWriter) -> Any:
    opened = writer.all_writers is not None and writer.file_writer is not None
    if opened:
        writer.flush()
    state = {key: value for key, value in vars(writer).items() if key not in _FILE_WRITERS}
    return _writer, (type(writer), state, opened)


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {SummaryWriter: _reduce_writer}
