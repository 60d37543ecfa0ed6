"""A restore from host memory maps the staged pages instead of copying them: numpy arrays, torch
CPU tensors and Arrow columns backed by private (copy-on-write) mappings of the staged blobs,
every chunk's hash checked, nothing read with ``read()``, and no blob a kernel maps ever written
over by a save. Real kernels, a real staging store on ``/dev/shm``."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_processes import KernelFactory

from gpuckpt_store import CheckpointStore, SigningKey, spare
from jupyter_gpuckpt.staging.host_memory import HostMemory

STATE = """
import numpy as np, pyarrow as pa, torch
rng = np.random.default_rng(3)
a = rng.random(5_000_000)
torch.manual_seed(3)
t = torch.rand(2_000_000, dtype=torch.float32)
table = pa.table({"x": pa.array(rng.random(1_000_000))})
note = "kept"
"""
SUMS = ("print(repr((round(float(a.sum()), 6), round(float(t.sum()), 2), "
        "round(float(pa.compute.sum(table['x']).as_py()), 6), note)))")
NBYTES = 5_000_000 * 8 + 2_000_000 * 4 + 1_000_000 * 8


@pytest.fixture
def host(kernels: KernelFactory) -> Iterator[HostMemory]:
    root = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    area = HostMemory(root / "staging", 1 << 30)
    assert area.problem() is None  # a host-memory store: it has its spare folder
    yield area
    shutil.rmtree(root, ignore_errors=True)


def _staged(kernels: KernelFactory, host: HostMemory) -> CheckpointStore:
    """The staging store, read with the kernels' signing key."""
    return CheckpointStore(host.root, key=SigningKey(kernels.data_dir / "gpuckpt" / "signing.key"))


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _read_bytes(kernel) -> int:
    return int(kernel.ok("print(next(l for l in open('/proc/self/io') if l.startswith('rchar')).split()[1])"))


def test_restored_buffers_are_the_staged_pages_copy_on_write_and_never_written_over(kernels, host):
    saver = kernels.start()
    saver.ok(STATE)
    expected = saver.ok(SUMS)
    checkpoint = saver.save(host.root)
    staged = _staged(kernels, host)
    files = _digests(staged.blobs_dir)

    kernel = kernels.start()
    kernel.ok("import numpy, pyarrow.compute, torch")  # the libraries' own files are not the state
    before = _read_bytes(kernel)
    kernel.ok(f"%gpuckpt restore {checkpoint} --store {host.root}")
    read = _read_bytes(kernel) - before
    assert kernel.ok(SUMS) == expected
    assert read < NBYTES / 10, f"{read} bytes read for {NBYTES} of buffers: copied, not mapped"
    maps = kernel.ok("print(open('/proc/self/maps').read())")
    mapped = {name for name in files if name in maps}
    assert mapped, "no staged blob is mapped"

    kernel.ok("a[:] = 0\nt.zero_()\npass")  # the kernel's writes stay its own
    assert kernel.ok("print(float(a.sum()), float(t.sum()))").split() == ["0.0", "0.0"]
    assert _digests(staged.blobs_dir) == files

    host.drop(checkpoint, recycle_for="k")  # the copy is let go: its files become spare ones
    inodes = {(staged.spare_dir / n).stat().st_ino: n for n in os.listdir(staged.spare_dir)}
    claimed = []
    while (got := spare.claim(staged.spare_dir, staged.blobs_dir / f"claim-{len(claimed)}")) is not None:
        claimed.append(got)
    assert claimed, "the pickle's blob, read and closed, is free to write over"
    assert len(claimed) < len(inodes)  # the mapped ones are not: the kernel still holds them
    assert kernel.ok("print(round(float(table['x'].to_numpy().sum()), 6))").strip() == (
        expected.strip().strip("()").split(", ")[2])
    kernel.ok("del a, t, table; import gc; gc.collect()")  # the last references: unmapped, unlocked
    while (got := spare.claim(staged.spare_dir, staged.blobs_dir / f"claim-{len(claimed)}")) is not None:
        claimed.append(got)
    assert len(claimed) == len(inodes)
    for fd, _ in claimed:
        os.close(fd)


def test_a_corrupt_staged_blob_fails_the_mapped_restore_and_keeps_the_copy(kernels, host):
    saver = kernels.start()
    saver.ok(STATE)
    checkpoint = saver.save(host.root)
    staged = _staged(kernels, host)
    entry = next(b for b in staged.read_manifest(checkpoint)["buffers"] if b["var"] == "a")
    blob = staged.blobs_dir / entry["blobs"][entry["extents"][0][0]]
    with open(blob, "r+b") as f:
        f.seek(entry["extents"][0][1] + 1000)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))

    kernel = kernels.start()
    outcome = kernel.run(f"%gpuckpt restore {checkpoint} --store {host.root}")
    failure = (outcome.error or "") + outcome.stdout + outcome.stderr
    assert "corrupt" in failure and str(blob) in failure and "variable 'a'" in failure
    assert kernel.ok("print('a' in globals() or 'note' in globals())").strip() == "False"
    assert checkpoint in staged.ids()  # the copy stays, for a look or a restore from the store
