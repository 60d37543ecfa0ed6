"""What a checkpoint no longer pays for on every save or restore, and that leaving it out
changed nothing the user sees: numpy's generator module is not imported for nothing, a
restore into a fresh kernel keeps its history session, the environment record finds the
distributions from their file lists, the environment check finds them by their folders' names,
a small restore touches no memory to choose how to fault its pages in, and the I/O threads are
kept for the next save."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from kernel_processes import KernelFactory

from gpuckpt_store.files import InBackground
from kernel_hooks.blobs import ParallelIO
from kernel_hooks.blobs.sizes import readers
from kernel_hooks.errors import IncompatibleError
from kernel_hooks.state import environment

RANDOM_LOADED = "'numpy.random' in __import__('sys').modules"


def test_numpy_random_is_imported_by_neither_a_save_nor_a_restore_that_does_not_need_it(kernels: KernelFactory) -> None:
    """numpy 2 imports ``numpy.random`` on first use: a kernel that never drew from it has
    no generator state to save, and a restore sets the saved state when the module is
    first imported, so the draws still go on as in the saving kernel."""
    plain = kernels.start()
    plain.ok("import numpy as np\nvalues = np.arange(10)")
    assert plain.value(RANDOM_LOADED) is False
    plain.save()
    assert plain.value(RANDOM_LOADED) is False

    saver = kernels.start()
    saver.ok("import numpy as np\nnp.random.seed(5)\nnp.random.rand(3)\nvalues = np.arange(10)")
    checkpoint = saver.save()
    expected = saver.value("[float(x) for x in np.random.rand(2)]")

    k = kernels.start()
    k.ok("import numpy as np")
    k.ok(f"%gpuckpt restore {checkpoint}")
    assert k.value("values.tolist()") == list(range(10))
    assert k.value(RANDOM_LOADED) is False
    assert k.value("[float(x) for x in np.random.rand(2)]") == expected


def test_a_restore_into_a_fresh_kernel_goes_on_in_its_history_session(kernels: KernelFactory) -> None:
    """The restored cell numbers are above every line this kernel's session has written, so
    the session goes on (no new one is started) and the next cells are written to the
    history database under the numbers the saving kernel would have given them."""
    saver = kernels.start()
    for i in range(6):
        saver.ok(f"cell_{i} = {i}")
    checkpoint = saver.save()
    next_cell = saver.value("len(In) - 1")  # the save cell was the last one in the checkpoint

    k = kernels.start()
    session = k.value("get_ipython().history_manager.session_number")
    k.ok(f"%gpuckpt restore {checkpoint}")
    assert k.value("get_ipython().history_manager.session_number") == session
    k.ok("after_restore = 1")
    printed = k.ok("import contextlib, io\nhm = get_ipython().history_manager\nbuffer = io.StringIO()\n"
                   "with contextlib.redirect_stdout(buffer):\n    hm.writeout_cache()\nprint(buffer.getvalue())")
    assert "not unique" not in printed, printed
    lines = k.value("[(line, source) for _, line, source in hm.get_range(hm.session_number)]")
    assert (next_cell + 1, "after_restore = 1") in lines, lines
    assert k.value("cell_5") == 5


def _installed(site: Path, folder: str, record: str, name: str, version: str) -> None:
    dist = site / folder
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nName: not a header\n")
    (dist / "RECORD").write_text(record)


def test_the_environment_record_finds_a_distribution_by_its_record(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution without ``top_level.txt`` provides the top-level modules whose Python
    files its RECORD lists (quoted or not), not those its paths merely mention."""
    site = tmp_path / "site"
    _installed(site, "fc_provider-1.2.3.dist-info",
               "fc_pkg_one/__init__.py,sha256=x,10\n\"fc_pkg_two.py\",sha256=y,5\n"
               "fc_provider-1.2.3.dist-info/RECORD,,\n", "fc-provider", "1.2.3")
    _installed(site, "fc_other-0.1.dist-info",
               "fc_other/uses_fc_pkg_three/x.py,sha256=z,1\nfc_pkg_three.libs/lib.so,sha256=w,2\n",
               "fc-other", "0.1")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    assert environment.libraries(["fc_pkg_one.sub", "fc_pkg_two"]) == {"fc-provider": "1.2.3"}
    assert environment.libraries(["fc_pkg_three"]) == {}
    assert environment.libraries(["fc_other.mod", "fc_pkg_one"]) == {"fc-other": "0.1", "fc-provider": "1.2.3"}


