"""Big buffers go out of band, content-addressed, and are never written twice."""

from __future__ import annotations

import getpass
import json

from kernel_hooks.blobs import CHUNK_BYTES, PICKLE_CHUNK_BYTES

# One expression, so that saving leaves no new variable behind in the namespace.
SAVE = """print((lambda r: __import__("json").dumps({"id": r.id, "written": r.bytes_written,
    "total": r.bytes_total}))(__import__("kernel_hooks").save_checkpoint(get_ipython())))"""

MIB = 1 << 20


def _save(kernel) -> dict:
    return json.loads(kernel.ok(SAVE).strip().splitlines()[-1])


def test_second_checkpoint_writes_only_what_changed(kernels):
    k = kernels.start()
    k.ok("import numpy as np\n"
         "arrays = [np.random.default_rng(i).random(4 * 1024 * 1024) for i in range(4)]")  # 4 x 32 MiB
    full = _save(k)
    assert full["total"] >= 128 * MIB
    assert full["written"] >= 128 * MIB  # an empty store: everything is new

    manifest = kernels.manifest(full["id"])
    assert len(manifest["buffers"]) == 4 and all(b["kind"] == "numpy" for b in manifest["buffers"])
    assert manifest["pickle"]["nbytes"] < 64 * 1024  # the data is out of band, not in the pickle

    unchanged = _save(k)
    assert unchanged["total"] == full["total"]
    assert unchanged["written"] == 0  # same bytes, same blobs: nothing new, not even the pickle

    k.ok("arrays[2][1000:1000 + 160_000] += 1.0")  # 1.25 MB, about 1% of the data
    changed = _save(k)
    # the 256 KiB chunks the change touches (5 or 6), plus the small pickle if it changed
    assert 1.25e6 <= changed["written"] <= 6 * CHUNK_BYTES + PICKLE_CHUNK_BYTES
    assert changed["written"] / changed["total"] < 0.012


def test_small_objects_and_their_notebook_class_rewrite_only_the_changed_run(kernels):
    k = kernels.start()
    k.ok("import dataclasses\n"
         "@dataclasses.dataclass\n"
         "class Record:\n"
         "    id: int\n"
         "    name: str\n"
         "    score: float\n"
         "records = [Record(i, f'record-{i:07d}', i * 0.25) for i in range(20_000)]")
    full = _save(k)
    assert full["total"] > 40 * PICKLE_CHUNK_BYTES  # the pickle spans many chunks
    # The class is pickled by value before its first instance: a cache copyreg then put
    # on the class must not change how it pickles in the next save.
    assert _save(k)["written"] == 0
    k.ok("for r in records[10_000:10_200]:\n    r.score = -1.0\ndel r")  # 1% of the objects
    changed = _save(k)
    # the changed run (200 floats among 10 kB of records) lies in one or two chunks
    assert 0 < changed["written"] <= 2 * PICKLE_CHUNK_BYTES


def test_identical_buffers_are_shared_across_kernels(kernels):
    a, b = kernels.start(), kernels.start()
    code = "import numpy as np\nbig = np.random.default_rng(42).random(2 * 1024 * 1024)"
    a.ok(code)
    b.ok(code)
    first = _save(a)
    second = _save(b)
    assert first["written"] >= 16 * MIB
    assert second["written"] < 64 * 1024  # b's array is already stored under the same hashes
    blobs = kernels.store / getpass.getuser() / "blobs"
    assert sum(p.stat().st_size for p in blobs.iterdir()) < first["total"] + 64 * 1024
