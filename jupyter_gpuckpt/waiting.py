"""Waiting until something holds, the one way the server does it.

A placement waits for a job to end or a process to be reaped, a Slurm start for the job to
run, the write-behind for its next try: each polls a check at an interval, up to a deadline,
or retries with growing delays. They all go through :func:`until` and :func:`retry_delay`, so
an interval, a deadline or a cancellation behaves the same everywhere.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def until(check: Callable[[], Awaitable[T]], timeout: float | None, interval: float) -> T | None: ...
@overload
async def until(check: Callable[[], T], timeout: float | None, interval: float) -> T | None: ...


async def until(check: Callable[[], Any], timeout: float | None, interval: float) -> Any:
    """Call ``check`` every ``interval`` s until it returns something true; that value, or
    None once ``timeout`` s have passed (None: no limit). ``check`` may be a coroutine
    function; what it raises goes to the caller."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if deadline is not None and time.monotonic() >= deadline:
            return None
        await asyncio.sleep(interval)


def retry_delay(attempt: int, delays: Sequence[float]) -> float:
    """Seconds before try ``attempt + 1`` after ``attempt`` failed (from 1): each of
    ``delays`` in turn, then the last one for every later try."""
    return delays[min(attempt, len(delays)) - 1]
