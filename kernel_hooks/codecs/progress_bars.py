"""tqdm progress bars: a bar comes back with its count, total, timings and settings,
writing to the same file (the restoring kernel's ``sys.stderr`` if it wrote to the saving
kernel's), or, for ``tqdm.notebook`` bars, with its widget.

tqdm wraps the bar's file in a ``DisableOnWriteError`` that holds a weak proxy to the bar,
and prints through a closure over that wrapper (``sp``); neither pickles. The bar is made
bare while unpickling, and once the restore commits (see :func:`.live_objects.on_commit`)
it is registered among tqdm's bars (as ``tqdm.__new__`` registers each bar it makes), gets
its state, and its file is wrapped again and its printer made again as ``tqdm.__init__``
does, without printing anything. A bare bar is invisible to tqdm: one that a failed restore
drops closes without printing, where a bar with its state would print itself on the way
out. tqdm's monitor thread, which ``tqdm.__new__`` starts if none runs, is left to the
next bar made: it only forces a refresh of a bar whose updates stalled.
"""

from __future__ import annotations

import sys
import weakref
from functools import partial
from typing import Any

from tqdm import tqdm
from tqdm.utils import DisableOnWriteError, ObjectWrapper

from .live_objects import Reducer, on_commit


def _new_bar(kind: Any) -> Any:
    return object.__new__(kind)


def _set_bar_state(bar: Any, saved: dict[str, Any]) -> None:
    name = saved["state"].get("desc") or type(bar).__name__
    on_commit(f"progress bar {name!r}", partial(_set_up_bar, bar, saved))


def _set_up_bar(bar: Any, saved: dict[str, Any]) -> None:
    with type(bar).get_lock():  # tqdm's monitor thread reads the bars under it
        bar.__dict__.update(saved["state"])
        type(bar)._instances.add(bar)  # tqdm has no API that registers a bar it did not make
    bar.fp = DisableOnWriteError(saved["file"], tqdm_instance=bar)
    if saved["printer"]:
        bar.sp = bar.status_printer(bar.fp)
    container = saved["state"].get("container")
    if container is not None:
        container.pbar = weakref.proxy(bar)  # as tqdm.notebook sets it


def _reduce_bar(bar: Any) -> Any:
    state = dict(vars(bar))
    fp = state.pop("fp", None)
    has_printer = state.pop("sp", None) is not None
    file = fp.wrapper_getattr("_wrapped") if isinstance(fp, ObjectWrapper) else fp
    return _new_bar, (type(bar),), {"state": state, "file": file, "printer": has_printer}, None, None, _set_bar_state


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    table: dict[type, Reducer] = {tqdm: _reduce_bar}
    if "tqdm.notebook" in sys.modules and "ipywidgets" in sys.modules:
        from tqdm.notebook import TqdmHBox

        from .widgets import reduce_widget

        # The bar's widget points back at the bar through a weak proxy, set again above.
        table[TqdmHBox] = lambda box: reduce_widget(box, drop=("pbar",))
    return table
