"""Which cells a kernel ran, seen on its IOPub stream, to name those a failure loses."""

from __future__ import annotations

from typing import Any

from jupyter_client.session import Session


class ExecutionWatcher:
    """Follows the ``execute_input`` messages of the kernels it watches."""

    def __init__(self) -> None:
        self.cells: dict[str, list[int]] = {}
        self._streams: dict[str, Any] = {}

    def watch(self, kernel_id: str, km: Any) -> None:
        """Start following ``km``'s IOPub (once per kernel; the stream survives restarts
        on the same ports, and is made again when the kernel moves)."""
        if kernel_id in self._streams:
            return
        stream = km.connect_iopub()
        session = Session(key=km.session.key)
        counts = self.cells.setdefault(kernel_id, [])

        def on_message(parts: list[bytes]) -> None:
            _, frames = session.feed_identities(parts)
            msg = session.deserialize(frames, content=False)
            if msg["header"]["msg_type"] == "execute_input":
                counts.append(int(session.unpack(msg["content"])["execution_count"]))

        stream.on_recv(on_message)
        self._streams[kernel_id] = stream

    def ran_after(self, kernel_id: str, cell: int) -> list[int]:
        """The cells run after ``cell``, in order, without repeats."""
        return sorted({c for c in self.cells.get(kernel_id, []) if c > cell})

    def forget(self, kernel_id: str, keep_cells: bool = False) -> None:
        """Stop following the kernel (``keep_cells``: it moved, and is followed again)."""
        if not keep_cells:
            self.cells.pop(kernel_id, None)
        stream = self._streams.pop(kernel_id, None)
        if stream is not None:
            stream.close()

    def close(self) -> None:
        for kernel_id in list(self._streams):
            self.forget(kernel_id)

    def watching(self) -> set[str]:
        return set(self._streams)
