"""Integrity and trust: only manifests signed with the owner's private key are loaded,
every blob is checked against its hash before use, and ids cannot leave the store.

The "nothing was unpickled" proofs use a notebook class whose instances, when unpickled,
create a marker file; each such test also shows that an intact checkpoint does create it.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from fault_fixtures import (
    blob_path,
    buffer_blob,
    error_of,
    flip_byte,
    load_manifest,
    manifest_path,
    owner_dir,
    published_ids,
    resign,
    write_manifest,
)
from kernel_processes import Kernel, KernelFactory

TRAP = '''
import io
class Trap:
    """Unpickling an instance creates the marker file."""
    def __reduce__(self):
        return (io.open, ({marker!r}, "w"))
trap = Trap()
'''

USER_NAMES = "sorted(k for k in globals() if not k.startswith('_'))"


def key_file(kernels: KernelFactory) -> Path:
    return kernels.data_dir / "gpuckpt" / "signing.key"


def save_trap(kernels: KernelFactory, tmp_path: Path) -> tuple[str, Path]:
    """Save a checkpoint holding ``trap``; returns its id and the marker that loading it creates."""
    marker = tmp_path / "unpickled.marker"
    saver = kernels.start()
    saver.ok(TRAP.format(marker=str(marker)) + "\nnote = 'saved'")
    checkpoint = saver.save()
    assert not marker.exists(), "saving must not unpickle anything"
    return checkpoint, marker


def fresh_kernel(kernels: KernelFactory) -> Kernel:
    kernel = kernels.start()
    kernel.ok("sentinel = 'before'")
    return kernel


def assert_untouched(kernel: Kernel, names_before: list[str]) -> None:
    assert kernel.value("sentinel") == "before"
    assert kernel.value(USER_NAMES) == names_before


def assert_refused_before_unpickling(kernels: KernelFactory, checkpoint: str, marker: Path,
                                     *expected: str) -> Kernel:
    """Restore in a fresh kernel: an error naming ``expected``, no marker, namespace as before."""
    kernel = fresh_kernel(kernels)
    names = kernel.value(USER_NAMES)
    error = error_of(kernel.run(f"%gpuckpt restore {checkpoint}"))
    for text in expected:
        assert text in error, f"{text!r} not in {error!r}"
    assert not marker.exists(), "the refused checkpoint was unpickled"
    assert_untouched(kernel, names)
    return kernel


def test_tampered_manifest_is_refused_and_nothing_unpickled(kernels, tmp_path):
    """Req 1: one changed field with the old signature kept -> refused naming the signature,
    before anything is unpickled; the intact manifest does load (positive control)."""
    checkpoint, marker = save_trap(kernels, tmp_path)
    original = manifest_path(kernels.store, checkpoint).read_bytes()
    manifest = load_manifest(kernels.store, checkpoint)
    manifest["notebook"] = "tampered.ipynb"
    write_manifest(kernels.store, checkpoint, manifest)

    assert_refused_before_unpickling(kernels, checkpoint, marker, "bad signature",
                                     str(manifest_path(kernels.store, checkpoint)))

    manifest_path(kernels.store, checkpoint).write_bytes(original)
    kernel = kernels.start()
    kernel.ok(f"%gpuckpt restore {checkpoint}")
    assert marker.exists(), "positive control: an intact checkpoint unpickles the trap"
    assert kernel.value("note") == "saved"


def test_unsigned_manifest_is_refused(kernels, tmp_path):
    """Req 2: a manifest without its signature field -> refused as "not signed"."""
    checkpoint, marker = save_trap(kernels, tmp_path)
    manifest = load_manifest(kernels.store, checkpoint)
    del manifest["signature"]
    write_manifest(kernels.store, checkpoint, manifest)

    assert_refused_before_unpickling(kernels, checkpoint, marker, "not signed")


def test_manifest_signed_with_another_key_is_refused(kernels, tmp_path):
    """Req 3: a manifest validly signed, but with another key file -> refused; re-signed
    with the owner's key it loads (so only the key made the difference)."""
    checkpoint, marker = save_trap(kernels, tmp_path)
    other_key = tmp_path / "other-data-dir" / "gpuckpt" / "signing.key"
    manifest = resign(load_manifest(kernels.store, checkpoint), other_key)
    assert other_key.read_text() != key_file(kernels).read_text()
    write_manifest(kernels.store, checkpoint, manifest)

    kernel = assert_refused_before_unpickling(kernels, checkpoint, marker, "bad signature")

    kernels.rewrite_manifest(checkpoint, manifest)  # signed with the owner's key again
    kernel.ok(f"%gpuckpt restore {checkpoint}")
    assert marker.exists(), "positive control: the owner's signature is accepted"


