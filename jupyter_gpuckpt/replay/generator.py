"""Synthetic traces that look like notebook work, seeded, for tests and for choosing a policy.

What it models (each a log-normal unless said otherwise):

- users, in ``groups`` groups, each with a rhythm of their own: a median pause between cells
  from 20 s to 15 min (log-normal across users around 2.5 min) and a spread; each session
  varies its user's median a little;
- cells of 15 s (median) with a long tail, and 1 in 20 a training of ~10 min;
- breaks that hold most of the idle time: 1 pause in 25 is a meeting or a coffee (20-75 min),
  lunch around noon (40-80 min), and overnight (until 8-10 h the next day) for sessions that
  outlive the working day (17-19 h);
- sessions starting 7-20 h on any day of the trace, lasting 4 h (median) up to 3 days; the
  kernel stays up after the last cell until the session ends;
- GPUs: 1 (75%), 2 (15%), 3 (3%) or 4 (7%); the state 0.5 GB median (mostly 0.1-2 GB), 1 in 20
  sessions with 4-40 GB, grown over the first cells, 70% of it on the GPUs.

Nothing in it says when a user comes back ahead of a cell (``Session.returns`` stays empty):
the replay must not assume that signal.

Shapes (``shape``) vary it, so that a policy is not tuned on one: ``default`` as above;
``many_gpus``, sessions of 4 to 8 GPUs with few cells and long pauses between them (a training
notebook run now and then); ``long_breaks``, where 1 pause in 6 is a break of 1 to 3 hours.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .trace import GB, Cell, Session, Trace

DAY = 86400.0
HOUR = 3600.0


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


@dataclass(frozen=True)
class Shape:
    """What a kind of trace changes of the default one."""

    gpus: tuple[tuple[int, ...], tuple[int, ...]] = ((1, 2, 3, 4), (75, 15, 3, 7))
    """GPU counts and their weights."""
    pause_scale: float = 1.0
    """The users' median pauses, times this."""
    break_share: float = 0.05
    break_minutes: tuple[float, float] = (20.0, 90.0)


SHAPES = {
    "default": Shape(),
    "many_gpus": Shape(gpus=((4, 8), (60, 40)), pause_scale=8.0),
    "long_breaks": Shape(break_share=1 / 6, break_minutes=(60.0, 180.0)),
}


def _gpus(rng: random.Random, shape: Shape) -> int:
    return rng.choices(shape.gpus[0], weights=shape.gpus[1])[0]


def _state(rng: random.Random) -> float:
    if rng.random() < 0.05:
        return rng.uniform(4.0, 40.0) * GB
    return _lognormal(rng, 0.5, 0.9, 0.05, 3.0) * GB


def _session(rng: random.Random, sid: str, user: str, group: str, rhythm: tuple[float, float],
             days: int, shape: Shape) -> Session:
    median, sigma = rhythm
    median *= math.exp(rng.gauss(0.0, 0.25)) * shape.pause_scale
    start = rng.randrange(days) * DAY + min(20.0, max(7.0, rng.gauss(11.0, 2.5))) * HOUR
    stop = start + _lognormal(rng, 10 * HOUR, 1.0, 20 * 60.0, 3 * DAY)
    gpus, state = _gpus(rng, shape), _state(rng)
    day_end = rng.uniform(17.0, 19.0) * HOUR
    cells: list[Cell] = []
    t = start + _lognormal(rng, median, sigma, 1.0, 4 * HOUR)
    lunch_day = -1.0
    while t < stop:
        if rng.random() < 0.05:
            duration = _lognormal(rng, 600.0, 0.8, 60.0, 3 * HOUR)
        else:
            duration = _lognormal(rng, 15.0, 1.2, 0.5, 20 * 60.0)
        grown = min(1.0, 0.4 + 0.15 * len(cells))
        cells.append(Cell(t, duration, gpus, int(0.7 * state * grown), int(0.3 * state * grown)))
        t += duration
        day, clock = divmod(t, DAY)
        if clock > day_end:
            t = (day + 1) * DAY + rng.uniform(8.0, 10.0) * HOUR
        elif clock > 12 * HOUR and lunch_day != day and clock < 14 * HOUR:
            lunch_day = day
            t += rng.uniform(40.0, 80.0) * 60.0
        elif rng.random() < shape.break_share:
            t += rng.uniform(*shape.break_minutes) * 60.0
        else:
            t += _lognormal(rng, median, sigma, 1.0, 4 * HOUR)
    stop = max(stop, t if not cells else cells[-1].start + cells[-1].duration)
    return Session(sid, start, stop, cells, user, group)


def generate(sessions: int = 2000, seed: int = 0, days: int = 7, groups: int = 4, shape: str = "default") -> Trace:
    """A trace of ``sessions`` sessions over ``days`` days, of ``shape`` (:data:`SHAPES`), the
    same for the same ``seed``."""
    kind = SHAPES[shape]
    rng = random.Random(seed)
    users = max(1, sessions // 5)
    rhythms = [(_lognormal(rng, 40.0, 1.2, 10.0, 900.0), rng.uniform(0.3, 0.7)) for _ in range(users)]
    made = []
    for n in range(sessions):
        u = rng.randrange(users)
        made.append(_session(rng, f"s{n}", f"user{u}", f"group{u % groups}", rhythms[u], days, kind))
    made.sort(key=lambda s: s.start)
    suffix = "" if shape == "default" else f"-{shape}"
    return Trace(made, f"synthetic-{sessions}-seed{seed}{suffix}")
