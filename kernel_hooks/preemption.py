"""Checkpoint on SIGTERM, then exit: what a kernel in a preemptible Slurm partition needs.

Slurm starts a preempted job's grace time with SIGTERM and ends it with SIGKILL. A kernel
whose environment names an exit-note file in :data:`gpuckpt_store.protocol.ON_TERM_ENV` (the server sets it for Slurm
kernels, with ``$JUPYTER_GPUCKPT_STORE``, :data:`~gpuckpt_store.protocol.KERNEL_ENV` and optionally
:data:`~gpuckpt_store.protocol.KERNELSPEC_ENV`) uses that time
to checkpoint itself, writes the note (:func:`write_note`) and exits with status 0 (1 if the
note cannot be written, which then goes to stderr). Without the variable :func:`arm` does
nothing and SIGTERM ends the kernel as before.

What the handler does depends on what the main thread (where Python runs signal handlers)
was doing when the signal came:

* running a cell's code: the cell is interrupted there, like Ctrl-C, with
  :class:`KernelTerminated`; once IPython has shown it as the cell's error and the cell has
  ended (``post_run_cell``), the namespace as the interruption left it is saved.
* anything else (idle, a server call such as a save or restore, a silent
  execution, a top-level-``await`` cell waiting): the save runs from the event loop as soon
  as the main thread is back there, which is at once when the kernel is idle. A server
  call is never cut off: an interrupted restore would leave a half-restored namespace to
  checkpoint, and an interrupted save would waste what it wrote; the price is that a call
  longer than the grace time ends in SIGKILL with no note. A cell that runs but was caught
  in IPython's own code around it (compiling, say) is signalled again shortly.

A note that already exists when SIGTERM comes was written by the server, which ended the
run itself (a suspend or a shutdown, after its own checkpoint): the kernel then exits at once.
Further SIGTERMs during the save are ignored; one while an interrupted cell still runs
(its code caught the interrupt) interrupts it again. A cell stuck in one long call into C
code cannot be interrupted before that call returns, and cells of ipykernel subshells (other
threads) are not interrupted at all: the save does not wait for them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import IPython
from IPython.core.interactiveshell import InteractiveShell

from gpuckpt_store import STORE_ENV, CheckpointStore, protocol

from .report import error_text
from .saving import save_checkpoint

RETRY_SECONDS = 0.05
"""A running cell caught outside its own code is signalled again after this long."""
OUTPUT_SECONDS = 0.1
"""Time given to ipykernel's IOPub thread to send the last output before the process ends."""

_RUN_CODE = InteractiveShell.run_code.__code__
"""IPython runs a cell's code right under this frame; an exception raised there ends the cell."""


class KernelTerminated(KeyboardInterrupt):
    """Raised into the running cell: a KeyboardInterrupt, so ``except Exception`` in the
    user's code does not swallow it."""


def write_note(path: Path, note: dict[str, Any]) -> None:
    """Write ``note`` as JSON to ``path``, atomically (the server may read it at any time),
    readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)  # the file may have existed with another mode
        json.dump(note, f)
        f.flush()
        os.fsync(fd)
    os.replace(tmp, path)


def _in_cell_code(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs a cell's code (or what it called), below IPython's ``run_code``."""
    while frame is not None and frame.f_back is not None:
        if frame.f_back.f_code is _RUN_CODE:
            return True
        frame = frame.f_back
    return False


