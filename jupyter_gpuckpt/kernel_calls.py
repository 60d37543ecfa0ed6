"""Calling the in-kernel engine from the server, out of the user's sight.

A call is a silent execute request whose only work is a user expression evaluating
``kernel_hooks.server_calls.<fn>(...)``: nothing enters the user's history, cell count or
namespace. The reply carries a JSON string back.
"""

from __future__ import annotations

import ast
import json
import queue
import time
import uuid
from collections.abc import Callable
from typing import Any

from jupyter_client.manager import AsyncKernelManager

PROGRESS_MIMETYPE = "application/vnd.jupyter-gpuckpt.progress+json"
"""What ``kernel_hooks.server_calls`` displays to report progress (must match there)."""
INTERNAL_SESSION_PREFIX = "gpuckpt-"
"""Session id prefix of the server's own requests (not user activity)."""


Progress = Callable[[int, int], None]


async def _relay_progress(client: Any, msg_id: str, on_progress: Progress | None) -> None:
    """Pass on the progress the call has displayed so far (drains the iopub queue)."""
    while True:
        try:
            msg = await client.get_iopub_msg(timeout=0)
        except queue.Empty:
            return
        data = msg["content"].get("data", {}) if msg["parent_header"].get("msg_id") == msg_id else {}
        if on_progress is not None and PROGRESS_MIMETYPE in data:
            on_progress(int(data[PROGRESS_MIMETYPE]["done"]), int(data[PROGRESS_MIMETYPE]["total"]))


class KernelCallError(Exception):
    """The kernel could not run the call (no reply, or the hooks are missing)."""


async def call(km: AsyncKernelManager, function: str, timeout: float, /,
               on_progress: Progress | None = None, **kwargs: Any) -> dict[str, Any]:
    """Evaluate ``kernel_hooks.server_calls.<function>(**kwargs)`` in the kernel; its JSON answer.

    ``on_progress(bytes_done, bytes_total)`` is called as the kernel reports progress.

    Raises
    ------
    KernelCallError
        If the kernel does not answer within ``timeout`` seconds or the call itself fails.
    """
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    expression = f"__import__('kernel_hooks.server_calls').server_calls.{function}({args})"
    client = km.client()
    client.session.session = f"{INTERNAL_SESSION_PREFIX}{uuid.uuid4().hex}"
    # Shell and IOPub only: no heartbeat thread per call (the kernel manager tells whether
    # the process is alive), nor stdin and control sockets it never uses.
    client.start_channels(stdin=False, hb=False, control=False)
    try:
        await client.wait_for_ready(timeout=timeout)
        msg_id = client.execute("", silent=True, store_history=False, user_expressions={"r": expression})
        deadline = time.monotonic() + timeout
        while True:
            await _relay_progress(client, msg_id, on_progress)
            try:
                reply = await client.get_shell_msg(timeout=0.2)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                break
    except (TimeoutError, queue.Empty) as e:
        raise KernelCallError(f"the kernel did not answer within {timeout:.0f} s") from e
    except RuntimeError as e:  # wait_for_ready: the kernel died
        raise KernelCallError(str(e)) from e
    finally:
        client.stop_channels()
    result = reply["content"].get("user_expressions", {}).get("r", {})
    if result.get("status") != "ok":
        raise KernelCallError(f"{result.get('ename', 'error')}: {result.get('evalue', reply['content'])}")
    return dict(json.loads(ast.literal_eval(result["data"]["text/plain"])))
