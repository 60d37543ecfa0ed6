"""Which cells a kernel ran, seen on its IOPub stream: to name those a failure loses, and
the user's pauses between cells, the rhythm the policy may take its idle limit from."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from jupyter_client.session import Session

GAPS_KEPT = 50
"""Pauses kept per kernel: its recent rhythm, not its whole history."""
USER_GAPS_KEPT = 20
"""Pauses kept over all the server's kernels (its user's): their rhythm now, for a kernel that
has not paused often enough to have its own."""


class ExecutionWatcher:
    """Follows the cells (``execute_input``, and the ``idle`` status that ends each) of the
    kernels it watches."""

    def __init__(self) -> None:
        self.cells: dict[str, list[int]] = {}
        self.gaps: dict[str, deque[float]] = {}
        """Per kernel, the seconds between the end of a cell and the start of the next."""
        self.user_gaps: deque[float] = deque(maxlen=USER_GAPS_KEPT)
        """The same over every kernel of the server, the latest last."""
        self._streams: dict[str, Any] = {}
        self._cell_ended: dict[str, float] = {}

    def watch(self, kernel_id: str, km: Any) -> None:
        """Start following ``km``'s IOPub (once per kernel; the stream survives restarts
        on the same ports, and is made again when the kernel moves)."""
        if kernel_id in self._streams:
            return
        stream = km.connect_iopub()
        session = Session(key=km.session.key)
        counts = self.cells.setdefault(kernel_id, [])
        gaps = self.gaps.setdefault(kernel_id, deque(maxlen=GAPS_KEPT))
        running: set[str] = set()

        def on_message(parts: list[bytes]) -> None:
            _, frames = session.feed_identities(parts)
            msg = session.deserialize(frames, content=False)
            kind = msg["header"]["msg_type"]
            if kind == "execute_input":
                counts.append(int(session.unpack(msg["content"])["execution_count"]))
                ended = self._cell_ended.get(kernel_id)
                if ended is not None:
                    gaps.append(time.time() - ended)
                    self.user_gaps.append(gaps[-1])
                running.add(msg["parent_header"].get("msg_id", ""))
            elif kind == "status" and msg["parent_header"].get("msg_id") in running:
                if session.unpack(msg["content"]).get("execution_state") == "idle":
                    running.discard(msg["parent_header"]["msg_id"])
                    self._cell_ended[kernel_id] = time.time()

        stream.on_recv(on_message)
        self._streams[kernel_id] = stream

    def ran_after(self, kernel_id: str, cell: int) -> list[int]:
        """The cells run after ``cell``, in order, without repeats."""
        return sorted({c for c in self.cells.get(kernel_id, []) if c > cell})

    def forget(self, kernel_id: str, keep_cells: bool = False) -> None:
        """Stop following the kernel (``keep_cells``: it moved, and is followed again)."""
        if not keep_cells:
            self.cells.pop(kernel_id, None)
            self.gaps.pop(kernel_id, None)
            self._cell_ended.pop(kernel_id, None)
        stream = self._streams.pop(kernel_id, None)
        if stream is not None:
            stream.close()

    def close(self) -> None:
        for kernel_id in list(self._streams):
            self.forget(kernel_id)

    def watching(self) -> set[str]:
        return set(self._streams)
