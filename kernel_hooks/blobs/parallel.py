"""A thread pool that hashes, writes and reads chunks while the caller goes on."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from .sizes import LANE_BYTES

Progress = Callable[[int], None]


class ParallelIO:
    """A thread pool that hashes, writes and reads chunks while the caller goes on.

    Queued chunks are views of memory that exists anyway; staged device chunks are
    bounded by their staging ring. Bytes made for the save alone (packed strings) go to a
    lane of their own, ahead of the queue, so each is freed as soon as it is written
    instead of waiting behind gigabytes of arrays. The first error is re-raised by ``wait``.
    """

    def __init__(self, workers: int, progress: Progress | None = None) -> None:
        self._workers = workers
        self._queued: deque[tuple[Future[Any], int]] = deque()
        self._queued_bytes = 0
        self._futures: list[Future[Any]] = []
        self._progress = progress
        self._progress_lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0, ahead: bool = False) -> Future[Any]:
        """Run ``fn(*args)`` on the pool, or with ``ahead`` on the lane for made bytes."""
        pool = _pool(1, "gpuckpt-io-made") if ahead else _pool(self._workers, "gpuckpt-io")
        future = pool.submit(fn, *args)
        if self._progress is not None:
            future.add_done_callback(lambda f: self._finished(f, nbytes))
        self._futures.append(future)
        if ahead:
            self._hold_back(future, nbytes)
        return future

    def _hold_back(self, future: Future[Any], nbytes: int) -> None:
        """Wait while the lane has more than :data:`LANE_BYTES` to write: the thread that
        makes the bytes (holding the GIL) otherwise outruns the one writing them."""
        self._queued.append((future, nbytes))
        self._queued_bytes += nbytes
        while self._queued and (self._queued[0][0].done() or self._queued_bytes > LANE_BYTES):
            oldest, n = self._queued.popleft()
            wait([oldest])
            self._queued_bytes -= n

    def _finished(self, future: Future[Any], nbytes: int) -> None:
        if self._progress is not None and not future.cancelled() and future.exception() is None:
            with self._progress_lock:  # callers keep running totals
                self._progress(nbytes)

    def wait(self) -> None:
        """Wait for everything submitted so far; re-raise the first error (what has not
        finished then is still waited for by :meth:`close`)."""
        futures, self._futures = self._futures, []
        try:
            for future in futures:
                future.result()
        except BaseException:
            self._futures[:0] = [f for f in futures if not f.done()]
            raise

    def close(self) -> None:
        """Cancel what has not started and wait for what has; the threads stay for the
        next save or restore."""
        for future in self._futures:
            future.cancel()
        wait(self._futures)
        self._futures.clear()


_POOLS: dict[tuple[int, str], ThreadPoolExecutor] = {}
"""This process's thread pools, by size and role."""
_POOLS_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_POOLS.clear)  # a forked child has none of their threads


def _pool(workers: int, name: str) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads for ``name``, made on first use and kept
    for the kernel's later saves and restores: starting and stopping their own threads took
    a small save 5 to 10 ms on 2 busy cores, each start waiting for the new thread to run."""
    with _POOLS_LOCK:
        pool = _POOLS.get((workers, name))
        if pool is None:
            pool = _POOLS[workers, name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool
