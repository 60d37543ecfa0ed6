"""Helpers shared by test_integrity.py and test_faults.py: reading and tampering with a
store on disk from the test process, and small tmpfs mounts to stand for a full or a
read-only disk."""

from __future__ import annotations

import getpass
import json
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuckpt_store import SigningKey

OWNER = getpass.getuser()
ID_RE = re.compile(r"\d{8}-\d{6}-[0-9a-f]{8}")


# -- the store on disk ----------------------------------------------------------------------

def owner_dir(store: Path) -> Path:
    return store / OWNER


def manifest_path(store: Path, checkpoint_id: str) -> Path:
    return owner_dir(store) / "checkpoints" / checkpoint_id / "manifest.json"


def blob_path(store: Path, digest: str) -> Path:
    return owner_dir(store) / "blobs" / digest


def load_manifest(store: Path, checkpoint_id: str) -> dict[str, Any]:
    return dict(json.loads(manifest_path(store, checkpoint_id).read_text()))


def write_manifest(store: Path, checkpoint_id: str, manifest: dict[str, Any]) -> None:
    manifest_path(store, checkpoint_id).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def resign(manifest: dict[str, Any], key_file: Path) -> dict[str, Any]:
    """``manifest`` with a fresh signature made with the key in ``key_file``."""
    manifest["signature"] = SigningKey(key_file).sign(manifest)
    return manifest


def flip_byte(path: Path, offset: int) -> None:
    """Invert every bit of one byte of ``path`` in place (size and name unchanged)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def buffer_blob(store: Path, manifest: dict[str, Any], var: str) -> Path:
    """The blob holding the first chunk of variable ``var``'s out-of-band buffer."""
    entry = next(b for b in manifest["buffers"] if b["var"] == var)
    return blob_path(store, entry["blobs"][entry["extents"][0][0]])


def checkpoint_entries(store: Path) -> list[str]:
    """Non-dot names in ``<store>/<owner>/checkpoints`` (what a listing could ever see)."""
    folder = owner_dir(store) / "checkpoints"
    return sorted(n for n in _listdir(folder) if not n.startswith("."))


def published_ids(store: Path) -> list[str]:
    """Checkpoint ids whose folder holds a manifest; fails on any half-published entry."""
    folder = owner_dir(store) / "checkpoints"
    names = checkpoint_entries(store)
    for name in names:
        entry = folder / name
        assert ID_RE.fullmatch(name) and entry.is_dir(), f"stray entry {entry} in the checkpoints folder"
        assert (entry / "manifest.json").is_file(), f"checkpoint folder {entry} has no manifest"
    return names


def temp_files(store: Path, pid: int | None = None) -> list[Path]:
    """``.tmp-*`` entries in blobs/ and checkpoints/ (only those of ``pid`` if given)."""
    prefix = ".tmp-" if pid is None else f".tmp-{socket.gethostname()}-{pid}-"
    found = []
    for folder in (owner_dir(store) / "blobs", owner_dir(store) / "checkpoints"):
        found += [folder / n for n in _listdir(folder) if n.startswith(prefix)]
    return sorted(found)


def _listdir(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except FileNotFoundError:
        return []


def error_of(outcome: Any) -> str:
    """The one-line error a failed ``%gpuckpt`` showed.

    Fails the test if the cell did not fail, or failed with anything but the magic's
    ``UsageError`` (which IPython shows as one line; any other exception gets a traceback).
    """
    assert outcome.error is not None, f"the cell should have failed; it printed {outcome.stdout!r}"
    assert outcome.error.startswith("UsageError: "), f"not a clear one-line error: {outcome.error}"
    assert "Traceback" not in outcome.stderr, outcome.stderr
    return str(outcome.error)


# -- tmpfs mounts ---------------------------------------------------------------------------

class Tmpfs:
    """A tmpfs mounted on ``path``; ``remount("ro")`` makes it read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def remount(self, options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True,
                       capture_output=True, text=True)


@pytest.fixture(name="tmpfs")
def tmpfs_fixture(tmp_path: Path) -> Iterator[Tmpfs]:
    """``tmpfs``: a 64 MiB tmpfs, unmounted afterwards (skips, saying why, where this
    process may not mount). Import ``tmpfs_fixture`` into a test module to use it."""
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs",
                           str(mountpoint)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield Tmpfs(mountpoint)
    finally:
        if subprocess.run(["umount", str(mountpoint)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
