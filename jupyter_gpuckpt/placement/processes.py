"""Ending a kernel's whole process tree, so that no child keeps GPU memory after a suspend.

A kernel's children (DataLoader workers, multiprocessing pools, a ``subprocess`` it
started) hold GPU memory too. jupyter_client starts the kernel in a session of its own,
so its process group holds most of them; a child that started a session of its own, or a
daemon that double-forked away from its parent, is found by the environment variable every
process of the kernel inherits (:data:`TAG`). All are asked to stop (SIGTERM), then killed
(SIGKILL); what is still alive after that is reported, never ignored.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterable

import psutil

from gpuckpt_store import protocol

from ..waiting import until

TAG = protocol.KERNEL_ENV
"""Set to the kernel id in the environment of every kernel process this server starts."""
_ROUNDS = 3
"""Times the tree is looked for again: a process may start children while it is ended."""


def kernel_processes(kernel_id: str, root_pid: int | None = None) -> list[psutil.Process]:
    """The live processes of a kernel: ``root_pid``, its descendants, and this user's
    processes whose environment carries the kernel's tag."""
    found: dict[int, psutil.Process] = {}
    if root_pid is not None:
        try:
            root = psutil.Process(root_pid)
            for process in [root, *root.children(recursive=True)]:
                found[process.pid] = process
        except psutil.NoSuchProcess:
            pass
    uid = os.getuid()
    for process in psutil.process_iter(["uids"]):
        if process.pid in found or process.pid == os.getpid() or process.info["uids"] is None:
            continue
        if process.info["uids"].real != uid:
            continue
        try:
            if process.environ().get(TAG) == kernel_id:
                found[process.pid] = process
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return [p for p in found.values() if _alive(p)]


def _alive(process: psutil.Process) -> bool:
    """Running, or exiting: a zombie whose other threads are still being torn down (the
    leader of a threaded process, such as a kernel, shows as a zombie before them, and its
    parent cannot reap it yet) still counts; one whose threads are all gone does not."""
    try:
        if not process.is_running():
            return False
        return bool(process.status() != psutil.STATUS_ZOMBIE or process.num_threads() > 1)
    except psutil.NoSuchProcess:
        return False


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended or is ending: gone, or a zombie (its main thread
    ended; a killed kernel's other threads may take a moment longer, and only then can its
    parent reap it)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _signal(processes: Iterable[psutil.Process], signum: int) -> None:
    groups = set()
    for process in processes:
        try:
            groups.add(os.getpgid(process.pid))
            process.send_signal(signum)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
        except psutil.AccessDenied:
            continue  # reported below if it survives
    for group in groups - {os.getpgrp()}:
        try:
            os.killpg(group, signum)
        except (ProcessLookupError, PermissionError):
            continue


async def _wait(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``processes`` to end; those still alive.

    Not ``psutil.wait_procs``: it reaps the kernel process, which is jupyter_client's child
    (its ``Popen`` must reap it to see how it ended), and it waits for a zombie leader whose
    other threads are gone, which :func:`_alive` counts as ended."""
    alive = [p for p in processes if _alive(p)]

    def ended() -> bool:
        alive[:] = [p for p in alive if _alive(p)]
        return not alive

    await until(ended, timeout, 0.05)
    return alive


def describe(process: psutil.Process) -> str:
    """``pid 123 (python -m worker)``, for a report."""
    try:
        command = " ".join(process.cmdline()[:3]) or process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        command = "?"
    return f"pid {process.pid} ({command[:60]})"


async def end_kernel_tree(kernel_id: str, root_pid: int | None, term_timeout: float,
                          kill_timeout: float = 5.0) -> list[str]:
    """End every process of the kernel: SIGTERM, ``term_timeout`` s, SIGKILL.

    Returns
    -------
    list of str
        The processes still alive after ``kill_timeout`` s more (``describe`` of each);
        empty when the whole tree ended.
    """
    survivors: list[psutil.Process] = []
    for _ in range(_ROUNDS):
        # a scan of every process and of this user's processes' environments: off the event loop
        processes = await asyncio.to_thread(kernel_processes, kernel_id, root_pid)
        if not processes:
            return []
        _signal(processes, signal.SIGTERM)
        remaining = await _wait(processes, term_timeout)
        _signal(remaining, signal.SIGKILL)
        survivors = await _wait(remaining, kill_timeout)
        root_pid = None  # gone, or among the survivors; the tag finds what it started
    return [describe(p) for p in survivors or await asyncio.to_thread(kernel_processes, kernel_id)]
