"""Weak references come back as weak references to the restored objects: alive where the
checkpoint holds their referent through something else, dead where only weak references (or
something not saved) held it, and holding nothing alive themselves.

One kernel builds every kind (``ref``, ``KeyedRef``, ``WeakMethod``, the weak containers and a
subclass of one, ``finalize``) over three objects: one a variable holds, and two held only under
dunder names, which are not saved (one of them in a reference cycle). A fresh kernel restores
them; the torch and accelerate objects that hold weak references are in
tests/kernel_hooks/test_transformers_accelerate.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_processes import Kernel, KernelFactory

CELLS = [
    """
import gc, weakref
class Node:
    def __init__(self, name): self.name = name
    def hello(self): return "hello " + self.name
# dunder names are not saved: nothing saved holds these two strongly, one of them in a cycle
held, __lone__, __cyclic__ = Node("held"), Node("lone"), Node("cyclic")
__cyclic__.me = __cyclic__
""",
    """
lone, cyclic = __lone__, __cyclic__
to_held, to_lone, to_cyclic, dead = weakref.ref(held), weakref.ref(lone), weakref.ref(cyclic), weakref.ref(Node("x"))
gone = []
with_callback = weakref.ref(lone, lambda ref, gone=gone: gone.append(ref))
keyed = weakref.KeyedRef(held, None, "k")
method, lone_method = weakref.WeakMethod(held.hello), weakref.WeakMethod(lone.hello)
members = weakref.WeakSet([held, lone, cyclic])
keys = weakref.WeakKeyDictionary({held: 1, lone: 2})
values = weakref.WeakValueDictionary({"held": held, "lone": lone})
class Registry(weakref.WeakValueDictionary):
    def __init__(self):
        super().__init__()
        self.label = "devices"
registry = Registry(); registry["held"] = held; registry["cyclic"] = cyclic
finalized = []
held_finalizer = weakref.finalize(held, finalized.append, "held")
lone_finalizer = weakref.finalize(lone, finalized.append, "lone")
del lone, cyclic
proxied = weakref.proxy(held)
""",
]


@pytest.fixture(scope="module")
def restored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, str]]:
    factory = KernelFactory(tmp_path_factory.mktemp("weak"))
    try:
        saver = factory.start()
        for cell in CELLS:
            saver.ok(cell)
        assert saver.value("(to_lone().name, to_cyclic().name, len(members), held_finalizer.alive)") == (
            "lone", "cyclic", 3, True)
        out = saver.ok("%gpuckpt save")
        restorer = factory.start()
        restorer.ok(f"%gpuckpt restore {out.strip().splitlines()[-1]}")  # all but the proxy, which each test uses
        yield restorer, out
    finally:
        factory.close()


def test_a_reference_points_at_the_restored_object_or_is_dead(restored: tuple[Kernel, str]) -> None:
    kernel, _ = restored
    assert kernel.value("(to_held() is held, to_lone(), to_cyclic(), dead())") == (True, None, None, None)
    assert kernel.value("(type(keyed).__name__, keyed() is held, keyed.key)") == ("KeyedRef", True, "k")


def test_a_callback_runs_when_the_restore_drops_its_referent(restored: tuple[Kernel, str]) -> None:
    kernel, _ = restored
    assert kernel.value("(len(gone), gone[0] is with_callback, with_callback())") == (1, True, None)


def test_a_weak_method_calls_the_restored_object(restored: tuple[Kernel, str]) -> None:
    kernel, _ = restored
    assert kernel.value("(method()(), method().__self__ is held, lone_method())") == ("hello held", True, None)


def test_weak_containers_keep_exactly_the_live_members(restored: tuple[Kernel, str]) -> None:
    kernel, _ = restored
    assert kernel.value("(list(members) == [held], dict(keys) == {held: 1}, dict(values) == {'held': held})") == (
        True, True, True)
    assert kernel.value("(type(registry).__name__, registry.label, dict(registry) == {'held': held})") == (
        "Registry", "devices", True)
    # still working containers: they take new members weakly
    assert kernel.value("(members.add(n := Node('new')), len(members), [m.name for m in members if m is n])") == (
        None, 2, ["new"])


def test_finalizers_are_armed_for_live_objects_only(restored: tuple[Kernel, str]) -> None:
    kernel, _ = restored
    assert kernel.value("(held_finalizer.alive, held_finalizer.peek()[0] is held, lone_finalizer.alive, finalized)"
                          ) == (True, True, False, [])


def test_restored_references_hold_nothing_alive(restored: tuple[Kernel, str]) -> None:
    kernel, _ = restored
    kernel.ok("del held; n = None; gc.collect()")
    assert kernel.value("(to_held(), keyed(), method(), len(members), len(keys), len(values), len(registry))") == (
        None, None, None, 0, 0, 0, 0)
    assert kernel.value("(finalized, held_finalizer.alive)") == (["held"], False)


def test_a_proxy_is_not_saved_rather_than_saved_as_a_copy(restored: tuple[Kernel, str]) -> None:
    kernel, saved = restored
    assert "proxied" in saved and "weakref.proxy cannot be saved" in saved, saved
    assert kernel.value("'proxied' in globals()") is False
