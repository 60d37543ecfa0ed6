"""Calling the in-kernel engine from the server, out of the user's sight: JSON in and out.

The server sends a request of the message type ``kernel_hooks.ipython.server_calls``
handles, naming the call and its arguments; the kernel publishes progress and then the
answer, the request as their parent (the names: :mod:`gpuckpt_store.protocol`). They are
types jupyter_server does not count as activity (:func:`.activity.untrack_server_calls`), so
the calls leave the kernel's and the server's ``last_activity`` and ``execution_state`` as
they were. Nothing is sent as source code, and nothing enters the user's history, cell count
or namespace. A kernel that has ``kernel_hooks`` but did not load it at start (its kernelspec
lacks ``--ext=kernel_hooks``) goes idle without an answer; it gets the handler registered by
one fixed silent statement, the one request that counts as the kernel's activity, and is
asked again.

Every wait has a deadline: the kernel must answer within ``ready_timeout`` (a relaunched
kernel starts in seconds), and a call must report progress, or that it is working, within
``stall_timeout`` (it reports bytes every half second while it moves them, and that it is
working every 5 s otherwise); a kernel whose process ends fails the call at once.
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from gpuckpt_store import protocol

INTERNAL_SESSION_PREFIX = "gpuckpt-"
"""Session id prefix of the server's own requests, which names them in a kernel's log."""
_POLL_SECONDS = 0.5

Progress = Callable[[int, int], None]
Alive = Callable[[], Awaitable[bool]]


class KernelCallError(Exception):
    """The kernel could not run the call: no answer in time, its process gone, or no hooks."""


async def call(km: AsyncKernelManager, function: str, /, *, ready_timeout: float, stall_timeout: float,
               alive: Alive | None = None, on_progress: Progress | None = None,
               **args: Any) -> dict[str, Any]:
    """Run ``function`` of ``kernel_hooks.ipython.server_calls`` in the kernel; its answer.

    Parameters
    ----------
    km
        The kernel's manager (its connection info is read now).
    ready_timeout
        Seconds the kernel may take to answer ``kernel_info`` (it may be starting).
    stall_timeout
        Seconds the call may go without reporting progress or that it is working.
    alive
        Whether the kernel's process still runs (default: ``km.is_alive``); checked while
        waiting, so a kernel that died fails the call at once instead of at a deadline.
    on_progress
        ``on_progress(bytes_done, bytes_total)`` as the kernel reports it.
    args
        The call's arguments (JSON).

    Returns
    -------
    dict
        ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": ..., "kind": ...}``.

    Raises
    ------
    KernelCallError
        The kernel did not answer in time, its process ended, or it has no hooks.
    """
    alive = alive or km.is_alive
    client = km.client()
    client.session.session = f"{INTERNAL_SESSION_PREFIX}{uuid.uuid4().hex}"
    # Shell and IOPub only: the kernel manager tells whether the process is alive.
    client.start_channels(stdin=False, hb=False, control=False)
    try:
        await _ready(client, ready_timeout, alive)
        answer = await _exchange(client, function, args, stall_timeout, alive, on_progress)
        if answer is None:  # idle without an answer: no handler registered
            await _register(client, ready_timeout, alive)
            answer = await _exchange(client, function, args, stall_timeout, alive, on_progress)
        if answer is None:
            raise KernelCallError("the kernel has no gpuckpt hooks (is jupyter-gpuckpt installed in the "
                                  "kernel's environment?)")
        return answer
    finally:
        client.stop_channels()


async def _ready(client: Any, timeout: float, alive: Alive) -> None:
    """Wait until the kernel answers ``kernel_info`` and IOPub delivers (as
    ``wait_for_ready`` does, but failing at once when the process ends). What IOPub still
    holds of the ``kernel_info`` is left there: :func:`_exchange` skips every message whose
    parent is not its request (draining it here cost every call 0.2 s of waiting for
    nothing: a 1.5 GB staged suspend's call took 0.60 s where the kernel saved in 0.39 to 0.44)."""
    deadline = time.monotonic() + timeout
    while True:
        client.kernel_info()
        reply = await _next(client.get_shell_msg, 1.0)
        # Any kernel_info reply will do: one to an earlier request arrives late when the
        # kernel was still starting, and each later one would then be a request behind.
        if reply is not None and reply["msg_type"] == "kernel_info_reply":
            if await _next(client.get_iopub_msg, 0.2) is not None:  # IOPub is subscribed
                break
        if not await alive():
            raise KernelCallError("the kernel's process exited before it answered")
        if time.monotonic() > deadline:
            raise KernelCallError(f"the kernel did not answer within {timeout:.0f} s")


async def _exchange(client: Any, function: str, args: dict[str, Any], stall_timeout: float, alive: Alive,
                    on_progress: Progress | None) -> dict[str, Any] | None:
    """Send the request and follow it to its reply; the answer, or None if the kernel went
    idle without one (ipykernel publishes idle after every request, known or not, and the
    reply before it)."""
    request = client.session.msg(protocol.REQUEST, {"call": function, "args": args})
    request_id = request["header"]["msg_id"]
    client.shell_channel.send(request)
    deadline = time.monotonic() + stall_timeout
    while True:
        msg = await _next(client.get_iopub_msg, _POLL_SECONDS)
        if msg is None:
            if not await alive():
                raise KernelCallError("the kernel's process exited during the call")
            if time.monotonic() > deadline:
                raise KernelCallError(f"the kernel stopped answering for {stall_timeout:.0f} s during the call")
            continue
        if msg["parent_header"].get("msg_id") != request_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == protocol.REPLY:
            return dict(content)
        if kind == "status" and content.get("execution_state") == "idle":
            return None
        if kind != protocol.PROGRESS:
            continue
        deadline = time.monotonic() + stall_timeout  # progress, or a "working" tick
        if "progress" in content and on_progress is not None:
            on_progress(int(content["progress"]["done"]), int(content["progress"]["total"]))


async def _register(client: Any, timeout: float, alive: Alive) -> None:
    msg_id = client.execute("", silent=True, store_history=False, user_expressions={"r": protocol.REGISTER})
    deadline = time.monotonic() + timeout
    while True:
        reply = await _next(client.get_shell_msg, _POLL_SECONDS)
        if reply is not None and reply["parent_header"].get("msg_id") == msg_id:
            return
        if not await alive() or time.monotonic() > deadline:
            raise KernelCallError("the kernel did not load its gpuckpt hooks")


async def _next(get: Callable[..., Awaitable[dict[str, Any]]], timeout: float) -> dict[str, Any] | None:
    try:
        return await get(timeout=timeout)
    except queue.Empty:
        return None
