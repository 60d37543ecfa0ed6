"""Faults: a save that is killed, runs out of space or meets a read-only store publishes
nothing, leaves the previous checkpoint loadable and the kernel (if alive) unchanged; and
a checkpoint only loads where its recorded Python and library versions allow.
"""

from __future__ import annotations

import os
import platform
import signal
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from fault_fixtures import (
    Tmpfs,
    error_of,
    load_manifest,
    owner_dir,
    published_ids,
    temp_files,
    tmpfs_fixture,  # noqa: F401  (the tmpfs fixture)
)
from kernel_processes import Kernel, KernelFactory, Outcome
from packaging.version import Version

from gpuckpt_store.records import referenced_blobs

FIRST = "import numpy as np\nsmall = np.arange(100_000)\nnote = 'first'"
FIRST_VALUES = "(note, int(small.sum()), small.shape)"
EXPECTED_FIRST = ("first", 100_000 * 99_999 // 2, (100_000,))


def store_arg(store: Path | None) -> str:
    return f" --store {store}" if store else ""


def assert_first_restores(kernels: KernelFactory, checkpoint: str, store: Path | None = None) -> Kernel:
    """A fresh kernel restores ``checkpoint`` (the FIRST cell's variables) correctly."""
    kernel = kernels.start()
    kernel.ok(f"%gpuckpt restore {checkpoint}{store_arg(store)}")
    assert kernel.value(FIRST_VALUES) == EXPECTED_FIRST
    return kernel


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_sigkill_mid_save_keeps_previous_checkpoint(kernels):
    """Req 7: SIGKILL while a 1.5 GB save is writing -> no new checkpoint, nothing half
    published; a fresh kernel restores the first checkpoint, and its next save removes the
    dead kernel's temporary files."""
    store = kernels.store
    saver = kernels.start()
    saver.ok(FIRST)
    first = saver.save()
    blobs = owner_dir(store) / "blobs"
    blobs_before = set(os.listdir(blobs))

    def new_blobs() -> set[str]:
        return {n for n in os.listdir(blobs) if not n.startswith(".")} - blobs_before

    # Distinct values, so no chunk deduplicates: 3 x 500 MB really has to be written.
    saver.ok("N = 62_500_000\nbig = [np.arange(i * N, (i + 1) * N, dtype=np.int64) for i in range(3)]")

    saver.client.execute("%gpuckpt save")
    pid = saver.pid
    wait_for(lambda: temp_files(store, pid) and new_blobs(), 120, "the save to write its first blobs")
    assert published_ids(store) == [first], "the save finished before it could be killed"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not saver.alive(), 30, "the killed kernel to exit")  # also reaps it

    leftovers = temp_files(store, pid)
    assert leftovers, "a save killed mid-write leaves temporary files for cleanup to find"
    assert published_ids(store) == [first]

    published = new_blobs()
    assert published, "the killed save had published blobs that no manifest names"
    fresh = assert_first_restores(kernels, first)
    second = fresh.save()
    assert temp_files(store, pid) == [], "the next save removes the dead kernel's temp files"
    assert published_ids(store) == sorted([first, second])
    # and the blobs it had published: nothing is left that no checkpoint needs
    named = {b for c in (first, second) for b in referenced_blobs(load_manifest(store, c))}
    assert set(os.listdir(blobs)) == named, f"{len(set(os.listdir(blobs)) - named)} unreferenced blobs stay"


def fill_the_disk(tmpfs: Tmpfs, kernels: KernelFactory) -> tuple[Kernel, str, set[str], str]:
    """Save FIRST into the 64 MiB store, then try to save 200 MB more there.

    Returns the kernel, the first checkpoint's id, the blob names it left, and the error.
    """
    store = tmpfs.path
    kernel = kernels.start()
    kernel.ok(FIRST)
    first = kernel.save(store)
    blobs = set(os.listdir(owner_dir(store) / "blobs"))
    kernel.ok("big = np.arange(25_000_000, dtype=np.int64)\nnote = 'second'")  # 200 MB
    return kernel, first, blobs, error_of(kernel.run(f"%gpuckpt save{store_arg(store)}"))


def test_full_disk_fails_cleanly(tmpfs, kernels):
    """Req 8: a 200 MB save into a 64 MiB store fails saying there is no space; the kernel
    runs on with its variables unchanged, the first checkpoint still restores, and no
    manifest or temporary file of the failed save remains."""
    kernel, first, _, error = fill_the_disk(tmpfs, kernels)
    assert "no space left" in error.lower(), error
    assert kernel.alive()
    n = 25_000_000
    assert kernel.value("(note, int(big.sum()), int(big[12_345_678]), big.shape, str(big.dtype), "
                        "int(small.sum()))") == ("second", n * (n - 1) // 2, 12_345_678, (n,),
                                                 "int64", EXPECTED_FIRST[1])
    assert published_ids(tmpfs.path) == [first]
    assert temp_files(tmpfs.path) == []
    assert_first_restores(kernels, first, tmpfs.path)


def test_failed_save_gives_back_the_space_it_took(tmpfs, kernels):
    """Req 8: the blobs a failed save wrote are referenced by no checkpoint; they must
    go with it, or the store stays full and even a small save fails afterwards."""
    kernel, first, blobs_before, _ = fill_the_disk(tmpfs, kernels)
    blobs = owner_dir(tmpfs.path) / "blobs"
    left = sorted(set(os.listdir(blobs)) - blobs_before)
    assert not left, (f"the failed save left {len(left)} unreferenced blobs, "
                      f"{sum((blobs / n).stat().st_size for n in left) >> 20} MiB, in the store")
    kernel.ok("del big\nmore = np.arange(1_000_000)")
    kernel.save(tmpfs.path)  # 8 MB: fits once the failed save's blobs are gone


