"""What a park does not cover, decided from NVML's answer (kernel_hooks/park_checks.py): the
kernel's children with CUDA contexts of their own, GPUs in MIG mode, and the full GPU map of a
restore onto other GPUs. NVML's answer is written by the test here; the processes are real.

On a GPU: tests/placement/test_gpu_park.py (``pytest -m gpu``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gpuckpt_store import protocol
from kernel_hooks.park_checks import GPUReading, children_problem, cuda_children, mig_problem, restore_map

A, B, C = (f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-0000-0000-000000000000" for n in "abc")
MIB = 1 << 20

TREE = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
print(grandchild.pid, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A real process (the kernel) whose child started a grandchild: both of the kernel."""
    with subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
                                                 f"{TREE!r}], stdin=sys.stdin)"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as kernel:
        assert kernel.stdout is not None
        grandchild = int(kernel.stdout.readline())
        yield kernel, grandchild
        assert kernel.stdin is not None
        kernel.stdin.close()  # each reads stdin to its end, then exits
        kernel.wait(timeout=30)


@pytest.fixture
def tagged() -> Iterator[int]:
    """A process not descended from the kernel (a detached daemon) that carries its tag."""
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                          env={**os.environ, protocol.KERNEL_ENV: "kernel-1"}) as daemon:
        yield daemon.pid
        daemon.kill()


def test_a_grandchild_or_a_tagged_process_with_a_cuda_context_is_named(tree, tagged):
    kernel, grandchild = tree
    stranger = os.getpid()  # this test's process: on the GPU, but not the kernel's
    gpus = [GPUReading(A, processes={kernel.pid: 900 * MIB, grandchild: 300 * MIB, stranger: 50 * MIB}),
            GPUReading(B, processes={grandchild: 200 * MIB, tagged: 64 * MIB})]
    assert cuda_children(kernel.pid, gpus) == {grandchild: 500 * MIB}
    assert cuda_children(kernel.pid, gpus, "kernel-1") == {grandchild: 500 * MIB, tagged: 64 * MIB}
    assert children_problem(kernel.pid, gpus) == (
        f"process {kernel.pid} has child processes with CUDA contexts of their own, which park would leave on the "
        f"GPU: pid {grandchild} (500 MiB); park moves the kernel's main process only")


def test_a_kernel_alone_on_its_gpus_has_no_problem(tree):
    kernel, grandchild = tree
    gpus = [GPUReading(A, processes={kernel.pid: 900 * MIB, os.getpid(): 10 * MIB}), GPUReading(B)]
    assert cuda_children(kernel.pid, gpus) == {} and children_problem(kernel.pid, gpus, "kernel-1") is None
    # NVML in a container that hides the host's pids lists pids this namespace does not have
    assert children_problem(kernel.pid, [GPUReading(A, processes={4_000_000: MIB})]) is None


def test_a_gpu_in_mig_mode_is_refused_where_the_kernel_may_use_it():
    gpus = [GPUReading(A), GPUReading(B, mig=True)]
    assert mig_problem(gpus, A) is None  # its GPU is A: B's MIG mode does not concern it
    assert mig_problem(gpus, A.removeprefix("GPU-").upper()) is None
    refused = f"{B} is in MIG mode; park does not handle MIG devices"
    assert mig_problem(gpus, f"{A},{B}") == refused
    assert mig_problem(gpus, None) == refused  # no CUDA_VISIBLE_DEVICES: every GPU
    assert mig_problem(gpus, "0") == refused  # an index could be any of them
    assert mig_problem(gpus, "MIG-0c3b6f7e-aaaa-bbbb-cccc-000000000000") == (
        "the kernel uses MIG instances; park does not handle MIG devices")
    assert mig_problem([GPUReading(A), GPUReading(B)], None) is None


def test_a_restore_map_names_every_gpu_the_driver_sees():
    every = [A, B, C]
    assert restore_map({A: A}, every) == {A: A, B: B, C: C}
    assert restore_map({A: B}, every) == {A: B, B: A, C: C}  # B's old place goes to A's
    assert restore_map({A: C, B: A}, every) == {A: C, B: A, C: B}
    assert restore_map({A.removeprefix("GPU-").upper(): B}, every) == {A: B, B: A, C: C}
    for mapping in ({A: B}, {A: C, B: A}, {A: B, B: C, C: A}):
        full = restore_map(mapping, every)
        assert sorted(full) == sorted(full.values()) == sorted(every)  # a permutation of them all


def test_a_restore_map_onto_a_gpu_the_driver_does_not_see_or_twice_onto_one_is_refused():
    with pytest.raises(ValueError, match=f"^{C}: no such GPU here \\(the driver sees {A}, {B}\\)$"):
        restore_map({A: C}, [A, B])
    with pytest.raises(ValueError, match="^two GPUs cannot be restored onto one$"):
        restore_map({A: C, B: C}, [A, B, C])
    with pytest.raises(ValueError, match="is not a GPU UUID"):
        restore_map({"GPU-0": A}, [A])
