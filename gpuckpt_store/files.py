"""Durable, private files: what every write into the store is made of."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the names in folder ``path`` durable (a rename or link into it, say)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dir(path: Path, mode: int) -> bool:
    """Create folder ``path`` with exactly ``mode`` (whatever the umask); False if it existed."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return False
    os.chmod(path, mode)
    return True
