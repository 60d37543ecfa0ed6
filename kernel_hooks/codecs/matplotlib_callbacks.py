"""matplotlib's callback registries, with the wiring between norms, colorizers and the
artists they colour kept.

matplotlib pickles a ``CallbackRegistry`` without its callbacks (they may be anything),
except those connected with its private ``_connect_picklable``. The norm -> colorizer ->
artist ``changed`` chain is connected with plain ``connect``, so any pickle of an image or a
collection comes back deaf: ``image.set_cmap(...)`` or ``image.norm.vmin = ...`` no longer
marks the artist stale, and the figure is not redrawn. Here a registry keeps, beside what
matplotlib keeps, the callbacks that are methods of a norm, a colorizer or a colorizing
artist (objects the pickle holds anyway), under the same connection ids; matplotlib's own
``__setstate__`` connects them again. Any other callback is dropped, as matplotlib does.
"""

from __future__ import annotations

import copyreg
import types
from typing import Any

from .live_objects import Reducer


def _wiring() -> tuple[type, ...]:
    from matplotlib.colorizer import Colorizer, _ScalarMappable
    from matplotlib.colors import Norm

    return Norm, Colorizer, _ScalarMappable


def _reduce_registry(registry: Any) -> Any:
    state = registry.__getstate__()  # matplotlib's own: what it keeps
    kinds = _wiring()
    for signal, proxies in registry.callbacks.items():
        for cid, proxy in proxies.items():
            func = proxy()
            if isinstance(func, types.MethodType) and isinstance(func.__self__, kinds):
                state["callbacks"].setdefault(signal, {})[cid] = func
    return copyreg.__newobj__, (type(registry),), state  # type: ignore[attr-defined]


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    from matplotlib.cbook import CallbackRegistry

    return {CallbackRegistry: _reduce_registry}
