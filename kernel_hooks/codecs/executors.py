"""``concurrent.futures`` executors and ``multiprocessing`` pools: each comes back as a new
executor or pool of the same class and size, with the same initializer, and shut down or
closed if it was.

Their workers are threads or processes of the saving kernel: work still queued or running
there is not carried over. A future that has finished comes back finished, with its result,
exception or cancellation; one still pending cannot come back (nothing would ever complete
it), nor can a pool's ``AsyncResult``, and the save report says so for their variables.
Executors and pools keep their settings only in private attributes (no accessor), read here.

An executor or pool is made bare while unpickling and initialized (its workers started, at
once for a pool, on the first ``submit`` for an executor) once the restore commits (see
:func:`.live_objects.on_commit`): a restore that fails starts no thread or process.
"""

from __future__ import annotations

import sys
from concurrent.futures import Executor, Future
from functools import partial
from typing import TYPE_CHECKING, Any

from .live_objects import Reducer, on_commit

if TYPE_CHECKING:
    import multiprocessing.context
    import multiprocessing.pool
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor


def _start_executor(executor: Executor, settings: dict[str, Any], shut_down: bool) -> None:
    type(executor).__init__(executor, **settings)
    if shut_down:
        executor.shutdown(wait=False)


def _executor(kind: type[Executor], settings: dict[str, Any], shut_down: bool) -> Executor:
    executor = kind.__new__(kind)
    on_commit(f"executor {kind.__name__}", partial(_start_executor, executor, settings, shut_down))
    return executor


def _reduce_thread_pool(executor: ThreadPoolExecutor) -> Any:
    settings = {"max_workers": executor._max_workers, "thread_name_prefix": executor._thread_name_prefix,
                "initializer": executor._initializer, "initargs": executor._initargs}
    return _executor, (type(executor), settings, executor._shutdown)


def _reduce_process_pool(executor: ProcessPoolExecutor) -> Any:
    settings = {"max_workers": executor._max_workers, "mp_context": executor._mp_context,  # type: ignore[attr-defined]
                "initializer": executor._initializer, "initargs": executor._initargs,
                "max_tasks_per_child": executor._max_tasks_per_child}  # type: ignore[attr-defined]
    return _executor, (type(executor), settings, executor._shutdown_thread)


def _start_pool(pool: multiprocessing.pool.Pool, settings: dict[str, Any], state: str) -> None:
    import multiprocessing.pool

    type(pool).__init__(pool, **settings)
    if state == multiprocessing.pool.CLOSE:
        pool.close()
    elif state == multiprocessing.pool.TERMINATE:
        pool.terminate()


def _pool(kind: type[multiprocessing.pool.Pool], settings: dict[str, Any], state: str) -> multiprocessing.pool.Pool:
    import multiprocessing.pool

    pool = kind.__new__(kind)
    # What Pool.__init__ sets first: a pool dropped before it started (the restore failed)
    # is then collected quietly, where its __del__ would raise reading _state.
    pool._state = multiprocessing.pool.INIT  # type: ignore[attr-defined]
    on_commit(f"pool {kind.__name__}", partial(_start_pool, pool, settings, state))
    return pool


def _reduce_pool(pool: multiprocessing.pool.Pool) -> Any:
    import multiprocessing.pool

    settings = {"processes": pool._processes, "initializer": pool._initializer,  # type: ignore[attr-defined]
                "initargs": pool._initargs}  # type: ignore[attr-defined]
    if not isinstance(pool, multiprocessing.pool.ThreadPool):  # a ThreadPool takes only those three
        settings.update(maxtasksperchild=pool._maxtasksperchild, context=pool._ctx)  # type: ignore[attr-defined]
    return _pool, (type(pool), settings, pool._state)  # type: ignore[attr-defined]


def _reduce_context(context: multiprocessing.context.BaseContext) -> Any:
    """A start method's context: the one ``multiprocessing.get_context`` gives for it."""
    import multiprocessing

    return multiprocessing.get_context, (context.get_start_method(),)


def _finished(kind: type[Future[Any]], cancelled: bool, exception: BaseException | None, result: Any) -> Future[Any]:
    future = kind()
    if cancelled:
        future.cancel()
        future.set_running_or_notify_cancel()
    elif exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
    return future


def _reduce_future(future: Future[Any]) -> Any:
    if not future.done():
        raise TypeError("a pending concurrent.futures.Future cannot be saved: its work ends with this kernel; "
                        "submit it again after restore")
    if future.cancelled():
        return _finished, (type(future), True, None, None)
    exception = future.exception()
    return _finished, (type(future), False, exception, None if exception is not None else future.result())


def _reduce_async_result(result: Any) -> Any:
    raise TypeError(f"a multiprocessing {type(result).__name__} cannot be saved: it waits on the pool's workers, "
                    "which end with this kernel; keep its .get() in a variable instead")


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`), for the parts already imported."""
    table: dict[type, Reducer] = {Future: _reduce_future}
    if "concurrent.futures.thread" in sys.modules:
        from concurrent.futures import ThreadPoolExecutor

        table[ThreadPoolExecutor] = _reduce_thread_pool
    if "concurrent.futures.process" in sys.modules:
        from concurrent.futures import ProcessPoolExecutor

        table[ProcessPoolExecutor] = _reduce_process_pool
    if "multiprocessing.pool" in sys.modules:
        import multiprocessing.pool

        table.update({multiprocessing.pool.Pool: _reduce_pool, multiprocessing.pool.ApplyResult: _reduce_async_result,
                      multiprocessing.pool.IMapIterator: _reduce_async_result})
    if "multiprocessing.context" in sys.modules:
        import multiprocessing.context

        for name in ("ForkContext", "SpawnContext", "ForkServerContext"):  # those this platform has
            if hasattr(multiprocessing.context, name):
                table[getattr(multiprocessing.context, name)] = _reduce_context
    return table
