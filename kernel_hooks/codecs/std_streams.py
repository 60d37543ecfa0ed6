"""``sys.stdout``, ``sys.stderr`` and ``sys.stdin`` held by objects (a logging handler's
stream, a progress bar's file): each comes back as the restoring kernel's stream of the
same name. In a kernel they are ipykernel's streams to the notebook, whose session and
sockets belong to the kernel process; other open files still cannot be saved.
"""

from __future__ import annotations

import sys
from typing import Any

from .live_objects import Reducer

_NAMES = ("stdout", "stderr", "stdin", "__stdout__", "__stderr__", "__stdin__")


def _std_stream(name: str) -> Any:
    return getattr(sys, name)


def _reduce_stream(stream: Any) -> Any:
    for name in _NAMES:
        if getattr(sys, name, None) is stream:
            return _std_stream, (name,)
    return NotImplemented  # another stream of that type: pickled, or refused, as before


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`): the types of the streams now in
    ``sys``, each reduced only when it is one of them."""
    return {type(stream): _reduce_stream for name in _NAMES if (stream := getattr(sys, name, None)) is not None}
