"""The one place that reads and writes jupyter_server's activity tracking on a kernel.

jupyter_server keeps ``last_activity`` on each kernel manager and moves it on every IOPub
message, ours included, and offers no hook to exclude messages; idle policies (its culler,
ours) read it. So the server's own calls into a kernel put it back afterwards, and a
kernel registered again after a server restart gets its old value back. Nothing else in
this package touches that attribute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

DRAIN_SECONDS = 0.2
"""How long jupyter_server's IOPub watcher may take to see the status messages of a call."""


def last_activity(km: Any) -> datetime | None:
    value = getattr(km, "last_activity", None)
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
    """Count the user's "Keep running" as activity, as a cell would count."""
    km.last_activity = datetime.now(timezone.utc)


@asynccontextmanager
async def unseen(km: Any) -> AsyncIterator[None]:
    """Run server traffic to the kernel without it counting as the user's activity."""
    before = last_activity(km)
    try:
        yield
    finally:
        await asyncio.sleep(DRAIN_SECONDS)
        if before is not None:
            km.last_activity = before
