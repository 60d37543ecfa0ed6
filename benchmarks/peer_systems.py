"""How each system saves and restores a kernel's variables; runs inside the bench's kernels.

``bench_peers.py`` calls these through ``exec`` with their own globals (so the user's
namespace holds only the workload), and they return JSON-able results. Every save is
durable when it returns (``fsync`` of each file and of its folder), as ours is, and every
restore reads into a kernel that has never held the data.

Peak extra memory is the kernel's resident-set high-water mark during the operation
minus its resident set just before: ``/proc/self/clear_refs`` (``5``) resets the mark,
``VmHWM`` in ``/proc/self/status`` reads it, so short peaks are not missed by sampling.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

SYSTEMS = ("ours", "dill", "torch.save", "pickle5")
"""The systems run in our own kernels; Kishu has its own kernels (see ``kishu_*``)."""


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_bytes("VmRSS")


@contextmanager
def measured(result: dict[str, Any]) -> Iterator[None]:
    """Put the block's ``seconds`` and ``peak_extra`` (bytes) into ``result``."""
    base = _reset_peak()
    started = time.perf_counter()
    yield
    result["seconds"] = time.perf_counter() - started
    result["peak_extra"] = max(0, _status_bytes("VmHWM") - base)


def _durable(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _writer(buffer: pickle.PickleBuffer) -> Callable[[BinaryIO], Any]:
    return lambda f: f.write(buffer.raw())


def _variables(shell: Any, names: list[str]) -> dict[str, Any]:
    return {name: shell.user_ns[name] for name in names}


def save(system: str, shell: Any, folder: str, names: list[str]) -> dict[str, Any]:
    """Save the kernel's variables into ``folder`` (new and empty) with ``system``."""
    out = Path(folder)
    result: dict[str, Any] = {}
    if system == "ours":
        from kernel_hooks import CheckpointStore, save_checkpoint

        with measured(result):
            saved = save_checkpoint(shell, CheckpointStore(out))
        # what the save wrote: its new chunks and its manifest
        written = saved.bytes_written + CheckpointStore(out).manifest_path(saved.id).stat().st_size
        result.update(id=saved.id, bytes_written=written, skipped=[s.name for s in saved.skipped])
        return result
    out.mkdir(parents=True)
    if system == "dill":
        import dill

        with measured(result):
            _durable(out / "session.pkl", lambda f: dill.dump_module(f, module=shell.user_module))
            _sync_dir(out)
    elif system == "torch.save":
        import torch

        with measured(result):
            _durable(out / "state.pt", lambda f: torch.save(_variables(shell, names), f))
            _sync_dir(out)
    elif system == "pickle5":
        with measured(result):
            buffers: list[pickle.PickleBuffer] = []
            _durable(out / "state.pkl", lambda f: pickle.dump(
                _variables(shell, names), f, protocol=5, buffer_callback=buffers.append))
            for i, buffer in enumerate(buffers):
                _durable(out / f"buffer-{i:06d}.bin", _writer(buffer))
            _sync_dir(out)
    else:
        raise ValueError(system)
    return result


def restore(system: str, shell: Any, folder: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """Load what :func:`save` wrote into this kernel's namespace."""
    src = Path(folder)
    result: dict[str, Any] = {}
    if system == "ours":
        from kernel_hooks import CheckpointStore, restore_checkpoint

        with measured(result):
            restore_checkpoint(shell, str(checkpoint_id), CheckpointStore(src))
    elif system == "dill":
        import dill

        with measured(result):
            dill.load_module(str(src / "session.pkl"), module=shell.user_module)
    elif system == "torch.save":
        import torch

        with measured(result):
            shell.user_ns.update(torch.load(src / "state.pt", weights_only=False))
    elif system == "pickle5":
        with measured(result):
            buffers = []
            for path in sorted(src.glob("buffer-*.bin")):
                with open(path, "rb", buffering=0) as f:
                    data = bytearray(os.fstat(f.fileno()).st_size)
                    f.readinto(data)
                buffers.append(data)
            with open(src / "state.pkl", "rb") as f:
                shell.user_ns.update(pickle.load(f, buffers=buffers))
    else:
        raise ValueError(system)
    return result


# -- Kishu (runs in kernels of Kishu's own virtual environment) ---------------------------

_commits: list[dict[str, Any]] = []
_pending: dict[str, Any] = {}


def _before_commit(result: Any) -> None:
    _pending.clear()
    _pending["base"] = _reset_peak()
    _pending["started"] = time.perf_counter()


def _after_commit(result: Any) -> None:
    if "started" in _pending:
        _commits.append({"seconds": time.perf_counter() - _pending["started"],
                         "peak_extra": max(0, _status_bytes("VmHWM") - _pending["base"])})


def kishu_attach(shell: Any, notebook: str) -> None:
    """``init_kishu`` on ``notebook``, between two hooks that time Kishu's commit.

    Kishu commits after every cell from its ``post_run_cell`` hook; IPython runs the
    hooks in the order they were registered, so ours before and after it time exactly
    that commit.
    """
    from kishu import init_kishu

    shell.events.register("post_run_cell", _before_commit)
    init_kishu(notebook)
    shell.events.register("post_run_cell", _after_commit)


def kishu_commits() -> list[dict[str, Any]]:
    """The commits timed since the last call (the cell that called this one's is not yet)."""
    done = list(_commits)
    _commits.clear()
    return done


def kishu_head(notebook: str) -> str:
    from kishu.commands import KishuCommand

    commit_id: str = KishuCommand.log(Path(notebook)).head.commit_id
    return commit_id


def kishu_checkout(shell: Any, commit_id: str) -> dict[str, Any]:
    """What ``kishu checkout`` runs in the kernel (``KishuCommand.checkout`` sends it there)."""
    result: dict[str, Any] = {}
    kishu = shell.user_ns["_kishu"]
    with measured(result):
        kishu.checkout(commit_id)
    # Detached, Kishu no longer traces (and hashes) the variables the check then reads.
    kishu.uninstall_kishu_hooks()
    return result