def test_read_only_store(tmpfs, kernels):
    """Req 9: saving into a store remounted read-only fails naming the store and the
    read-only file system; the kernel's namespace is unchanged, and the existing checkpoint
    restores from that store without writing to it."""
    store = tmpfs.path
    kernel = kernels.start()
    kernel.ok(FIRST)
    first = kernel.save(store)
    tmpfs.remount("ro")
    kernel.ok("note = 'changed'\nextra = [1, 2, 3]")

    error = error_of(kernel.run(f"%gpuckpt save{store_arg(store)}"))
    assert str(store) in error and "read-only file system" in error.lower(), error
    assert kernel.value("(note, extra, int(small.sum()))") == ("changed", [1, 2, 3], EXPECTED_FIRST[1])
    assert published_ids(store) == [first]
    assert_first_restores(kernels, first, store)


def test_restore_into_a_used_kernel_keeps_its_history_writable(kernels):
    """The kernel keeps running cleanly after a restore into a kernel that has already
    run more cells than the checkpoint had: its next cells are not written to IPython's
    history under line numbers that session already used (IPython would print "ERROR!
    Session/line number was not unique in database" into a later cell's output).

    The history writer thread is held back (a big ``db_cache_size``) and flushed by hand,
    so whatever it prints is caught here rather than in some later cell.
    """
    saver = kernels.start()
    saver.ok(FIRST)
    checkpoint = saver.save()
    kernel = kernels.start()
    for i in range(8):
        kernel.ok(f"cell_{i} = {i}")
    kernel.ok("hm = get_ipython().history_manager\nhm.writeout_cache()\nhm.db_cache_size = 10 ** 6")
    kernel.ok(f"%gpuckpt restore {checkpoint}")
    kernel.ok("after_restore = 1")
    printed = kernel.ok("import contextlib, io\nbuffer = io.StringIO()\n"
                        "with contextlib.redirect_stdout(buffer):\n    hm.writeout_cache()\n"
                        "print(buffer.getvalue())")
    assert "not unique" not in printed, printed
    assert kernel.value(FIRST_VALUES) == EXPECTED_FIRST


# -- environment record ---------------------------------------------------------------------

NUMPY = metadata.version("numpy")
MAJOR, MINOR, PATCH = (Version(NUMPY).release + (0, 0))[:3]


def restore_with_environment(kernels: KernelFactory, *, python: str | None = None,
                             libraries: dict[str, str] | None = None) -> tuple[Kernel, Outcome]:
    """Save FIRST, change the Python or library versions its manifest records, re-sign it
    with the owner's key, and restore it in a fresh kernel (where ``sentinel`` is set)."""
    saver = kernels.start()
    saver.ok(FIRST)
    checkpoint = saver.save()
    manifest = kernels.manifest(checkpoint)
    environment = manifest["environment"]
    assert environment["libraries"].get("numpy") == NUMPY, environment
    if python is not None:
        environment["python"] = python
    environment["libraries"].update(libraries or {})
    kernels.rewrite_manifest(checkpoint, manifest)
    kernel = kernels.start()
    kernel.ok("sentinel = 'before'")
    return kernel, kernel.run(f"%gpuckpt restore {checkpoint}")


def assert_refused(kernel: Kernel, outcome: Outcome, *names: str) -> None:
    error = error_of(outcome)
    for name in names:
        assert name in error, f"{name!r} not in {error!r}"
    assert kernel.value("(sentinel, 'small' in globals())") == ("before", False)


def test_library_patch_difference_loads_with_warning(kernels):
    """Req 10: numpy recorded with another patch release -> restored, with a warning that
    names numpy and both versions."""
    other = f"{MAJOR}.{MINOR}.{PATCH + 1}"
    kernel, outcome = restore_with_environment(kernels, libraries={"numpy": other})
    assert outcome.error is None, outcome.error
    warning = next((line for line in outcome.stdout.splitlines() if line.startswith("Warning:")), "")
    assert "numpy" in warning and other in warning and NUMPY in warning, outcome.stdout
    assert kernel.value(FIRST_VALUES) == EXPECTED_FIRST


def test_library_minor_difference_is_refused(kernels):
    """Req 10: numpy recorded with another minor release -> refused naming numpy and both versions."""
    other = f"{MAJOR}.{MINOR + 1}.0"
    kernel, outcome = restore_with_environment(kernels, libraries={"numpy": other})
    assert_refused(kernel, outcome, "numpy", other, NUMPY)


def test_python_minor_difference_is_refused(kernels):
    """Req 10: another Python minor version in the record -> refused naming Python."""
    major, minor, patch = platform.python_version_tuple()
    other = f"{major}.{int(minor) + 1}.{patch}"
    kernel, outcome = restore_with_environment(kernels, python=other)
    assert_refused(kernel, outcome, "Python", other, platform.python_version())


def test_missing_library_is_refused(kernels):
    """Req 10: a recorded distribution that is not installed here -> refused naming it."""
    kernel, outcome = restore_with_environment(kernels, libraries={"gpuckpt-no-such-dist": "1.2.3"})
    assert_refused(kernel, outcome, "gpuckpt-no-such-dist", "1.2.3")
