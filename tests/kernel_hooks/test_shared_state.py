"""Instances whose state lives in their class come back sharing it with the class again:
"Borg" singletons (every instance's ``__dict__`` is one class attribute) and instances a class
keeps in a registry of its own.

The classes are a library's (a module in the kernels' working directory, so pickled by
reference: their class attributes are not in the checkpoint) and the notebook's (pickled by
value, with their class attributes). The restoring kernel imported the library and made
instances of its own before the restore: the checkpoint's Borg state wins, the registry
entries it had are kept. accelerate's states are in
tests/kernel_hooks/test_transformers_accelerate.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_processes import Kernel, KernelFactory

LIBRARY = '''
import weakref

class Settings:
    """A Borg."""
    _shared_state = {}

    def __init__(self, **values):
        self.__dict__ = self._shared_state
        self.__dict__.update(values)


class Device:
    """Instances register themselves by name, strongly and weakly."""
    by_name = {}
    alive = weakref.WeakValueDictionary()
    every = weakref.WeakSet()

    def __init__(self, name):
        self.name = name
        Device.by_name[name] = Device.alive[name] = self
        Device.every.add(self)
'''

CELLS = [
    """
from shared_library import Settings, Device
first, second = Settings(mode="fast"), Settings(level=3)
gpu, cpu = Device("gpu0"), Device("cpu0")
class Borg:
    _state = {}
    def __init__(self, **values):
        self.__dict__ = self._state
        self.__dict__.update(values)
mine, yours = Borg(colour="red"), Borg(size=2)
""",
]


@pytest.fixture(scope="module")
def restored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    factory = KernelFactory(tmp_path_factory.mktemp("shared"))
    (factory.workdir / "shared_library.py").write_text(LIBRARY)
    try:
        saver = factory.start()
        for cell in CELLS:
            saver.ok(cell)
        checkpoint = saver.save()
        restorer = factory.start()
        # the restoring kernel has state of its own in the library's classes
        restorer.ok("from shared_library import Settings, Device\n"
                    "early = Settings(mode='slow', other=1); theirs = Device('gpu0')")
        report = restorer.ok(f"%gpuckpt restore {checkpoint}")
        assert "Not restored" not in report, report
        yield restorer
    finally:
        factory.close()


def test_a_library_borg_shares_the_class_state_again(restored: Kernel) -> None:
    assert restored.value("first.__dict__ is second.__dict__ is Settings._shared_state") is True
    # the checkpoint's state wins, for instances made before the restore too
    assert restored.value("(Settings._shared_state, early.mode)") == ({"mode": "fast", "level": 3}, "fast")
    assert restored.value("(Settings().level, [setattr(first, 'mode', 'slow'), second.mode, early.mode][1:])") == (
        3, ["slow", "slow"])


def test_a_notebook_borg_shares_its_class_state_again(restored: Kernel) -> None:
    assert restored.value("(mine.__dict__ is yours.__dict__ is Borg._state, Borg().colour, yours.size)") == (
        True, "red", 2)


def test_restored_instances_are_registered_again_unless_the_kernel_has_the_key(restored: Kernel) -> None:
    assert restored.value("(Device.by_name['cpu0'] is cpu, Device.alive['cpu0'] is cpu, cpu in Device.every)") == (
        True, True, True)
    assert restored.value("(Device.by_name['gpu0'] is theirs, Device.alive['gpu0'] is theirs, gpu in Device.every)"
                          ) == (True, True, True)
    assert restored.value("sorted(Device.by_name)") == ["cpu0", "gpu0"]
