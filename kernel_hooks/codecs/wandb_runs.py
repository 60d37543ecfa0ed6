"""wandb runs: a run that was logging comes back as the same run continued, under its id, with
its config, summary and step, logging through a wandb service started again.

A ``Run`` talks to wandb's service process (``wandb-core``), which writes the run's records;
both end with the kernel. wandb's own pickling of a run (for multiprocessing) keeps only the
run's id, to attach to the service's run of that id on first use, which has ended too: a
restored run would fail on first use, though reported restored. Here the run is saved as
what ``wandb.init`` needs to continue it (id, project, entity, group, job type, name, notes,
tags, folder, mode, config), its summary and its next step, and once the restore commits (see
:func:`.live_objects.on_commit`) ``wandb.init(id=..., resume="allow")`` starts the service
and the run again. Other ``wandb.init`` settings (``settings=``, ``sync_tensorboard``) are not
carried over.

Online, wandb's server continues the run. Offline, wandb writes a resumed run as a second
offline run folder with the same run id, marked as resumed, beside the first; ``wandb sync``
uploads the two in order as one run. wandb starts an offline resumed run's steps at 0 (only
the server knows the last step) and its config empty: the restored run is given both, so its
steps go on from where the saved run's stopped and its records carry the config. Metric
definitions (``define_metric``) are in the first half's records only.

An offline run is continued only if its first half is whole on disk, and the restore report
says why not otherwise: its second half would be synced as the whole run, or after a gap.
The folder may be gone (deleted, or on another machine's disk). Or its records may not all
have reached the disk: ``wandb-core`` writes an offline run's transaction log in 32 KiB blocks
and the rest only when the run finishes, so a kernel that ends without finishing it (a
suspend ends it with SIGTERM, which Python does not turn into its exit, then SIGKILL) leaves
the last block's steps unwritten; a kernel shut down, whose exit finishes its runs, leaves
them whole. The restore reads the last history step in the first half's log (leveldb's log
format, with a header of wandb's own, holding ``Record`` protobufs) and compares it with the
step the saved run had logged to.

``wandb.init`` returns a new ``Run``; the restored object is the one the notebook's variables
hold, so it is given the new run's attribute dict (one state for both, as bound methods of the
new run are registered as the run's callbacks), and takes the new run's place among wandb's
active runs and as ``wandb.run`` if the saved run was ``wandb.run``. A finished run comes
back finished, with its settings and config. A run attached from another process, or in
shared mode, is not saved: its process owns it.
"""

from __future__ import annotations

import os
import re
import struct
from functools import partial
from typing import Any

import wandb
from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]  # the installed protobuf's
from wandb.sdk.wandb_init import _set_global_run
from wandb.sdk.wandb_run import Run
from wandb.sdk.wandb_settings import Settings

from .live_objects import Reducer, on_commit

_BLOCK = 32768
"""leveldb's log format: chunks of records in blocks of this size, each chunk after a 7-byte
header (CRC, length, type); a block's last bytes, too few for a header, are padding."""
_FULL, _FIRST, _LAST = 1, 2, 4


def _last_step(transaction_log: str) -> int:
    """The last history step written to an offline run's transaction log (-1 if none)."""
    with open(transaction_log, "rb") as log:
        data = log.read()
    last, record, at = -1, b"", 7  # after wandb's header (":W&B", magic, version)
    while at + 7 <= len(data):
        if _BLOCK - at % _BLOCK < 7:
            at += _BLOCK - at % _BLOCK
            continue
        length, kind = struct.unpack_from("<HB", data, at + 4)
        chunk = data[at + 7:at + 7 + length]
        if len(chunk) < length:
            break  # cut short
        at += 7 + length
        record = chunk if kind in (_FULL, _FIRST) else record + chunk
        if kind in (_FULL, _LAST):
            parsed = Record.FromString(record)
            if parsed.HasField("history"):
                last = parsed.history.step.num
    return last


