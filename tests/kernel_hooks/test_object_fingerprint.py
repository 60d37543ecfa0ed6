"""The structural fingerprint that judges restored objects (tests/object_fingerprint.py) tells
different objects apart, calls equal objects equal, and ignores only what it says it ignores."""

from __future__ import annotations

import collections
import copy
import datetime
import threading
import weakref
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from object_fingerprint import digest, fingerprint


class Point:
    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class Counting:
    """Its ``__getstate__`` changes it, as matplotlib's CallbackRegistry's does."""

    def __init__(self) -> None:
        self.pickled = 0

    def __getstate__(self) -> dict[str, int]:
        self.pickled += 1
        return dict(vars(self))


def frame(value: float) -> pd.DataFrame:
    return pd.DataFrame({"a": [1.0, 2.0, value], "s": ["x", "y", "z"]}, index=[10, 20, 30])


DIFFERENT = [
    ([1, 2, 3], [1, 2, 4]),
    ({"a": 1}, {"a": 1.0}),
    ((1, "x"), (1, "y")),
    ({1, 2}, {1, 3}),
    (np.arange(6), np.arange(6).reshape(2, 3)),
    (np.arange(6, dtype=np.int64), np.arange(6, dtype=np.int32)),
    (np.zeros(1000), np.concatenate([np.zeros(999), [1e-300]])),
    (torch.ones(3), torch.tensor([1.0, 1.0, 1.0 + 1e-6])),
    (torch.ones(3), torch.ones(3, requires_grad=True)),
    (frame(3.0), frame(3.5)),
    (pd.Series([1, 2], name="a"), pd.Series([1, 2], name="b")),
    (Point(1, [2]), Point(1, [3])),
    (Slotted(1, 2), Slotted(1, 3)),
    (datetime.timedelta(seconds=10), datetime.timedelta(seconds=11)),
    (collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=2, a=1)),
    (lambda x: x + 1, lambda x: x + 2),
]


@pytest.mark.parametrize(("ours", "theirs"), DIFFERENT, ids=[type(pair[0]).__name__ for pair in DIFFERENT])
def test_different_objects_differ(ours: Any, theirs: Any) -> None:
    assert digest(ours) != digest(theirs)


def test_sharing_is_state_but_not_for_immutable_values() -> None:
    inner = [1]
    assert digest([inner, inner]) != digest([inner, [1]])  # one list twice, or two lists
    pair = (1, 2)
    assert digest([pair, pair]) == digest([pair, (1, 2)])  # Python shares tuples as it likes


def test_equal_objects_are_equal() -> None:
    nested = {"p": Point(np.arange(3.0), {"k": (1, 2)}), "f": frame(1.0), "t": torch.arange(4)}
    assert digest(nested) == digest(copy.deepcopy(nested))
    # a plain dict's and a set's order are not their state
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert digest({"x", "y", "z"}) == digest(set(sorted({"z", "y", "x"}, reverse=True)))


def test_cycles_end_and_the_fingerprint_is_stable() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    point = Point(loop, None)
    point.y = point
    assert fingerprint(point) == fingerprint(point)
    assert "ref:" in "\n".join(fingerprint(point))


def test_locks_weak_references_and_addresses_are_ignored_by_design() -> None:
    held, free = threading.Lock(), threading.Lock()
    held.acquire()
    try:
        assert digest(Point(held, 1)) == digest(Point(free, 1))
    finally:
        held.release()
    target, other = Point(1, 2), Point(3, 4)
    assert digest(Point(weakref.ref(target), 0)) == digest(Point(weakref.ref(other), 0))
    assert digest("<Point object at 0x7f0011223344>") == digest("<Point object at 0x55aa99887766>")


def test_reading_an_object_runs_none_of_its_pickling_hooks() -> None:
    counting = Counting()
    fingerprint(counting)
    assert counting.pickled == 0
