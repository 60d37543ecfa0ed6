"""Durable, private files: what every write into the store is made of."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any


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


class InBackground:
    """``with InBackground(fn, *args):`` runs ``fn(*args)`` on a thread of its own while the
    block runs, and waits for it when the block ends, raising its error, if any, there."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                fn(*args)
            except BaseException as e:
                self._error = e

        self._thread = threading.Thread(target=run, name="gpuckpt-sync", daemon=True)

    def __enter__(self) -> InBackground:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._thread.join()
        if self._error is not None and error is None:
            raise self._error
