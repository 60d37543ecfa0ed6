"""Calling the in-kernel engine from the server, out of the user's sight.

A call is a silent execute request whose only work is a user expression evaluating
``kernel_hooks.server_calls.<fn>(...)``: nothing enters the user's history, cell count or
namespace. The reply carries a JSON string back.
"""

from __future__ import annotations

import ast
import json
import queue
import uuid
from typing import Any

from jupyter_client.manager import AsyncKernelManager

INTERNAL_SESSION_PREFIX = "gpuckpt-"
"""Session id prefix of the server's own requests (not user activity)."""


class KernelCallError(Exception):
    """The kernel could not run the call (no reply, or the hooks are missing)."""


async def call(km: AsyncKernelManager, function: str, timeout: float, /, **kwargs: Any) -> dict[str, Any]:
    """Evaluate ``kernel_hooks.server_calls.<function>(**kwargs)`` in the kernel; its JSON answer.

    Raises
    ------
    KernelCallError
        If the kernel does not answer within ``timeout`` seconds or the call itself fails.
    """
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    expression = f"__import__('kernel_hooks.server_calls').server_calls.{function}({args})"
    client = km.client()
    client.session.session = f"{INTERNAL_SESSION_PREFIX}{uuid.uuid4().hex}"
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=timeout)
        msg_id = client.execute("", silent=True, store_history=False, user_expressions={"r": expression})
        while True:
            reply = await client.get_shell_msg(timeout=timeout)
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
