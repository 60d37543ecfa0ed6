"""Threading locks, conditions and events inside plain state, and threads, which cannot
come back.

A lock guards state against the kernel's other threads, and those end with the kernel:
every lock comes back as a new one of the same kind, unlocked, and a condition as a new
condition over its (new) lock with no thread waiting. So objects that only hold locks
(queues, semaphores, barriers, and the tqdm bars and logging handlers whose codecs build on
this one) pickle with the rest of their state. A thread cannot be saved at all: the save
report says so rather than naming one of its locks.
"""

from __future__ import annotations

import threading
from typing import Any

from .live_objects import Reducer


def _reduce_lock(lock: Any) -> Any:
    return threading.Lock, ()


def _reduce_rlock(lock: Any) -> Any:
    return threading.RLock, ()


def _reduce_condition(condition: threading.Condition) -> Any:
    # A Condition keeps its lock in ``_lock`` only (no accessor); its waiters, in
    # ``_waiters``, are threads of the saving kernel and are left behind.
    return type(condition), (condition._lock,)  # type: ignore[attr-defined]


def _event(kind: type[threading.Event], is_set: bool) -> threading.Event:
    event = kind()
    if is_set:
        event.set()
    return event


def _reduce_event(event: threading.Event) -> Any:
    return _event, (type(event), event.is_set())


def _reduce_thread(thread: threading.Thread) -> Any:
    raise TypeError(f"a thread ({thread.name}) cannot be saved: threads end with the kernel; start it again after "
                    "restore")


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {
        type(threading.Lock()): _reduce_lock,
        type(threading.RLock()): _reduce_rlock,
        threading.Condition: _reduce_condition,
        threading.Event: _reduce_event,
        threading.Thread: _reduce_thread,
    }
