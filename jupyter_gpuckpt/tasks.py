"""Background work of the extension, tracked: failures are logged with their traceback,
and everything still running is cancelled (and awaited) when the server stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """The extension's running tasks, by name (a task started under a name already running
    runs beside it; names are for the log)."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.log = log
        self._tasks: dict[asyncio.Task[Any], str] = {}
        self._stopping = False

    def start(self, name: str, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` in the background; its failure is logged, never lost."""
        if self._stopping:
            work.close()
            raise RuntimeError("the extension is stopping")
        task = asyncio.get_running_loop().create_task(work, name=f"gpuckpt {name}")
        self._tasks[task] = name
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        name = self._tasks.pop(task, "?")
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.log.error("gpuckpt: %s failed", name, exc_info=error)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called: no task may start any more."""
        return self._stopping

    def running(self) -> list[str]:
        return sorted(self._tasks.values())

    async def stop(self) -> None:
        """Cancel every task and wait until each has ended (its cleanup included)."""
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
