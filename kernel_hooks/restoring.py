"""Restoring a checkpoint into a fresh kernel (the restore half of the Python API).

Checks run cheapest first and all before anything is unpickled: the manifest's signature
and owner, the environment (Python and library versions), the GPUs, then every blob's
hash as it is read. Buffers are read in parallel straight into their final memory (GPU
memory through pinned staging), and only when everything has loaded is the namespace
changed, so a failed restore leaves the kernel as it was and the checkpoint as it is. What
the live objects rebuilt do to the process (open a widget's comm, configure a logger, start
a pool) waits until then too (see :mod:`.codecs.live_objects`).

An object that fails to rebuild (its class changed, or its module is gone) costs only the
variables built from it: the pickle is read again, losing those (see
:mod:`.codecs.isolation`), and the report lists them with the cells that assigned them. It
lists a variable whose live part (a cluster, a comm) could not be started again the same
way, and takes it out of the namespace for ``%gpuckpt rebuild`` to make again.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from gpuckpt_store import BufferRecord, CheckpointStore, RestoreError

from .blobs import DEVICE_CHUNK_BYTES, BlobStore, ParallelIO
from .blobs.buffers import BufferSource, Staging, host_memory
from .blobs.mapped import MappedBuffers, mappable
from .blobs.sizes import readers
from .codecs import live_objects, pickling
from .report import RestoreReport, SkippedVariable
from .state import devices, environment, kernel_state, rng, settings
from .state.lineage import cells_to_rebuild
from .state.session import KernelSession, current

ProgressCallback = Callable[[int, int], None]


def _read_pickle(blobs: BlobStore, manifest: dict[str, Any], io: ParallelIO) -> Loading:
    record = BufferRecord.from_json(manifest["pickle"])
    data = memoryview(host_memory(record.nbytes))
    return data, BufferSource(blobs, io).load_host(record, data, "the namespace pickle")


Loading = tuple[Any, list[Future[None]]]
"""A buffer being read, and its reads."""


def _when_read(loading: list[Loading]) -> Iterator[Any]:
    """Each buffer once its reads are done: the unpickler takes them one by one, so it
    rebuilds objects while later buffers load."""
    for buffer, reads in loading:
        for read in reads:
            read.result()
        yield buffer.result() if isinstance(buffer, _Decoding) else buffer


class _Replayable:
    """The buffers, each kept once the unpickler has taken it, so that a second pass
    (see :func:`_unpickle`) can take them all again."""

    def __init__(self, buffers: Iterator[Any]) -> None:
        self._buffers = buffers
        self._taken: list[Any] = []

    def __iter__(self) -> Iterator[Any]:
        yield from self._taken
        for buffer in self._buffers:
            self._taken.append(buffer)
            yield buffer


class _Decoding:
    """A host buffer whose bytes its module turns into objects on the CPU (packed strings
    into ``str``): :meth:`result` waits for its reads and decodes it, once.

    The restore decodes these on its own thread before unpickling, as each is read, and
    reads them first, so the decoding overlaps the reads of every other buffer rather than
    waiting for them. Workload (d) of benchmarks/bench_peers.py (9M strings among 0.5 GB),
    cache dropped: 1.69 s against 1.91 s in fresh processes (8 interleaved runs each), 1.30
    against 1.77 s restoring again in one process; both cores are then busy, mostly with
    page faults of the new objects."""

    def __init__(self, decode: Callable[[Any], Any], memory: Any, reads: list[Future[None]]) -> None:
        self._decode = decode
        self._memory = memory
        self._reads = reads
        self._value: Any = None

    def result(self) -> Any:
        if self._memory is not None:
            for read in self._reads:
                read.result()
            self._value = self._decode(self._memory)
            self._memory = None  # the bytes can go once decoded
        return self._value


def _load_buffers(blobs: BlobStore, manifest: dict[str, Any], io: ParallelIO) -> list[Loading]:
    """Queue the reads of every buffer. Host buffers come first, into fresh memory that
    needs no library, so the disk reads them while the libraries that wrap them (torch:
    seconds) import; of those, the buffers decoded on the CPU lead (see :class:`_Decoding`).
    From a host-memory store they are mapped instead, their hashes checked through the
    mapping (:mod:`.blobs.mapped`). Device buffers follow through pinned staging."""
    source = BufferSource(blobs, io)
    mapped = MappedBuffers(blobs, io) if blobs.spare is not None else None  # a host-memory store
    entries: list[dict[str, Any]] = manifest["buffers"]
    for entry in entries:
        kind, device = entry["kind"], entry["device"]
        if kind not in _MODULES or (device == "cpu") not in _ON_HOST[kind]:
            raise RestoreError(f"the checkpoint holds a buffer of unknown kind {kind!r} on {device!r}")
    host: dict[int, tuple[Any, list[Future[None]]]] = {}
    for i in sorted(range(len(entries)), key=lambda i: entries[i]["kind"] not in _DECODED):
        if entries[i]["device"] == "cpu":
            record = BufferRecord.from_json(entries[i])
            if mapped is not None and mappable(record):
                host[i] = mapped.load(record, _what(i, entries[i]))
                continue
            memory = host_memory(record.nbytes)
            host[i] = memory, source.load_host(record, memoryview(memory), _what(i, entries[i]))
    staging: dict[str, Staging] = {}
    loading: list[Loading] = []
    for i, entry in enumerate(entries):
        kind, device = entry["kind"], entry["device"]
        module = _module(kind)
        if i in host:
            memory, reads = host[i]
            if kind in _DECODED:
                loading.append((_Decoding(module.decode, memory, reads), []))
            else:
                loading.append((module.from_host(memory), reads))
            continue
        if kind not in staging:
            staging[kind] = module.pinned_staging(DEVICE_CHUNK_BYTES)
        loading.append(module.load_device(BufferRecord.from_json(entry), device, source, _what(i, entry),
                                          staging[kind]))
    return loading


def _what(i: int, entry: dict[str, Any]) -> str:
    return f"buffer {i} of variable {entry.get('var')!r}"


def _decode_early(loading: list[Loading]) -> None:
    """Decode the buffers that need it, in the order they are read (see :class:`_Decoding`)."""
    for buffer, _ in loading:
        if isinstance(buffer, _Decoding):
            buffer.result()


_MODULES = {"numpy": "numpy_arrays", "strings": "numpy_strings", "torch": "torch_tensors", "cupy": "cupy_arrays"}
_ON_HOST = {"numpy": {True}, "strings": {True}, "torch": {True, False}, "cupy": {False}}
"""Whether each kind's buffers may be in host memory (``cpu``), on a GPU, or either."""
_DECODED = {"strings"}
"""Kinds whose module rebuilds objects from the bytes (``decode``) rather than wrapping
them (``from_host``)."""