def _check_first_half(offline_dir: str, transaction_log: str, step: int) -> None:
    """Raise unless the saved run's records are on disk, up to its last step."""
    if not os.path.isdir(offline_dir):
        raise FileNotFoundError(f"its offline run folder is gone, with the steps logged before the save: {offline_dir}")
    last = _last_step(transaction_log)
    if last < step - 1:
        raise RuntimeError(f"only its steps up to {last} of {step - 1} reached the disk before the kernel ended "
                           "(wandb writes an offline run in 32 KiB blocks until it finishes)")


def _own_service() -> str | None:
    """The token of the wandb service this kernel started, which wandb puts in the environment
    (``WANDB_SERVICE``: version, the starting process's id, the socket) for child processes."""
    token = os.environ.get(wandb.env.SERVICE, "")
    started_by = re.match(r"\d+-(\d+)-", token)
    return token if started_by and int(started_by[1]) == os.getpid() else None


def _continue(run: Run, init: dict[str, Any], step: int, summary: dict[str, Any], offline: tuple[str, str] | None,
              was_global: bool, service: str | None) -> None:
    if service is not None and os.environ.get(wandb.env.SERVICE) == service:
        # put back with the environment the saving kernel set, but that kernel's service is gone:
        # wandb.init would try to connect to it rather than start one
        del os.environ[wandb.env.SERVICE]
    if offline is not None:
        _check_first_half(*offline, step)
    # create_new: a notebook's wandb.init finishes the active runs otherwise, and a kernel can save several
    resumed = wandb.init(**init, resume="allow", reinit="create_new")
    object.__setattr__(run, "__dict__", vars(resumed))  # past Run.__setattr__, which refuses new names once frozen
    library = run._wl
    assert library is not None  # wandb.init sets it
    library.remove_active_run(resumed)
    library.add_active_run(run)
    if was_global:
        _set_global_run(run)
    if run.step < step:  # an offline resumed run starts at step 0; an online one where the server has it
        run.log({}, step=step, commit=False)  # only moves the step: the next log() writes there
    if summary:
        run.summary.update(summary)


def _continued_run(kind: type[Run], init: dict[str, Any], step: int, summary: dict[str, Any],
                   offline: tuple[str, str] | None, was_global: bool, service: str | None) -> Run:
    run = kind.__new__(kind)
    on_commit(f"wandb run {init['id']}", partial(_continue, run, init, step, summary, offline, was_global, service))
    return run


def _finished_run(kind: type[Run], settings: Settings, config: dict[str, Any]) -> Run:
    run = kind.__new__(kind)
    Run.__init__(run, settings=settings, config=config)  # no service: a finished run only answers from its settings
    run._is_finished = True
    return run


def _reduce_run(run: Run) -> Any:
    settings = getattr(run, "_settings", None)
    if settings is None or settings._noop:
        return NotImplemented  # never initialized here, or a disabled run: wandb's own pickling does
    if run._is_attached or settings._shared:
        raise TypeError(f"wandb run {settings.run_id} cannot be saved: another process owns it (this kernel attached "
                        "to it, or shares it in shared mode); attach to it again after restore")
    config = run.config.as_dict()  # type: ignore[no-untyped-call]
    if run._is_finished:
        return _finished_run, (type(run), run.settings, config)
    init = {"id": settings.run_id, "project": settings.project, "entity": settings.entity, "group": settings.run_group,
            "job_type": settings.run_job_type, "name": settings.run_name, "notes": settings.run_notes,
            "tags": settings.run_tags, "dir": settings.root_dir, "mode": "offline" if settings._offline else "online",
            "config": config}
    # the summary's only whole read (its keys and items ask the service once per key)
    whole: dict[str, Any] = run.summary._as_dict()  # type: ignore[no-untyped-call]
    summary = {key: value for key, value in whole.items() if not key.startswith("_")}
    offline = (settings.sync_dir, settings.sync_file) if settings._offline else None
    return _continued_run, (type(run), init, run.step, summary, offline, wandb.run is run, _own_service())


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {Run: _reduce_run}
