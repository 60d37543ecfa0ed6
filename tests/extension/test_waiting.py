"""The one way the server waits: poll a check until it holds, or retry with growing delays."""

from __future__ import annotations

import time

import pytest

from jupyter_gpuckpt.waiting import retry_delay, until


async def test_until_returns_the_first_true_value_of_a_check_plain_or_async() -> None:
    calls: list[int] = []

    def plain() -> list[int]:
        calls.append(1)
        return calls if len(calls) == 3 else []

    async def awaited() -> str | None:
        return "there" if len(calls) >= 3 else None

    assert await until(plain, 5.0, 0.001) == [1, 1, 1]
    assert await until(awaited, 5.0, 0.001) == "there"


async def test_until_gives_none_at_its_deadline_and_lets_errors_through() -> None:
    started = time.monotonic()
    assert await until(lambda: 0, 0.2, 0.05) is None
    assert 0.2 <= time.monotonic() - started < 5.0

    async def broken() -> bool:
        raise ValueError("the check failed")

    with pytest.raises(ValueError, match="the check failed"):
        await until(broken, None, 0.01)


def test_retry_delays_grow_then_stay_at_the_last() -> None:
    delays = (1.0, 2.0, 5.0)
    assert [retry_delay(attempt, delays) for attempt in range(1, 6)] == [1.0, 2.0, 5.0, 5.0, 5.0]