def _module(kind: str) -> Any:
    """The support module for ``kind``, imported only now (it imports the library)."""
    try:
        return importlib.import_module(f"{__package__}.codecs.{_MODULES[kind]}")
    except ImportError as e:
        raise RestoreError(f"the checkpoint holds {kind} data but {kind} cannot be imported: {e}") from e


def _unpickle(data: Any, buffers: _Replayable
              ) -> tuple[list[Any], dict[str | None, str], live_objects.Activations]:
    """The ``(name, value)`` tuples, for the variables lost, why, and what the live objects
    kept do once the restore commits: the C unpickler first and, only if an object fails to
    rebuild, the isolating one, which loses just the variables that depend on it (the first
    pass's objects are dropped, and so are their activations).

    If the isolating pass fails too (the pickle itself is at fault) or loses the RNG states,
    the first error is raised: nothing is restored, as when any other step fails.
    """
    try:
        with live_objects.collecting() as activations:
            return pickling.load(data, buffers), {}, activations
    except (RestoreError, OSError):  # a buffer could not be read: reading again cannot help
        raise
    except Exception as first:
        try:
            with live_objects.collecting() as activations:
                variables, lost = pickling.load_isolated(data, buffers)
        except (RestoreError, OSError):
            raise
        except Exception:
            raise first from None
        if None in lost:
            raise first from None
        return variables, lost, activations


