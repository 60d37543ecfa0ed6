"""Helpers for tests against a real jupyter_server with the extension (fixtures: conftest.py)."""

from __future__ import annotations

import json
from typing import Any

KERNEL_NAME = "python3-gpuckpt"


async def start_kernel(jp_fetch: Any, name: str = KERNEL_NAME) -> str:
    response = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": name}))
    return str(json.loads(response.body)["id"])


async def api(jp_fetch: Any, *path: str, method: str = "GET", **params: str) -> Any:
    body = b"" if method == "POST" else None
    response = await jp_fetch("api", "gpuckpt", *path, method=method, params=params, body=body)
    return json.loads(response.body) if response.body else None


async def run(serverapp: Any, kernel_id: str, code: str, timeout: float = 60) -> str:
    """Run ``code`` in the kernel through a client of the server's kernel manager."""
    client = serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append(f"ERROR {msg['content']['ename']}: {msg['content']['evalue']}")

    try:
        await client.wait_for_ready(timeout=timeout)
        await client.execute_interactive(code, timeout=timeout, output_hook=hook)
    finally:
        client.stop_channels()
    return "".join(out)
