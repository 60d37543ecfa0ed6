"""Where a buffer's bytes lie in the blobs: the records a manifest holds for the namespace
pickle and for every out-of-band buffer.

A buffer is cut into chunks of ``chunk`` bytes, each named by its BLAKE3 hash; chunks lie in
content-addressed blobs, as *extents* of consecutive chunks. Reading a record needs no
hashing, so the server side (listing, garbage collection) uses it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import IntegrityError
from .layout import is_digest

Extent = tuple[int, int, int]
"""``(blob index, offset in the blob, number of chunks)``: consecutive chunks of a buffer
stored one after another in one blob."""


@dataclass
class BufferRecord:
    """Where one buffer's bytes live: its size, chunk size, chunk hashes and extents."""

    nbytes: int
    chunk: int
    hashes: list[str]
    blobs: list[str]
    extents: list[Extent]

    def to_json(self) -> dict[str, Any]:
        return {"nbytes": self.nbytes, "chunk": self.chunk, "hashes": self.hashes,
                "blobs": self.blobs, "extents": [list(e) for e in self.extents]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BufferRecord:
        try:
            nbytes, chunk = int(data["nbytes"]), int(data["chunk"])
            hashes, blobs = [str(h) for h in data["hashes"]], [str(b) for b in data["blobs"]]
            extents = [(int(b), int(o), int(n)) for b, o, n in data["extents"]]
        except (KeyError, TypeError, ValueError):
            raise IntegrityError("a buffer record in the manifest is malformed") from None
        if (chunk <= 0 or nbytes < 0 or len(hashes) != -(-nbytes // chunk)
                or not all(is_digest(h) for h in hashes + blobs)
                or sum(n for _, _, n in extents) != len(hashes)
                or not all(0 <= b < len(blobs) and o >= 0 and n > 0 for b, o, n in extents)):
            raise IntegrityError("a buffer record in the manifest is malformed")
        return cls(nbytes, chunk, hashes, blobs, extents)

    @classmethod
    def build(cls, nbytes: int, chunk: int, hashes: list[str],
              locate: Callable[[str], tuple[str, int]]) -> BufferRecord:
        """The record of ``hashes``, with ``locate(hash) -> (blob, offset)``."""
        blobs: list[str] = []
        index: dict[str, int] = {}
        extents: list[list[int]] = []
        end = (-1, -1)  # (blob index, offset) right after the last extent
        for i, digest in enumerate(hashes):
            blob, offset = locate(digest)
            b = index.setdefault(blob, len(index))
            if b == len(blobs):
                blobs.append(blob)
            if (b, offset) == end:
                extents[-1][2] += 1
            else:
                extents.append([b, offset, 1])
            end = (b, offset + min(chunk, nbytes - i * chunk))
        return cls(nbytes, chunk, hashes, blobs, [(b, o, n) for b, o, n in extents])

    def locations(self) -> Iterator[tuple[str, str, int, int]]:
        """(chunk hash, blob, offset in the blob, length) of each chunk, in order."""
        i = 0
        for b, offset, count in self.extents:
            for _ in range(count):
                length = min(self.chunk, self.nbytes - i * self.chunk)
                yield self.hashes[i], self.blobs[b], offset, length
                offset += length
                i += 1

    def pieces(self, limit: int) -> Iterator[Piece]:
        """The buffer as reads of at most ``limit`` bytes, each within one extent."""
        per_piece = max(1, limit // self.chunk)
        i = 0
        for b, offset, count in self.extents:
            for first in range(0, count, per_piece):
                n = min(per_piece, count - first)
                start = (i + first) * self.chunk
                lengths = [min(self.chunk, self.nbytes - (i + first + k) * self.chunk) for k in range(n)]
                yield Piece(self.blobs[b], offset + first * self.chunk, start,
                            list(zip(self.hashes[i + first:i + first + n], lengths, strict=True)))
            i += count


@dataclass
class Piece:
    """One read: consecutive chunks of a blob, for bytes ``start`` on of a buffer."""

    blob: str
    offset: int
    start: int
    chunks: list[tuple[str, int]]
    """(hash, length) of each chunk."""

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.chunks)


def records_of(manifest: dict[str, Any]) -> list[BufferRecord]:
    """The pickle's and every buffer's record."""
    return [BufferRecord.from_json(manifest["pickle"])] + [BufferRecord.from_json(b) for b in manifest["buffers"]]


def referenced_blobs(manifest: dict[str, Any]) -> set[str]:
    return {blob for record in records_of(manifest) for blob in record.blobs}