def restore_checkpoint(shell: Any, checkpoint_id: str, store: CheckpointStore | None = None, *,
                       progress: ProgressCallback | None = None,
                       session: KernelSession | None = None, comms_kept: bool = False) -> RestoreReport:
    """Restore checkpoint ``checkpoint_id`` into the kernel ``shell`` runs in.

    Parameters
    ----------
    shell
        The kernel's ``InteractiveShell``; its namespace receives the variables.
    checkpoint_id
        The id printed by ``%gpuckpt save`` or returned by :func:`save_checkpoint`.
    store
        Where to read; the current user's default store if omitted.
    progress
        ``progress(bytes_done, bytes_total)``, called from I/O threads.
    session
        The process's :class:`KernelSession`: it keeps the report, for ``%gpuckpt rebuild``.
    comms_kept
        Whether the notebook's page still holds the comms the checkpointed kernel had open (the
        server says so after a resume, whose page never saw the kernel go; see
        :data:`gpuckpt_store.protocol.COMMS_KEPT`): widgets then take their comms back without a
        ``comm_open`` and send the page their state. False (a fresh kernel, a failover, whose page
        dropped its widgets) opens them anew, which a page that kept them would take as second
        models for the same ids.

    Returns
    -------
    The report: what came back, and what did not (not saved, or not rebuilt here) with
    the cells that assigned it.

    Raises
    ------
    RestoreError
        With the reason (signature, versions, GPUs, a corrupt blob); the namespace and
        the checkpoint are untouched.

    .. versionchanged:: 0.2
       ``comms_kept``.
    """
    started = time.perf_counter()
    session = session or current()
    store = store or CheckpointStore()
    manifest = store.read_manifest(checkpoint_id)
    warnings = environment.check(manifest["environment"])
    if manifest["devices"]:
        devices.check(manifest["devices"], devices.free_memory(manifest["buffers"]))
    total = manifest["pickle"]["nbytes"] + sum(b["nbytes"] for b in manifest["buffers"])
    done = [0]

    def on_bytes(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    blobs = BlobStore(store.blobs_dir, spare=store.spare())
    io = ParallelIO(readers(total, blobs.read_workers), on_bytes)
    try:
        data, reads = _read_pickle(blobs, manifest, io)
        buffers = _load_buffers(blobs, manifest, io)
        for read in reads:
            read.result()
        _decode_early(buffers)
        payload, lost, activations = _unpickle(data, _Replayable(_when_read(buffers)))
        io.wait()
    except RestoreError:
        raise
    except OSError as e:
        raise RestoreError(f"could not read checkpoint {checkpoint_id}: {e.strerror or e}") from e
    except Exception as e:
        raise RestoreError(
            f"could not rebuild the variables of checkpoint {checkpoint_id}: {type(e).__name__}: {e}"
        ) from e
    finally:
        io.close()

    *variables, (_, globals_) = payload
    shell.user_ns.update(variables)
    state = kernel_state.KernelState.from_json(manifest["kernel"])
    warnings += kernel_state.apply(shell, state)
    # committed: the live objects may act on the process now that its working directory,
    # sys.path and environment are back (a pool's workers start in them)
    set_up = activations.run(live_objects.CommitContext(comms_kept=comms_kept))
    kept = {name for name, _ in variables}
    failed = {name: why for name, why in set_up.failed.items() if name in kept}
    failed.update(set_up.holders(variables, shell.user_ns))
    for name in failed:
        del shell.user_ns[name]  # not restored: rebuild makes it again
    warnings += set_up.unowned + [why for name, why in set_up.failed.items() if name not in kept]
    # after sys.path is back (a backend may be the user's module); older checkpoints hold
    # the RNG states alone (see saving._process_globals)
    warnings += settings.apply(globals_.get("settings", ()))
    warnings += [f"{what} was not saved: {why}" for what, why in globals_.get("settings_left_out", {}).items()]
    rng.apply(globals_)  # last: applying settings may import a library that draws
    session.last_checkpoint = checkpoint_id
    skipped = [
        SkippedVariable(v["name"], v["type"], v["reason"], v["cells"])
        for v in manifest["variables"] if v["status"] == "skipped"
    ]
    lost_here, not_set_up = _missing(manifest, state, lost, failed)
    report = RestoreReport(
        id=checkpoint_id, restored=[name for name, _ in variables if name not in failed], nbytes=total,
        skipped=skipped, lost=lost_here, warnings=warnings,
        # IPython's Out is not saved: it would keep every output alive
        had_outputs=state.outputs > 0, seconds=time.perf_counter() - started,
        started_again=[name for name in set_up.started if name in kept and name not in failed],
        not_set_up=not_set_up,
    )
    session.restored(report)
    return report


def _missing(manifest: dict[str, Any], state: kernel_state.KernelState, lost: dict[str | None, str],
             failed: dict[str, str]) -> tuple[list[SkippedVariable], list[SkippedVariable]]:
    """The variables saved but not restored: those not rebuilt (``lost``) and those whose
    live part could not be started again (``failed``), each in the checkpoint's order, with
    why and the cells that make it again."""
    if not lost and not failed:
        return [], []  # the usual case: no need to parse the history
    why = {**{name: f"could not be rebuilt: {reason}" for name, reason in lost.items() if name is not None}, **failed}
    saved = [v for v in manifest["variables"] if v["status"] == "saved"]
    cells = cells_to_rebuild(state.history, list(why), available={v["name"] for v in saved if v["name"] not in why})
    missing = [SkippedVariable(v["name"], v["type"], why[v["name"]], cells[v["name"]])
               for v in saved if v["name"] in why]
    return [v for v in missing if v.name in lost], [v for v in missing if v.name in failed]
