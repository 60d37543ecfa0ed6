"""A kernel's record: its typed parts keep the JSON of the REST model and of the ledger (their
keys, in their order), a ledger written by the previous version (its parts plain dicts) loads
and is written back as it was, a damaged entry is refused with its reason, and its state
changes only by the lifecycle's steps."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gpuckpt_store import CheckpointInfo
from jupyter_gpuckpt.errors import WrongState
from jupyter_gpuckpt.kernels.ledger import Ledger
from jupyter_gpuckpt.kernels.lifecycle import KernelRecord, State
from jupyter_gpuckpt.kernels.record_parts import CheckpointRef, NotebookSession, WriteBehindStatus
from jupyter_gpuckpt.kernels.records import KernelRecords
from kernel_hooks import SaveResult, SkippedVariable

SESSION = {"path": "work/train.ipynb", "name": "train.ipynb", "type": "notebook"}
PREVIOUS_CHECKPOINTS = {
    "saved": {"id": "20250101-000001-aaaa", "parent": None, "variables": 4,
              "skipped": [{"name": "gen", "type": "generator", "reason": "cannot be saved", "cells": [2]}],
              "bytes_total": 4096, "bytes_written": 1024, "seconds": 0.25, "last_cell": 3, "time": 1735689601.5,
              "durability": "staged"},
    "listed": {"id": "20250101-000002-bbbb", "bytes_total": 2048, "variables": 2, "time": 1735689602.0,
               "last_cell": None, "durability": "durable"},
    "id alone": {"id": "20250101-000003-cccc", "durability": "durable", "time": None},
    "the kernel's own": {"id": "20250101-000004-dddd", "last_cell": 7, "time": 1735689604,
                         "taken_by": "the kernel, as it was told to end"},
    "a key it does not know": {"id": "20250101-000005-eeee", "durability": "durable", "codec": "zstd"},
}
"""``last_checkpoint`` as each origin of the previous version wrote it (plain dicts)."""


def _previous_entry(checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """A suspended kernel's ledger entry as the previous version wrote it."""
    return {"kernelspec": "gpuckpt-python3", "state": "suspended", "last_checkpoint": checkpoint,
            "suspended_at": 1735689700.0, "kernel_info": {"status": "ok", "implementation": "ipython"},
            "session": SESSION, "last_activity": 1735689650.0, "placement_info": None,
            "durable_checkpoint": "20250101-000002-bbbb", "parked_at": None}


@pytest.mark.parametrize("origin", list(PREVIOUS_CHECKPOINTS))
def test_a_previous_versions_entry_loads_and_keeps_its_json(origin: str) -> None:
    entry = _previous_entry(PREVIOUS_CHECKPOINTS[origin])
    record = KernelRecord("k1", kernelspec=entry["kernelspec"])  # as the registry makes it, then loads it
    record.load(json.loads(json.dumps(entry)))
    assert isinstance(record.last_checkpoint, CheckpointRef) and isinstance(record.session, NotebookSession)
    assert record.last_checkpoint_id == entry["last_checkpoint"]["id"] and record.session.path == SESSION["path"]
    assert json.dumps(record.ledger_entry()) == json.dumps(entry)  # the same keys in the same order
    assert json.dumps(record.to_json()["last_checkpoint"]) == json.dumps(entry["last_checkpoint"])


async def test_a_ledger_file_of_the_previous_version_is_written_back_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    previous = Ledger(path, lambda: "lab", logging.getLogger("test_kernel_record"))
    entries = {f"k{n}": _previous_entry(c) for n, c in enumerate([*PREVIOUS_CHECKPOINTS.values(), None])}
    previous.save(entries)
    previous.close()
    written = path.read_bytes()

    records = KernelRecords(Ledger(path, lambda: "lab", logging.getLogger("test_kernel_record")))
    mine, _ = await records.claim()
    assert mine.keys() == entries.keys()
    for kernel_id, entry in mine.items():
        records.make(kernel_id, entry["kernelspec"]).load(entry)
    path.unlink()
    records.save()
    await records.saved()
    await records.close()
    assert path.read_bytes() == written