def test_kernel_with_another_key_refuses_the_checkpoint(kernels, tmp_path):
    """Req 3: a kernel whose key file is another one (another user) refuses an intact checkpoint."""
    checkpoint, marker = save_trap(kernels, tmp_path)
    other = kernels.start(JUPYTER_GPUCKPT_KEY_FILE=str(tmp_path / "other" / "signing.key"))
    error = error_of(other.run(f"%gpuckpt restore {checkpoint}"))
    assert "bad signature" in error
    assert not marker.exists()
    assert other.value("'trap' in globals()") is False


def test_garbled_signature_is_refused_cleanly(kernels, tmp_path):
    """Req 1: a signature that is not even ASCII is just a bad signature: a one-line
    refusal naming it (no TypeError traceback), nothing unpickled, and ``%gpuckpt list``
    still works and marks that checkpoint unusable."""
    checkpoint, marker = save_trap(kernels, tmp_path)
    manifest = load_manifest(kernels.store, checkpoint)
    manifest["signature"] = "hmac-sha256:\u00fcberschrieben"
    write_manifest(kernels.store, checkpoint, manifest)

    kernel = assert_refused_before_unpickling(kernels, checkpoint, marker, "bad signature")
    listing = kernel.run("%gpuckpt list")
    assert listing.error is None, listing.error
    assert checkpoint in listing.stdout and "unusable" in listing.stdout


def store_files(kernels: KernelFactory) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in owner_dir(kernels.store).rglob("*") if p.is_file()}


@pytest.mark.parametrize("mapped", [False, True], ids=["read", "mapped"])
@pytest.mark.parametrize("part", ["buffer", "strings", "pickle"])
def test_corrupt_blob_is_refused_and_nothing_changes(kernels, part, mapped):
    """Req 4: one flipped byte in a buffer blob (a 2.4 MB array), in a run of packed
    strings (decoded before unpickling starts) or in the pickle blob -> an error naming the
    blob (and the variable); the restoring kernel's namespace and the checkpoint's files
    are left as they were. ``mapped``: the store is a host-memory one (it has a spare folder),
    whose buffers a restore maps, checking their hashes through the mapping."""
    saver = kernels.start()
    saver.ok("import numpy as np\nbig = np.arange(300_000, dtype=np.float64)\n"
             "words = np.array([f'word {i}' for i in range(100_000)], dtype=object)\nnote = 'saved'")
    checkpoint = saver.save()
    manifest = load_manifest(kernels.store, checkpoint)
    variable = {"buffer": "big", "strings": "words"}.get(part)
    if variable is not None:
        entry = next(b for b in manifest["buffers"] if b["var"] == variable)
        assert entry["kind"] == ("numpy" if part == "buffer" else "strings"), "stored out of band"
        blob, offset = buffer_blob(kernels.store, manifest, variable), entry["extents"][0][1] + 1000
    else:
        blob = blob_path(kernels.store, manifest["pickle"]["blobs"][0])
        offset = blob.stat().st_size // 2
    flip_byte(blob, offset)
    if mapped:
        (owner_dir(kernels.store) / "spare").mkdir(mode=0o700)
    files = store_files(kernels)

    kernel = fresh_kernel(kernels)
    names = kernel.value(USER_NAMES)
    error = error_of(kernel.run(f"%gpuckpt restore {checkpoint}"))
    assert str(blob) in error and "corrupt" in error
    assert (f"variable {variable!r}" if variable else "pickle") in error
    assert_untouched(kernel, names)
    assert kernel.value("'big' in globals() or 'words' in globals() or 'note' in globals()") is False
    assert store_files(kernels) == files, "a failed restore must leave the checkpoint as it was"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_file_and_store_folders_are_private(kernel, kernels):
    """Req 5: after the first save the key file is 0600, the owner's store folders 0700,
    and the manifest and blobs 0600."""
    assert not key_file(kernels).exists()
    kernel.ok("import numpy as np\nbig = np.ones(200_000)")
    checkpoint = kernel.save()
    assert mode(key_file(kernels)) == 0o600
    base = owner_dir(kernels.store)
    for folder in (base, base / "checkpoints", base / "blobs", base / "checkpoints" / checkpoint):
        assert mode(folder) == 0o700, f"{folder} has mode {oct(mode(folder))}"
    files = [p for p in base.rglob("*") if p.is_file()]
    assert len(files) >= 3  # manifest, pickle, the array's buffer
    for path in files:
        assert mode(path) == 0o600, f"{path} has mode {oct(mode(path))}"


