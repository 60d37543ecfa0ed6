"""The private members of jupyter_server and jupyter_client this project relies on, in one
place, each with the reason no public hook serves. ``tests/extension/test_upstream_private.py`` fails
when an upstream release changes one of them (or a method the websocket mirrors), so that
it is looked at before it breaks a suspend.

``MIRRORED`` records, for the upstream methods ``extension/websocket.py`` overrides in part,
the digest of their source as of the version it was written against: the override of
``connect`` repeats its stream wiring for a kernel that is away, and must follow it.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

MIRRORED = {
    "connect": "5940937f5a42e9c6",
    "prepare": "bb7a3442913cb04e",
}
"""``ZMQChannelsWebsocketConnection`` methods, by name: the first 16 hex digits of the
sha256 of their source in jupyter_server 2.21.1."""


def source_digest(method: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(method).encode()).hexdigest()[:16]


def close_control_socket(km: Any) -> None:
    """jupyter_client keeps one control socket per kernel manager, connected once, and has no
    public way to reconnect it: closing it makes the next shutdown or interrupt connect to
    where the kernel listens now (a resume on another node)."""
    km._close_control_socket()


def stop_server(serverapp: Any) -> Callable[[int, Any], None]:
    """jupyter_server's handler of SIGTERM, which stops extensions and kernels cleanly; it has
    no public name, and SIGINT must do the same when the server has no terminal."""
    handler: Callable[[int, Any], None] = serverapp._signal_stop
    return handler


def open_connections() -> Any:
    """Every open kernel websocket connection: jupyter_server tracks them in a class-level set
    and offers no other way to find a kernel's connections when it moves."""
    return ZMQChannelsWebsocketConnection._open_sockets


async def register_session(connection: ZMQChannelsWebsocketConnection) -> None:
    """What ``prepare`` does besides waiting for the kernel to answer, which an away kernel
    cannot do: no public step registers the session alone."""
    await connection._register_session()


def send_status(connection: ZMQChannelsWebsocketConnection, status: str) -> None:
    """A kernel status message to this page alone (``busy`` while a resume runs): the one way
    jupyter_server writes a status message that did not come from the kernel."""
    connection._send_status_message(status)
