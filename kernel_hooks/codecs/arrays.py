"""Array and tensor data out of band of the pickle: numpy, torch, cupy, jax and pyarrow.

The pickler hands each big buffer to :class:`OutOfBand` as a :class:`Slot` wrapped in a
``pickle.PickleBuffer``; protocol 5 then writes only a ``NEXT_BUFFER`` marker into the
pickle, and the loader supplies the buffers, read back in parallel, in the same order.
Views keep pointing into one shared buffer (numpy arrays into their base array, tensors
into their storage), so objects that shared memory before the checkpoint still share it.
Support for each library loads only when the user's code has already imported it
(:mod:`.reducer_table`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from ..blobs.buffers import BufferSink, PendingBuffer, Staging, StagingSlot

INLINE_BYTES = 64 << 10
"""Buffers smaller than this stay inside the pickle: a blob each would cost more."""

Reduction = Any


@dataclass
class BufferSpec:
    """What the loader must allocate for one out-of-band buffer (stored in the manifest)."""

    kind: str  # "numpy", "torch" or "cupy"
    device: str  # "cpu" or "cuda:<index in the saving kernel>"
    nbytes: int
    var: str | None


class Slot:
    """One buffer to go out of band, created once per underlying memory block."""

    def __init__(self, spec: BufferSpec, store: Callable[[BufferSink], PendingBuffer]) -> None:
        self.spec = spec
        self.store = store


def _loaded(buffer: Any) -> Any:
    """Rebuild a :class:`Slot`: the loader has already put the finished object there."""
    return buffer


class OutOfBand:
    """Collects a pickling pass's out-of-band buffers, in ``NEXT_BUFFER`` order.

    With no ``sink`` it only records them: that is the cheap trial pass used to find
    which variables cannot be pickled.
    """

    def __init__(self, sink: BufferSink | None) -> None:
        self.sink = sink
        self.specs: list[BufferSpec] = []
        self.pending: list[PendingBuffer] = []
        self.current_var: str | None = None
        self._slots: dict[Any, tuple[Any, Slot]] = {}
        self._by_picklebuffer: dict[int, tuple[pickle.PickleBuffer, Slot]] = {}
        self._staging: dict[str, Staging] = {}
        self._counted: set[Any] = set()
        self.device_bytes: dict[str, int] = {}
        """Bytes held on each GPU (``cuda:<i>``): what a restoring kernel must have free."""

    def note_device(self, key: Any, device: str, nbytes: int) -> None:
        """Count memory block ``key`` (once) towards what ``device`` must hold."""
        if key not in self._counted:
            self._counted.add(key)
            self.device_bytes[device] = self.device_bytes.get(device, 0) + nbytes

    def memo(self, key: Any, owner: Any, make: Callable[[], Any]) -> Any:
        """One object per ``key`` for this pass, so the pickler memoizes and shares it.

        ``owner`` is kept alive for the pass, so an ``id()`` in ``key`` cannot be reused.
        """
        hit = self._slots.get(key)
        if hit is None:
            hit = self._slots[key] = (owner, make())
        return hit[1]

    def staging(self, device: str, make: Callable[[], Staging]) -> Staging:
        if device not in self._staging:
            self._staging[device] = make()
        return self._staging[device]

    def reduce_slot(self, slot: Slot) -> Reduction:
        # An empty, writable marker: the pickle only records where the buffer goes, and a
        # read-only one would make the loader wrap what it is given in a memoryview.
        buffer = pickle.PickleBuffer(bytearray())
        self._by_picklebuffer[id(buffer)] = (buffer, slot)
        return _loaded, (buffer,)

    def release(self) -> None:
        """Let go of the pass's slots and the memory they keep alive."""
        self._by_picklebuffer.clear()
        self._slots.clear()

    def buffer_callback(self, buffer: pickle.PickleBuffer) -> bool:
        """Called by the pickler; False sends the buffer out of band."""
        hit = self._by_picklebuffer.get(id(buffer))
        if hit is None:
            return True  # another library's protocol-5 buffer: keep it in band
        slot = hit[1]
        slot.spec.var = self.current_var
        self.specs.append(slot.spec)
        if self.sink is not None:
            self.pending.append(slot.store(self.sink))
        return False


def host_slot(out: OutOfBand, key: Any, owner: Any, kind: str, view: memoryview, made: bool = False) -> Slot:
    """A slot for host memory ``view`` (1-D bytes), written straight from memory.

    ``made``: bytes made for this save alone (packed strings). The slot lets go of them once
    it hands them to the writer, which writes them ahead of the queue, so each is freed as
    soon as it is written rather than when the save ends (a 1 GB frame's strings make
    125 MB of them).
    """
    nbytes, held = len(view), [view]

    def make() -> Slot:
        spec = BufferSpec(kind, "cpu", nbytes, None)
        return Slot(spec, lambda sink: sink.cached(key) or sink.add_host(key, owner, held.pop(), made))

    return cast(Slot, out.memo(key, owner, make))


def staged_slot(out: OutOfBand, key: Any, owner: Any, kind: str, device: str, nbytes: int,
                copy_out: Callable[[int, int, StagingSlot], None],
                make_staging: Callable[[], Staging]) -> Slot:
    """A slot for device memory, copied to the host one staging slot at a time.

    The staging ring is made when the slot is stored, not when the buffer is met: the trial
    pass that finds which variables cannot be pickled stores nothing, so a ring that cannot be
    made (or a copy that fails) fails the save instead of passing for the variable's fault and
    leaving it out of the checkpoint.
    """
    def make() -> Slot:
        spec = BufferSpec(kind, device, nbytes, None)
        return Slot(spec, lambda sink: sink.add_device(key, owner, nbytes, copy_out,
                                                       out.staging(device, make_staging)))

    return cast(Slot, out.memo(key, owner, make))