class _Preemption:
    """The armed handler and the cell bookkeeping it needs, for one kernel process."""

    def __init__(self, shell: Any, note: Path) -> None:
        self.shell = shell
        self.note = note
        self.store = os.environ.get(STORE_ENV) or None
        self.kernel_id = os.environ.get(protocol.KERNEL_ENV) or None
        self.kernelspec = os.environ.get(protocol.KERNELSPEC_ENV) or None
        self.cells: list[tuple[Any, int | None]] = []
        """Running cells, outermost first: IPython's ExecutionInfo and the cell's number
        (None for cells outside the history, such as a rebuild's)."""
        self.signal_at: float | None = None
        self.interrupted = False
        self.interrupted_cell: int | None = None
        self.finishing = False
        self.ahead = 1 if IPython.version_info[0] >= 9 else 0
        """How far ``execution_count`` is ahead of the running cell's number at pre_run_cell
        (IPython 9 counts the cell before it runs, 8 after); learnt from each cell's result."""

    def pre_run_cell(self, info: Any) -> None:
        if threading.current_thread() is threading.main_thread():  # a subshell's cell cannot be interrupted
            self.cells.append((info, self.shell.execution_count if info.store_history else None))

    def post_run_cell(self, result: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        # An empty cell ends without having started: its info was never pushed.
        if self.cells and (result is None or self.cells[-1][0] is result.info):
            _, counted = self.cells.pop()
            number = getattr(result, "execution_count", None)
            if counted is not None and isinstance(number, int):
                self.ahead = counted - number
                if self.interrupted and not self.cells:  # the interrupted cell's own number
                    self.interrupted_cell = number
        if self.interrupted:
            self._finish_soon()

    def _number(self, counted: int | None) -> int | None:
        """A running cell's number, from ``execution_count`` as pre_run_cell saw it."""
        return None if counted is None else counted - self.ahead

    def _finish_soon(self) -> None:
        """Finish from the event loop: after the interrupted cell's reply has gone out (the
        frontend then shows the cell as ended, with its error), or at once without a loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop to come back to (IPython without ipykernel)
            self.finish()
        else:
            loop.call_soon_threadsafe(self.finish)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.note.exists():  # the server ended this run itself (a suspend, a shutdown): nothing to save
            os._exit(0)
        if self.signal_at is None:
            self.signal_at = time.time()
        if self.cells and _in_cell_code(frame):
            self.interrupted = True
            self.interrupted_cell = self._number(self.cells[0][1])
            raise KernelTerminated("the kernel was asked to stop (SIGTERM): it saves a checkpoint and exits")
        if self.cells:
            threading.Timer(RETRY_SECONDS, os.kill, (os.getpid(), signal.SIGTERM)).start()
        self._finish_soon()

    def finish(self) -> None:
        """Save, write the note, exit; a second call (a retry's loop callback) does nothing."""
        if self.finishing:
            return
        self.finishing = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # Not interrupted: a top-level-await cell may still be waiting; it ends here.
        cell = self.interrupted_cell if self.interrupted else (self._number(self.cells[0][1]) if self.cells else None)
        checkpoint_id = last_cell = error = None
        try:
            saved = save_checkpoint(self.shell, CheckpointStore(self.store), kernel_id=self.kernel_id,
                                    kernelspec=self.kernelspec)
            checkpoint_id, last_cell = saved.id, saved.last_cell
        except BaseException as e:  # the server must hear of any failure, and the process still ends
            error = error_text(e)
        note = {"reason": "terminated", "checkpoint_id": checkpoint_id, "last_cell": last_cell,
                "interrupted_cell": cell, "error": error, "signal_at": self.signal_at, "saved_at": time.time()}
        status = 0
        try:
            write_note(self.note, note)
        except OSError as e:
            print(f"jupyter-gpuckpt: cannot write the exit note {self.note}: {e}", file=sys.__stderr__)
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(OUTPUT_SECONDS)
        os._exit(status)


_armed: _Preemption | None = None


def arm(shell: Any) -> None:
    """Checkpoint and exit on SIGTERM if ``$JUPYTER_GPUCKPT_ON_TERM`` names an exit note
    (``load_ipython_extension`` calls it, in the main thread); otherwise, or if already
    armed, do nothing."""
    global _armed
    note = os.environ.get(protocol.ON_TERM_ENV)
    if not note or _armed is not None:
        return
    _armed = _Preemption(shell, Path(note))
    shell.events.register("pre_run_cell", _armed.pre_run_cell)
    shell.events.register("post_run_cell", _armed.post_run_cell)
    signal.signal(signal.SIGTERM, _armed.on_sigterm)
