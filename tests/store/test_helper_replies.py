"""The helper processes answer in one shape, built and read through ``gpuckpt_store.protocol``:
the server learns from the answer itself whether trying again can help, not from the name of
an exception class."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuckpt_store import CheckpointNotFound, IntegrityError, SaveError, protocol


def test_a_damaged_or_missing_copy_is_permanent_and_other_failures_are_not() -> None:
    assert protocol.failed_with(IntegrityError("a blob does not match its digest"))["permanent"] is True
    assert protocol.failed_with(CheckpointNotFound("no checkpoint x"))["permanent"] is True
    transient = protocol.failed_with(SaveError("the store is full"))
    assert transient == {"ok": False, "error": "the store is full", "kind": "SaveError", "permanent": False}
    assert protocol.succeeded(id="c") == {"ok": True, "id": "c"}


def test_the_write_behind_helper_says_a_missing_staged_copy_is_permanent(tmp_path: Path) -> None:
    staged, store = tmp_path / "staged", tmp_path / "store"
    result = subprocess.run([sys.executable, "-m", "kernel_hooks.write_behind", "--staged", str(staged),
                             "--store", str(store), "--checkpoint", "20261202-220225-74f8ada9"],
                            capture_output=True, text=True, timeout=120)
    answer = json.loads(result.stdout.splitlines()[-1])
    assert result.returncode == 1, result.stderr
    assert answer["ok"] is False and answer["kind"] == "CheckpointNotFound" and answer["permanent"] is True
