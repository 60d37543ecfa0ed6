"""SIGINT stops the server as SIGTERM does, when jupyter_server leaves it to Python.

Without a terminal, jupyter_server leaves SIGINT to Python: a KeyboardInterrupt that ends the
process without stopping extensions or kernels. JupyterHub's local spawners stop a server
with it; with ``suspend_on_stop`` it must stop the server (and suspend its kernels) instead.
"""

from __future__ import annotations

import signal
from typing import Any

from .. import upstream


def stop_on_sigint(serverapp: Any) -> None:
    """Make SIGINT stop ``serverapp`` if Python still has it; an embedded server (not the
    main thread) leaves signals to its host."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    try:
        signal.signal(signal.SIGINT, upstream.stop_server(serverapp))
    except ValueError:  # not the main thread
        pass


def release_sigint(serverapp: Any) -> None:
    """The server stopped: if SIGINT is still ours, the next one is Python's again."""
    if signal.getsignal(signal.SIGINT) == upstream.stop_server(serverapp):
        signal.signal(signal.SIGINT, signal.default_int_handler)