def test_key_file_readable_by_others_is_refused(kernel, kernels):
    """Req 5: with the key file at mode 0644, save and restore both refuse with a message
    that names the key file and says to chmod it; nothing is published, nothing changes."""
    kernel.ok("x = 1")
    checkpoint = kernel.save()
    key_file(kernels).chmod(0o644)

    for command in (f"%gpuckpt restore {checkpoint}", "%gpuckpt save"):
        error = error_of(kernel.run(command))
        assert str(key_file(kernels)) in error and "chmod 600" in error, error
    assert published_ids(kernels.store) == [checkpoint]
    assert kernel.value("x") == 1

    key_file(kernels).chmod(0o600)
    kernel.ok(f"%gpuckpt restore {checkpoint}")  # control: the same key at 0600 is accepted


BAD_IDS = [
    "../../etc", "../../../planted", "/etc/passwd", "..", ".", "~", "20240101-000000-DEADBEEF",
    "20240101-000000-deadbee", "20240101-000000-deadbeef0", "20240101-000000-deadbeef/../../../planted",
    "'20240101-000000-deadbeef '", "%2e%2e%2fplanted",
]


def test_malformed_ids_are_refused_without_leaving_the_store(kernels, tmp_path):
    """Req 6: malformed ids give a one-line "not a checkpoint id" error, no traceback.

    A valid, owner-signed manifest is planted where ``../../../planted`` would lead, and an
    audit hook records every file the kernel opens or lists: nothing there is touched.
    """
    checkpoint, marker = save_trap(kernels, tmp_path)
    planted = kernels.data_dir / "gpuckpt" / "planted"
    traversal = owner_dir(kernels.store) / "checkpoints" / "../../../planted"
    assert traversal.resolve() == planted.resolve()
    shutil.copytree(manifest_path(kernels.store, checkpoint).parent, planted)
    bait = load_manifest(kernels.store, checkpoint)
    bait["id"] = "../../../planted"
    (planted / "manifest.json").write_text(json.dumps(resign(bait, key_file(kernels))))

    kernel = fresh_kernel(kernels)
    names = kernel.value(USER_NAMES)
    kernel.ok("import sys\naccessed = []\nsys.addaudithook(lambda event, args: accessed.append(str(args[0]))"
              " if event in ('open', 'os.listdir', 'os.scandir') and args else None)")
    names = names + ["accessed", "sys"]
    for bad in BAD_IDS:
        error = error_of(kernel.run(f"%gpuckpt restore {bad}"))
        assert "not a checkpoint id" in error, f"{bad}: {error}"
    missing = "20240101-000000-deadbeef"
    error = error_of(kernel.run(f"%gpuckpt restore {missing}"))
    assert f"no checkpoint {missing}" in error

    accessed = kernel.value("accessed")
    assert not [p for p in accessed if "planted" in p or p.startswith("/etc")], accessed
    assert not marker.exists()
    assert_untouched(kernel, sorted(names))
    assert published_ids(kernels.store) == [checkpoint]


def test_id_with_trailing_newline_is_malformed(kernel):
    """Req 6 (Python API, which the server calls with ids from requests): an id with a
    trailing newline is not a checkpoint id either."""
    error = kernel.run(
        "import kernel_hooks\n"
        "kernel_hooks.restore_checkpoint(get_ipython(), '20240101-000000-deadbeef\\n')"
    ).error
    assert error is not None and "not a checkpoint id" in error, error


def _load_key(path: str, start: Any, results: Any) -> None:
    from gpuckpt_store import SigningKey

    start.wait()
    try:
        results.put(SigningKey(Path(path)).sign({"id": "x"}))
    except Exception as e:
        results.put(f"{type(e).__name__}: {e}")


def test_kernels_creating_the_key_at_once_all_get_the_same_whole_key(tmp_path):
    context = multiprocessing.get_context("fork")
    for attempt in range(10):
        path = tmp_path / f"try-{attempt}" / "signing.key"
        start, results = context.Barrier(8), context.Queue()
        workers = [context.Process(target=_load_key, args=(str(path), start, results)) for _ in range(8)]
        for worker in workers:
            worker.start()
        outcomes = {results.get(timeout=30) for _ in workers}
        for worker in workers:
            worker.join()
        assert len(outcomes) == 1, outcomes  # every process signed with the one published key
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no temporary left
