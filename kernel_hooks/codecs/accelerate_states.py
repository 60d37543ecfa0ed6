"""accelerate's ``AcceleratorState``, which builds its shared state on ``PartialState``'s.

Both are shared-state singletons, restored as such (see :mod:`.shared_state`); but a notebook
often holds no ``PartialState`` (an ``Accelerator`` keeps only its ``AcceleratorState``). An
``AcceleratorState()`` made after a restore that left ``PartialState``'s class dict empty
(accelerate makes one in ``AcceleratedScheduler.step``, say) initializes a ``PartialState``
from this machine's defaults and copies it over its own state: an ``Accelerator(cpu=True)``
saved on a GPU machine came back on ``cuda``. So an ``AcceleratorState`` is pickled with a
``PartialState`` beside it, and both class dicts come back.
"""

from __future__ import annotations

from typing import Any

from accelerate.state import AcceleratorState, PartialState

from . import shared_state
from .live_objects import Reducer


def _reduce_state(state: AcceleratorState) -> Any:
    if state.__dict__ is not AcceleratorState._shared_state:
        return NotImplemented
    partial = PartialState.__new__(PartialState)
    partial.__dict__ = PartialState._shared_state  # what PartialState.__init__ does first, and here all
    return shared_state.borg(state, (partial,))


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {AcceleratorState: _reduce_state}
