"""CUDA park where it cannot work (CI machines have no CUDA driver): a real running process is
asked to park through the real helper, from the command line and through
``jupyter_gpuckpt.placement.parking``, and the refusal says why in plain words.

Which reason depends on the kernel's environment: without cuda-bindings it says so; with them
(a Python that has them), it is the missing driver. Real parking runs in tests/placement/test_gpu_park.py.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT

from jupyter_gpuckpt.errors import ParkFailed, ParkUnsupported
from jupyter_gpuckpt.placement import parking

NO_BINDINGS = "cuda-python is not installed in the kernel's environment (pip install cuda-bindings)"
NO_DRIVER = "no CUDA driver on this machine (libcuda.so.1 not found)"
GONE = 99_999_999


def _loads(name: str) -> bool:
    try:
        if name.endswith(".so.1"):
            ctypes.CDLL(name)
            return True
        return importlib.util.find_spec(name) is not None
    except (OSError, ImportError):
        return False


needs_bindings_without_driver = pytest.mark.skipif(
    not _loads("cuda.bindings") or _loads("libcuda.so.1"),
    reason="needs cuda-bindings installed and no CUDA driver (with one: tests/placement/test_gpu_park.py)")


@pytest.fixture(autouse=True)
def checkout_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper runs ``-m kernel_hooks.cuda_park`` in a fresh Python: from this checkout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A real running process (a Python waiting on stdin), as a kernel would be."""
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as process:
        yield process
        process.kill()


def _python(folder: Path, name: str, body: str) -> str:
    """An executable standing for a kernel's Python, in another environment."""
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def python_without_bindings(tmp_path: Path) -> str:
    """This Python, with an empty ``cuda`` package first on its path: an environment where
    ``cuda.bindings`` cannot be imported, whether or not this one has it."""
    (tmp_path / "shadow" / "cuda").mkdir(parents=True)
    (tmp_path / "shadow" / "cuda" / "__init__.py").write_text("")
    return _python(tmp_path, "python-without-bindings",
                   f'PYTHONPATH="{tmp_path / "shadow"}:$PYTHONPATH" exec "{sys.executable}" "$@"')


def helper(python: str, *args: str) -> dict[str, Any]:
    """Run the helper as the server does; its one JSON answer."""
    done = subprocess.run([python, "-m", "kernel_hooks.cuda_park", *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    answer: dict[str, Any] = json.loads(line)
    return answer


def test_without_cuda_bindings_probe_state_and_park_say_so(python_without_bindings, child):
    for args in (["probe"], ["state", str(child.pid)], ["park", str(child.pid)], ["unpark", str(child.pid)]):
        assert helper(python_without_bindings, *args) == {
            "ok": False, "reason": NO_BINDINGS, "kind": "unsupported", "state": None}
    assert child.poll() is None


@needs_bindings_without_driver
def test_with_cuda_bindings_but_no_driver_probe_and_park_say_so(child):
    for args in (["probe"], ["park", str(child.pid), "--timeout-ms", "1000"],
                 ["unpark", str(child.pid), "--remap", "GPU-00000000-0000-0000-0000-000000000001=GPU-"
                  "00000000-0000-0000-0000-000000000002"]):
        assert helper(sys.executable, *args) == {"ok": False, "reason": NO_DRIVER, "kind": "unsupported",
                                                 "state": None}
    assert child.poll() is None


def test_a_process_that_is_gone_is_named(child):
    child.kill()
    child.communicate()
    for pid in (GONE, child.pid):
        for action in ("state", "park", "unpark"):
            assert helper(sys.executable, action, str(pid)) == {
                "ok": False, "reason": f"process {pid} does not exist", "kind": "failed", "state": None}


@pytest.mark.parametrize("args", [["probe", "12"], ["park"], ["park", "twelve"], ["unpark", "1", "--remap", "x"],
                                  ["freeze", "1"]])
def test_misuse_exits_2_with_usage(args):
    done = subprocess.run([sys.executable, "-m", "kernel_hooks.cuda_park", *args], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert "usage: python -m kernel_hooks.cuda_park" in done.stderr


def test_parking_raises_the_helpers_reasons(python_without_bindings, child):
    async def calls() -> None:
        for call in (parking.probe(python_without_bindings), parking.state(child.pid, python_without_bindings),
                     parking.park(child.pid, python_without_bindings),
                     parking.unpark(child.pid, python_without_bindings, remap={"GPU-a": "GPU-b"})):
            with pytest.raises(ParkUnsupported) as refused:
                await call
            assert str(refused.value) == NO_BINDINGS
        with pytest.raises(ParkFailed) as failed:
            await parking.park(GONE)
        assert (str(failed.value), failed.value.state) == (f"process {GONE} does not exist", None)

        assert await parking.park_support(python_without_bindings) == NO_BINDINGS
        Path(python_without_bindings).unlink()  # asked once per Python: the answer is remembered
        assert await parking.park_support(python_without_bindings) == NO_BINDINGS

    asyncio.run(calls())
    assert child.poll() is None


@needs_bindings_without_driver
def test_parking_with_cuda_bindings_but_no_driver(tmp_path, child):
    python = _python(tmp_path, "python-with-bindings", f'exec "{sys.executable}" "$@"')

    async def calls() -> None:
        assert await parking.park_support(python) == NO_DRIVER
        with pytest.raises(ParkUnsupported, match=r"^no CUDA driver on this machine \(libcuda.so.1 not found\)$"):
            await parking.park(child.pid, python)

    asyncio.run(calls())


def test_parking_reports_a_helper_that_crashes_hangs_or_is_missing(tmp_path):
    # a kernel's Python without jupyter-gpuckpt (isolated, no site-packages): no helper module
    bare = _python(tmp_path, "python-without-hooks", f'exec "{sys.executable}" -I -S "$@"')
    hangs = _python(tmp_path, "python-that-hangs", "exec sleep 30")

    async def calls() -> None:
        with pytest.raises(ParkFailed, match=r"^the park helper \(park\) crashed with exit status 1: .*"
                                             r"No module named 'kernel_hooks'"):
            await parking.park(1, bare)
        assert "crashed" in (await parking.park_support(bare) or "")
        Path(bare).unlink()  # a crash is not remembered: asked again, the Python is now missing
        assert "cannot be started" in (await parking.park_support(bare) or "")

        with pytest.raises(ParkFailed, match=r"^the park helper \(probe\) did not finish within 1 s; the kernel's "
                                             "CUDA state is unknown until it is asked again$"):
            await parking.probe(hangs, timeout=1)
        with pytest.raises(ParkUnsupported, match=r"^the kernel's Python /no/such/python cannot be started: "):
            await parking.state(1, "/no/such/python")

    asyncio.run(calls())
