"""Helpers for tests against a real jupyter_server with the extension (fixtures: conftest.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psutil

from jupyter_gpuckpt.placement.kernelspec import slurm_config

KERNEL_NAME = "python3-gpuckpt"
FAST_KERNEL_NAME = "python3-gpuckpt-fast"
"""A kernelspec whose metadata overrides the idle timeout to 1 s."""
SLURM_KERNELSPECS = {"python3-gpuckpt-slurm": slurm_config("gpu", gpus=1),
                     "python3-gpuckpt-far": slurm_config("far", gpus=1),
                     "python3-gpuckpt-wide": slurm_config("wide", gpus=1)}
"""Kernelspecs whose kernels are jobs on the Slurm test cluster (tests/slurm_testbed): in
partition gpu (node1, node2), far (node3, in its own network namespace), wide (all three)."""


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
        for attempt in range(3):
            try:
                await client.wait_for_ready(timeout=timeout)
                break
            except RuntimeError:  # ipykernel 7 can crash while starting; the server restarts it
                if attempt == 2:
                    raise
                await asyncio.sleep(3)
        await client.execute_interactive(code, timeout=timeout, output_hook=hook)
    finally:
        client.stop_channels()
    return "".join(out)


def ws_request(msg_type: str, content: dict[str, Any], channel: str = "shell") -> tuple[str, str]:
    """A kernel message for the (legacy JSON) websocket protocol, and its msg_id."""
    msg_id = uuid.uuid4().hex
    msg = {
        "header": {"msg_id": msg_id, "msg_type": msg_type, "username": "test", "session": "test-session",
                   "date": "", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "content": content, "channel": channel, "buffers": [],
    }
    return json.dumps(msg), msg_id


async def ws_execute(ws: Any, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Send an execute request; return its reply and every iopub message it caused."""
    text, msg_id = ws_request("execute_request", {"code": code, "silent": False, "store_history": True,
                                                  "user_expressions": {}, "allow_stdin": False})
    await ws.write_message(text)
    iopub: list[dict[str, Any]] = []
    reply = None
    idle = False  # the reply and the iopub messages come on different channels, in either order
    while reply is None or not idle:
        raw = await asyncio.wait_for(ws.read_message(), timeout)
        msg = json.loads(raw)
        ours = msg["parent_header"].get("msg_id") == msg_id
        if not ours and msg["msg_type"] != "status":
            continue
        if msg["channel"] == "iopub":
            iopub.append(msg)
            idle = idle or (ours and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle")
        elif msg["msg_type"] == "execute_reply":
            reply = msg
    return reply, iopub


@asynccontextmanager
async def loop_stalls() -> AsyncIterator[list[float]]:
    """Measure, while inside, how long the event loop is away at most: the list holds the
    gaps between 20 ms ticks (its max is the longest stall)."""
    loop = asyncio.get_running_loop()
    gaps, ticking = [0.0], True

    async def ticker() -> None:
        while ticking:
            before = loop.time()
            await asyncio.sleep(0.02)
            gaps.append(loop.time() - before)

    ticks = asyncio.ensure_future(ticker())
    try:
        yield gaps
    finally:
        ticking = False
        await ticks


def write_behind_writers(checkpoint_id: str) -> list[psutil.Process]:
    """The write-behind processes writing ``checkpoint_id`` to the store now."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "kernel_hooks.write_behind" in cmdline and checkpoint_id in cmdline:
            found.append(process)
    return found
