"""Content-addressed blobs holding chunks: what a save writes and a restore reads back.

Every buffer (and the namespace pickle) is cut into small chunks, each named by its
BLAKE3 hash, so a chunk that any checkpoint of the owner already stored costs nothing, and
a small change to a big array rewrites only the chunks it touched. New chunks are appended
to a few *pack* blobs, one per I/O thread (:mod:`.packs`); the manifest says where each
chunk lies, as extents of consecutive chunks within a pack (``gpuckpt_store.records``).

Hashing and writing run on a small thread pool (:mod:`.parallel`; both release the GIL),
so they overlap and the disk stays busy; buffers are read and written straight from the
caller's memory (:mod:`.buffers`), never copied whole.
"""

from .folder import BlobStore
from .packs import Pack, digest_of
from .parallel import ParallelIO
from .pickle_stream import PickleStream
from .sizes import (
    CHUNK_BYTES,
    DEVICE_CHUNK_BYTES,
    LANE_BYTES,
    PACK_BYTES,
    PICKLE_CHUNK_BYTES,
    SEGMENT_BYTES,
)
from .writer import BlobWriter

__all__ = [
    "CHUNK_BYTES", "DEVICE_CHUNK_BYTES", "LANE_BYTES", "PACK_BYTES", "PICKLE_CHUNK_BYTES", "SEGMENT_BYTES",
    "BlobStore", "BlobWriter", "Pack", "ParallelIO", "PickleStream", "digest_of",
]
