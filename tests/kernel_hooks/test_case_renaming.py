"""Cases renamed apart (tests/case_renaming.py) run side by side in one namespace, each with
its own variables, and run as they did alone."""

from __future__ import annotations

from typing import Any

from case_renaming import rename_apart

FIRST = ["import urllib.request", "from math import *", "import collections as c",
         "a = [1, 2]", "def grow(n):\n    a.append(n)\n    local = n\n    return [a for a in range(local)]",
         "class Box:\n    a = 'class attribute'\n    def get(self):\n        return a",
         "list: list = [c.Counter('aab')['a']]", "r = urllib.request.Request('http://localhost/')"]
SECOND = ["a = {'k': 'second'}", "b = lambda x, a=a: (x, a)", "def g():\n    global a\n    a = 'set by g'", "g()"]


def run(statements: list[str]) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    for statement in statements:
        exec(statement, namespace)
    return namespace


def test_cases_keep_their_own_names_side_by_side() -> None:
    first, first_names = rename_apart(FIRST, "__k1")
    second, second_names = rename_apart(SECOND, "__k2")
    together = run([*first, *second, "grown = grow__k1(3)"])
    alone = run([*FIRST, "grown = grow(3)"])
    assert together["a__k1"] == alone["a"] == [1, 2, 3]
    assert together["grown"] == alone["grown"] == [0, 1, 2]  # the comprehension's own `a`
    assert together["Box__k1"]().get() == [1, 2, 3]  # a method sees the module's `a`, not the class's
    assert together["list__k1"] == [2] and "list" not in together  # the builtin is not shadowed
    assert together["r__k1"].full_url == "http://localhost/"
    assert together["a__k2"] == "set by g"
    assert together["b__k2"](0) == (0, {"k": "second"})
    assert "sqrt" in together and "sqrt__k1" not in together  # a * import binds its names as they are
    assert set(first_names) == {"urllib", "c", "a", "grow", "Box", "list", "r"}
    assert set(second_names) == {"a", "b", "g"}


def test_a_later_statement_binding_a_name_renames_it_everywhere() -> None:
    renamed, _ = rename_apart(["x = 1", "y = x + 1", "x = y * 10"], "__s")
    assert run(renamed) | {"__builtins__": None} == {"x__s": 20, "y__s": 2, "__builtins__": None}
