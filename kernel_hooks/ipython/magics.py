"""The ``%gpuckpt`` line magic (contract): ``save``, ``restore ID``, ``list`` and ``rebuild``.

``save`` prints the new checkpoint id on its last line; ``restore`` prints the report;
``rebuild`` re-runs the fewest cells that rebuild what the last restore left out: it prints
the plan (and what the cells do beyond their names) first, then what it kept and why.
Errors are shown as one clear line (no traceback) and fail the cell.
"""

from __future__ import annotations

import argparse
import shlex
import threading
import time
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display

from gpuckpt_store import CheckpointError, CheckpointStore, format_table, human_bytes, list_checkpoints

from ..rebuilding import rebuild
from ..restoring import restore_checkpoint
from ..saving import save_checkpoint
from ..state.session import KernelSession

USAGE = "usage: %gpuckpt save | restore ID | list [--store DIR] | rebuild [--keep] [--dry-run]"


class _ProgressLine:
    """A one-line display that shows bytes done once an operation has run for a second."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.started = time.monotonic()
        self.last = 0.0
        self.handle: Any = None
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.started < 1.0 or now - self.last < 0.5:
                return
            self.last = now
            of = f" of {human_bytes(total)} ({100 * done / total:.0f}%)" if total else ""
            text = f"{self.verb}: {human_bytes(done)}{of}"
            if self.handle is None:
                self.handle = display({"text/plain": text}, raw=True, display_id=True)
            else:
                self.handle.update({"text/plain": text}, raw=True)

    def finish(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": f"{self.verb}: done"}, raw=True)


class _Parser(argparse.ArgumentParser):
    """Raises a one-line UsageError where argparse would print to stderr and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; {USAGE}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%gpuckpt", add_help=False, description="Save and restore this kernel's state.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("save", "checkpoint this kernel; prints the new id last"),
                           ("restore", "restore a checkpoint into this kernel"),
                           ("list", "list checkpoints"),
                           ("rebuild", "re-run the fewest cells that rebuild what the last restore left out")):
        command = commands.add_parser(name, help=helptext, add_help=False)
        if name == "restore":
            command.add_argument("id", help="checkpoint id")
        if name == "rebuild":
            command.add_argument("--keep", action="store_true",
                                 help="restored names keep what the cells assign to them (default: discarded)")
            command.add_argument("--dry-run", action="store_true", help="print the plan only")
        else:
            command.add_argument("--store", help="store folder (default: your Jupyter data dir)")
    return parser


@magics_class
class CheckpointMagics(Magics):
    """Registers ``%gpuckpt`` for one kernel process."""

    def __init__(self, shell: Any, session: KernelSession) -> None:
        super().__init__(shell)
        self.session = session
        self.parser = _parser()

    @line_magic
    def gpuckpt(self, line: str) -> None:
        """%gpuckpt save | restore ID | list [--store DIR] | rebuild [--keep] [--dry-run]: checkpoint this
        kernel's state."""
        args = self.parser.parse_args(shlex.split(line))
        if args.command == "rebuild":
            rebuilt = rebuild(self.shell, self.session, keep=args.keep, dry_run=args.dry_run,
                              announce=lambda plan: print(plan.text(args.keep), flush=True))
            if rebuilt.failed is not None:
                raise UsageError(rebuilt.summary())
            print(rebuilt.summary())
            return
        store = CheckpointStore(args.store) if args.store else CheckpointStore()
        try:
            if args.command == "save":
                progress = _ProgressLine("Saving checkpoint")
                result = save_checkpoint(self.shell, store, progress=progress, session=self.session)
                progress.finish()
                print(result.summary())
            elif args.command == "restore":
                progress = _ProgressLine("Restoring checkpoint")
                report = restore_checkpoint(self.shell, args.id, store, progress=progress,
                                            session=self.session)
                progress.finish()
                print(report)
            else:
                print(format_table(list_checkpoints(store)))
        except CheckpointError as e:
            raise UsageError(str(e)) from None
