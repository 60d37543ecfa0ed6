"""How a namespace becomes a pickle and out-of-band buffers, and back.

:mod:`.pickling` is the pickler (one pass, shared objects stay shared); :mod:`.arrays`
hands big buffers out of band; one module per library (numpy, strings, torch, cupy, jax, pyarrow)
knows its array type, loaded only when the user's code imported that library.
"""