def test_a_save_keeps_its_result_and_becomes_durable_in_place() -> None:
    result = SaveResult(id="20250101-000001-aaaa", parent="20250101-000000-ffff", variables=3,
                        skipped=[SkippedVariable("gen", "generator", "cannot be saved", [2])],
                        bytes_total=4096, bytes_written=512, seconds=0.5, last_cell=4).to_json()
    staged = CheckpointRef.saved(result, "staged", 1735689601.5)
    assert list(staged.to_json().items()) == [*result.items(), ("time", 1735689601.5), ("durability", "staged")]
    assert staged.staged and staged.bytes_total == 4096 and staged.last_cell == 4
    durable = staged.made_durable()
    assert not durable.staged and list(durable.to_json()) == list(staged.to_json())
    assert durable.to_json() == {**staged.to_json(), "durability": "durable"}

    info = CheckpointInfo("20250101-000002-bbbb", created="2025-01-01T00:00:02+00:00", nbytes=2048, variables=2)
    assert CheckpointRef.listed(info).to_json() == PREVIOUS_CHECKPOINTS["listed"]
    assert CheckpointRef.durable_id("20250101-000003-cccc").to_json() == PREVIOUS_CHECKPOINTS["id alone"]
    assert CheckpointRef.taken_by_kernel("20250101-000004-dddd", 7, 1735689604).to_json() == \
        PREVIOUS_CHECKPOINTS["the kernel's own"]
    assert CheckpointRef("c1", durability="durable", bytes_total=0).to_json() == \
        {"id": "c1", "durability": "durable", "bytes_total": 0}


def test_the_write_behind_shows_its_bytes_or_its_last_error() -> None:
    record = KernelRecord("k1")
    record.write_behind = WriteBehindStatus.writing("c1", 10, 40)
    assert record.to_json()["write_behind"] == {"checkpoint_id": "c1", "bytes_done": 10, "bytes_total": 40}
    record.write_behind = WriteBehindStatus.failed("c1", 2, "the disk is full")
    assert record.to_json()["write_behind"] == {"checkpoint_id": "c1", "attempts": 2, "error": "the disk is full"}


@pytest.mark.parametrize(("damage", "said"), [
    ({"last_checkpoint": {"bytes_total": 3}}, "needs an id"),
    ({"last_checkpoint": "20250101-000001-aaaa"}, "must be a JSON object"),
    ({"last_checkpoint": {"id": "c1", "bytes_total": "3"}}, "c1's bytes_total is '3', not int"),
    ({"last_checkpoint": {"id": "c1", "last_cell": True}}, "last_cell is True"),
    ({"session": {"path": 3}}, "path, name and type are strings"),
])
def test_a_damaged_entry_is_refused_with_its_reason_and_changes_nothing(damage: dict[str, Any], said: str) -> None:
    record = KernelRecord("k1")
    with pytest.raises(ValueError, match=said):
        record.load({**_previous_entry(PREVIOUS_CHECKPOINTS["saved"]), **damage})
    assert (record.state, record.last_checkpoint, record.session, record.suspended_at) == \
        (State.RUNNING, None, None, None)


def test_the_state_changes_only_by_the_lifecycles_steps() -> None:
    record = KernelRecord("k1")
    for state in (State.CHECKPOINTING, State.PARKED, State.SUSPENDED, State.RESTORING, State.RUNNING,
                  State.RUNNING, State.RESTORING, State.RESTORING, State.FAILED, State.RESTORING, State.RUNNING):
        record.enter(state)
        assert record.state == state
    for start, refused in ((State.RUNNING, State.SUSPENDED), (State.SUSPENDED, State.RUNNING),
                           (State.RESTORING, State.CHECKPOINTING), (State.FAILED, State.RUNNING),
                           (State.CHECKPOINTING, State.RUNNING), (State.PARKED, State.RUNNING)):
        record.state = start
        with pytest.raises(WrongState, match=f"is {start.value}; it cannot become {refused.value}"):
            record.enter(refused)
        assert record.state == start
    for start in State:
        record.state = start
        record.enter(State.FAILED)
        assert record.state == State.FAILED


def test_an_operation_that_failed_falls_back_to_a_safe_state_with_its_reason() -> None:
    record = KernelRecord("k1")
    record.enter(State.CHECKPOINTING)
    record.enter(State.SUSPENDED)
    record.enter(State.RESTORING)
    record.enter(State.RUNNING)
    record.fall_back(State.SUSPENDED, "the restore failed")  # after the restore, before the resume ended
    assert (record.state, record.last_error) == (State.SUSPENDED, "the restore failed")
    with pytest.raises(ValueError, match="no safe state"):
        record.fall_back(State.CHECKPOINTING, "never")
    assert record.state == State.SUSPENDED