def test_the_environment_check_finds_each_library_by_its_folders_name(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The version compared is the first on ``sys.path``, however the folder spells the name
    (``Fc_Check.Lib`` is ``fc-check-lib``); a patch difference warns, a minor one or a missing
    library refuses, naming both versions."""
    first, second = tmp_path / "first", tmp_path / "second"
    _installed(first, "Fc_Check.Lib-2.1.3.dist-info", "fc_check_lib/__init__.py,,\n", "fc-check-lib", "2.1.3")
    _installed(second, "fc_check_lib-3.0.0.dist-info", "fc_check_lib/__init__.py,,\n", "fc-check-lib", "3.0.0")
    (first / "fc_old.egg-info").mkdir()
    (first / "fc_old.egg-info" / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: fc-old\nVersion: 0.9\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), *sys.path])
    here = environment.record([])
    assert environment.check({**here, "libraries": {"fc-check-lib": "2.1.3", "fc-old": "0.9"}}) == []
    warnings = environment.check({**here, "libraries": {"fc-check-lib": "2.1.0"}})
    assert warnings == ["fc-check-lib differs by a patch release: checkpoint 2.1.0, this kernel 2.1.3"]
    with pytest.raises(IncompatibleError, match="taken with fc-check-lib 2.2.0; this kernel has fc-check-lib 2.1.3"):
        environment.check({**here, "libraries": {"fc-check-lib": "2.2.0"}})
    with pytest.raises(IncompatibleError, match="needs fc-check-missing 1.0, which this kernel does not have"):
        environment.check({**here, "libraries": {"fc-check-lib": "2.1.3", "fc-check-missing": "1.0"}})


def test_a_small_restore_touches_no_memory_beyond_what_it_restores(kernels: KernelFactory) -> None:
    """Restores used to time two ways of faulting in fresh memory, on 32 MB of it, before their
    first read: 38 to 44 ms, more than restoring 20 MB (see ``blobs/fresh_memory.py``)."""
    saver = kernels.start()
    saver.ok("import numpy as np\nvalues = np.arange(1 << 17)")
    checkpoint = saver.save()
    k = kernels.start()
    k.ok("import numpy as np\nimport kernel_hooks.restoring")
    status = "int(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('{}:'))) * 1024"
    k.ok("with open('/proc/self/clear_refs', 'w') as f:\n    f.write('5')")  # the peak is now the resident set
    before = k.value(status.format("VmRSS"))
    k.ok(f"%gpuckpt restore {checkpoint}")
    assert k.value("int(values.sum())") == (1 << 17) * ((1 << 17) - 1) // 2
    assert k.value(status.format("VmHWM")) - before < 8 << 20  # 2 MB measured; 17 MB with the probe


def test_a_restore_starts_reader_threads_by_its_size(kernels: KernelFactory) -> None:
    """A fresh kernel starts the threads of its first restore, each start waiting for the
    thread to run (10 ms for 8 threads on 2 loaded cores): 20 MB is read by 2, 100 MB by up to 8
    (the pool starts a thread only when none is idle, so a loaded machine may start fewer)."""
    assert (readers(20 << 20, 8), readers(100 << 20, 8)) == (2, 8)
    threads = "sorted(t.name for t in __import__('threading').enumerate() if t.name.startswith('gpuckpt-io'))"
    started = {}
    for mb in (20, 100):
        saver = kernels.start()
        saver.ok(f"import numpy as np\nvalues = np.arange({mb} << 17)")
        checkpoint = saver.save()
        k = kernels.start()
        k.ok(f"%gpuckpt restore {checkpoint}")
        assert k.value("int(values[-1])") == (mb << 17) - 1
        started[mb] = len(k.value(threads))
    assert started[20] <= 2 and 2 < started[100] <= 8, started


def test_a_kernels_saves_share_their_io_threads(kernels: KernelFactory) -> None:
    """Each save used to start (and stop) its own threads; now the second save finds the
    first one's threads and starts none."""
    k = kernels.start()
    k.ok("import numpy as np\narrays = [np.full(3 << 20, i, dtype=np.uint8) for i in range(8)]")
    threads = "sorted(t.ident for t in __import__('threading').enumerate() if t.name.startswith('gpuckpt-io'))"
    k.save()
    first = k.value(threads)
    assert first
    k.ok("arrays = [a + 1 for a in arrays]")
    k.save()
    assert k.value(threads) == first


def test_closing_after_a_failed_wait_waits_for_what_still_runs() -> None:
    """A failed save takes back its blobs once ``close`` returns: no task of it may still
    be writing then, though the pool's threads outlive it."""
    io = ParallelIO(2)
    gate = threading.Event()
    finished = threading.Event()

    def slow() -> None:
        gate.wait(5)
        finished.set()

    def fail() -> None:
        raise OSError("disk full")

    io.submit(fail)
    io.submit(slow)
    with pytest.raises(OSError):
        io.wait()
    threading.Timer(0.2, gate.set).start()
    io.close()
    assert finished.is_set()


def test_in_background_raises_the_error_of_its_thread_after_the_block() -> None:
    ran: list[str] = []

    def fails() -> None:
        raise OSError("sync failed")

    with pytest.raises(OSError, match="sync failed"), InBackground(fails):
        ran.append("block")
    assert ran == ["block"]
    with pytest.raises(ValueError, match="block failed"), InBackground(fails):
        raise ValueError("block failed")
