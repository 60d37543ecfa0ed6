"""Taking a checkpoint of a live kernel (the save half of the Python API).

One pickling pass writes the namespace pickle while the buffers it meets are hashed and
written in the background. If some variable cannot be pickled, each variable is probed
alone (writing nothing) and the pass is redone without the failures; buffers already
stored are not hashed again. The manifest is signed and published last, so a failure at
any point leaves no checkpoint and the previous ones intact; the namespace is only read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from gpuckpt_store import (
    FORMAT_VERSION,
    BufferRecord,
    CheckpointStore,
    SaveError,
    SaveJournal,
    SaveTooLarge,
    collect_leftovers,
)

from .blobs import PICKLE_CHUNK_BYTES, BlobStore, BlobWriter, ParallelIO, PickleStream
from .blobs.buffers import BufferSink
from .codecs.arrays import OutOfBand
from .codecs.pickling import NamespacePickler, Variable, probe
from .report import SaveResult, SkippedVariable, error_text
from .state import devices, environment, kernel_state, rng, settings
from .state.lineage import cells_to_rebuild
from .state.namespace import user_variables
from .state.session import KernelSession, current

ProgressCallback = Callable[[int, "int | None"], None]
"""``progress(bytes_done, bytes_total)``; the total is None until pickling has finished."""


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


class _Pass:
    """One pickling pass over the variables, into a new pickle blob."""

    def __init__(self, store: CheckpointStore, sink: BufferSink, namespace: dict[str, Any],
                 variables: dict[str, Any], globals_: dict[str, Any]) -> None:
        self.out = OutOfBand(sink)
        self.stream = PickleStream(sink.writer, sink.io)
        self.starts: list[tuple[str | None, int]] = []
        self.pickler = NamespacePickler(
            self.stream, self.out, namespace,
            on_variable=lambda name: self.starts.append((name, self.stream.count)),
        )
        self.sizes: dict[str, int] = {}
        payload = [Variable(name, value) for name, value in variables.items()]
        payload.append(Variable(None, globals_))
        self.payload = payload

    def run(self) -> None:
        self.pickler.dump(self.payload)
        starts = self.starts
        ends = [pos for _, pos in starts[1:]] + [self.stream.count]
        for (name, start), end in zip(starts, ends, strict=True):
            if name is not None:
                self.sizes[name] = end - start
        for spec in self.out.specs:
            if spec.var is not None:
                self.sizes[spec.var] = self.sizes.get(spec.var, 0) + spec.nbytes


def _process_globals() -> dict[str, Any]:
    """The payload's last entry: what the process holds beside the variables.

    The RNG states' dict (:func:`.rng.capture`), as before settings were saved, so hooks
    that predate them still restore a newer checkpoint (without its settings), plus the
    libraries' settings (``settings``, each value a pickle of its own) and those left out
    (``settings_left_out``: what, why). Nothing in it imports a library when unpickled.
    """
    items, left_out = settings.capture()
    return {**rng.capture(), "settings": items, "settings_left_out": left_out}


def _write_namespace(store: CheckpointStore, sink: BufferSink, namespace: dict[str, Any],
                     variables: dict[str, Any], globals_: dict[str, Any], total: list[int | None]
                     ) -> tuple[_Pass, dict[str, str], list[BufferRecord], BufferRecord]:
    """Pickle ``variables``, leaving out those that cannot be pickled, and wait for the I/O.

    Returns the pass that succeeded, the failures (name: reason), the buffer records and
    the pickle's record; ``total[0]`` is set to the buffer bytes once they are known.
    """
    failures: dict[str, str] = {}
    passes: list[_Pass] = []
    try:
        while True:
            todo = {k: v for k, v in variables.items() if k not in failures}
            current = _Pass(store, sink, namespace, todo, globals_)
            passes.append(current)
            try:
                current.run()
                break
            except Exception as e:
                current.stream.discard()
                if current.stream.error is not None or len(passes) > 2:
                    raise SaveError(f"checkpoint failed while writing the namespace: {error_text(e)}") from e
                found = probe(namespace, todo, error_text)
                if not found:
                    raise SaveError(f"checkpoint failed while pickling: {error_text(e)}") from e
                failures.update(found)
        total[0] = sum(spec.nbytes for spec in current.out.specs)
        pickle_hashes = current.stream.finish()
        sink.io.wait()
        sink.writer.finish(sink.io, wait=False)  # synced while the manifest is written
        records = [p.record() for p in current.out.pending]
        pickle_record = sink.writer.record(current.stream.count, pickle_hashes, PICKLE_CHUNK_BYTES)
    except OSError as e:
        raise SaveError(f"checkpoint failed writing to {store.base}: {e.strerror or e}") from e
    finally:
        for p in passes:
            p.stream.discard()
            p.out.release()
    return current, failures, records, pickle_record


def save_checkpoint(shell: Any, store: CheckpointStore | None = None, *,
                    kernel_id: str | None = None, kernelspec: str | None = None,
                    notebook: str | None = None, progress: ProgressCallback | None = None,
                    session: KernelSession | None = None, max_bytes: int | None = None) -> SaveResult:
    """Checkpoint the kernel ``shell`` runs in; the kernel keeps running unchanged.

    Parameters
    ----------
    shell
        The kernel's ``InteractiveShell``.
    store
        Where to write; the current user's default store if omitted.
    kernel_id, kernelspec, notebook
        Recorded in the manifest, for the server's listing.
    progress
        Called from I/O threads as bytes are hashed and written.
    session
        The process's :class:`KernelSession` (its last checkpoint becomes the parent).
    max_bytes
        At most this many new bytes may be written (a staged suspend's share of host memory).

    Raises
    ------
    SaveTooLarge
        It would have written more than ``max_bytes``; nothing was published.
    SaveError
        Nothing was published; the previous checkpoints are intact.
    """
    started = time.perf_counter()
    session = session or current()
    store = store or CheckpointStore()
    store.prepare()
    collect_leftovers(store)
    try:
        journal = SaveJournal(store)
    except OSError as e:
        raise SaveError(f"cannot start a checkpoint in {store.base}: {e.strerror or e}") from e
    try:
        return _save(shell, store, journal, session, started, progress,
                     {"kernel_id": kernel_id, "kernelspec": kernelspec, "notebook": notebook}, max_bytes)
    finally:
        journal.close()


def _save(shell: Any, store: CheckpointStore, journal: SaveJournal, session: KernelSession, started: float,
          progress: ProgressCallback | None, labels: dict[str, str | None], max_bytes: int | None) -> SaveResult:
    """The save itself, while ``journal`` notes the blobs it publishes."""
    namespace = shell.user_ns
    variables = user_variables(namespace, shell.user_ns_hidden)
    state = kernel_state.capture(shell, session.baseline)
    globals_ = _process_globals()
    blobs = BlobStore(store.blobs_dir, spare=store.spare(), spare_tag=labels["kernel_id"] or "")
    writer = BlobWriter(blobs, store.chunk_locations(), journal, limit=max_bytes)
    done = [0]
    total: list[int | None] = [None]

    def on_bytes(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total[0])

    io = ParallelIO(blobs.workers, on_bytes)
    try:
        done_pass, failures, records, pickle_record = _write_namespace(
            store, BufferSink(writer, io), namespace, variables, globals_, total)
        cells = cells_to_rebuild(state.history, failures, available=namespace.keys() - failures.keys())
        skipped = [SkippedVariable(n, _type_name(variables[n]), failures[n], cells[n]) for n in failures]
        checkpoint_id = store.new_id()
        out = done_pass.out
        pickle_bytes = done_pass.stream.count
        bytes_total = pickle_bytes + sum(r.nbytes for r in records)
        manifest = {
            "format": FORMAT_VERSION,
            "id": checkpoint_id,
            "parent": session.last_checkpoint,
            "owner": store.owner,
            **labels,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "execution_count": state.execution_count,
            "kernel": state.to_json(),
            "environment": {**environment.record(done_pass.pickler.module_names()),
                            "gpus": devices.describe(out.device_bytes)},
            "devices": out.device_bytes,
            "variables": [
                {"name": name, "type": _type_name(value), "size": done_pass.sizes.get(name, 0),
                 "device": next((s.device for s in out.specs if s.var == name and s.device != "cpu"), "cpu"),
                 "status": "saved"}
                for name, value in variables.items() if name not in failures
            ] + [{"name": s.name, "type": s.type, "status": "skipped", "reason": s.reason,
                  "cells": s.cells} for s in skipped],
            "pickle": pickle_record.to_json(),
            "buffers": [
                {"kind": spec.kind, "device": spec.device, "var": spec.var, **record.to_json()}
                for spec, record in zip(out.specs, records, strict=True)
            ],
            "stats": {"bytes_total": bytes_total, "bytes_written": writer.bytes_written,
                      "seconds": round(time.perf_counter() - started, 3)},
        }
        store.commit(manifest, io.wait)
    except BaseException as e:
        # Nothing was published: take back the blobs this save wrote (a full disk needs
        # them), once the I/O threads have stopped writing.
        io.close()
        writer.remove_created()
        if writer.exceeded and not isinstance(e, SaveTooLarge):  # it surfaced wrapped, or as another error
            raise SaveTooLarge(f"the checkpoint needs more than the {max_bytes} bytes it may take") from e
        raise
    finally:
        io.close()
    parent, session.last_checkpoint = session.last_checkpoint, checkpoint_id
    return SaveResult(
        id=checkpoint_id, parent=parent, variables=len(variables) - len(failures),
        skipped=skipped, bytes_total=bytes_total, bytes_written=writer.bytes_written,
        seconds=time.perf_counter() - started, last_cell=len(state.history) - 1,
    )
