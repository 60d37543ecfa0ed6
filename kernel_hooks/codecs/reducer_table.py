"""The pickler's reducers: the array types and the live objects of the libraries the kernel
has imported, each library's codec loaded only then (importing them here, not in
:mod:`.arrays`, keeps the codecs' shared base free of them)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .arrays import OutOfBand, Reduction, Slot


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    """Reducers for ``out``'s buffers, by type."""
    table: dict[type, Callable[[Any], Reduction]] = {Slot: out.reduce_slot}
    if "numpy" in sys.modules:
        from . import numpy_arrays

        table.update(numpy_arrays.reducers(out))
    if "torch" in sys.modules:
        from . import torch_tensors

        table.update(torch_tensors.reducers(out))
    if "cupy" in sys.modules:
        from . import cupy_arrays

        table.update(cupy_arrays.reducers(out))
    if "jax" in sys.modules:
        from . import jax_arrays

        table.update(jax_arrays.reducers(out))
    if "pyarrow" in sys.modules:
        from . import arrow_arrays

        table.update(arrow_arrays.reducers(out))
    # Wrappers saved as the way they wrap (torch.compile, functools.lru_cache); see .wrapped_functions.
    from . import wrapped_functions

    table.update(wrapped_functions.reducers())
    # Weak references, to the objects of the same pickle (always: weakref is always imported).
    from . import weak_references

    table.update(weak_references.reducers())
    # Live objects (locks, loggers, executors, DataLoaders, widgets, bokeh models),
    # rebuilt as working objects on restore; see .live_objects.
    from . import live_objects

    table.update(live_objects.reducers())
    return table
