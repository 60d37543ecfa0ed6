"""The one place that reads and writes jupyter_server's activity tracking on a kernel.

jupyter_server keeps ``last_activity`` on each kernel manager, and the server's own (the
latest of all, which ``/api/status`` reports and JupyterHub's idle culler reads), and moves
both on every IOPub message unless its type and its parent's type are in the kernel
manager's ``untracked_message_types``; idle policies (its culler, ours) read them. The
server's calls into a kernel travel as types of their own (:mod:`gpuckpt_store.protocol`),
which :func:`untrack_server_calls` adds there, so they never count. What is left to do by
hand: a kernel registered again after a server restart, or watched again after it moved,
gets its old value back, and what the user asks of the server for a kernel (keep it running,
resume it, rebuild) counts as a cell would. Nothing else in this package touches these
attributes.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from traitlets import TraitError

from gpuckpt_store import protocol


def untrack_server_calls(kernel_manager: Any) -> None:
    """Leave the server's calls into kernels out of jupyter_server's activity tracking (its
    kernels' and its own ``last_activity``, and their ``execution_state``), keeping the types
    the admin configured there.

    Parameters
    ----------
    kernel_manager
        The server's ``MappingKernelManager`` (its activity watchers read the list at each
        message).
    """
    untracked = list(kernel_manager.untracked_message_types)
    kernel_manager.untracked_message_types = [*untracked, *(t for t in protocol.MESSAGE_TYPES if t not in untracked)]


def last_activity(km: Any) -> datetime | None:
    """The kernel's last activity; None before jupyter_server has set it (while it starts, the
    trait it declares has no value yet, and reading it raises)."""
    try:
        value = km.last_activity
    except (AttributeError, TraitError):
        return None
    return value if isinstance(value, datetime) else None


def idle_seconds(km: Any, now: float | None = None) -> float | None:
    """Seconds since the kernel's last activity; None before it has any."""
    last = last_activity(km)
    return None if last is None else max(0.0, (now or time.time()) - last.timestamp())


def restore_activity(km: Any, timestamp: float | None) -> None:
    """Set ``last_activity`` to ``timestamp`` (seconds since the epoch), if known."""
    if timestamp is not None:
        km.last_activity = datetime.fromtimestamp(timestamp, timezone.utc)


def touch(km: Any) -> None:
    """Count the user's request (keep running, resume, rebuild) as the kernel's activity, as a
    cell would count."""
    km.last_activity = datetime.now(timezone.utc)

