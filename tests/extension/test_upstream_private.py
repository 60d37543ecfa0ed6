"""The private members of jupyter_server and jupyter_client that ``jupyter_gpuckpt.upstream``
uses are still there, with the signatures it calls, and the upstream methods the websocket
mirrors are unchanged: an upstream release that changes one fails here, not in a suspend."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager, KernelManager
from jupyter_server.serverapp import ServerApp
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from jupyter_gpuckpt import upstream


@pytest.mark.parametrize(("owner", "name", "parameters"), [
    (KernelManager, "_close_control_socket", ["self"]),
    (AsyncKernelManager, "_close_control_socket", ["self"]),
    (ServerApp, "_signal_stop", ["self", "sig", "frame"]),
    (ZMQChannelsWebsocketConnection, "_register_session", ["self"]),
    (ZMQChannelsWebsocketConnection, "_send_status_message", ["self", "status"]),
])
def test_each_private_member_is_there_with_its_signature(owner: Any, name: str, parameters: list[str]) -> None:
    member = getattr(owner, name)
    assert list(inspect.signature(member).parameters) == parameters
    assert inspect.iscoroutinefunction(member) == (name == "_register_session")


def test_open_connections_is_the_set_connections_join() -> None:
    connections = upstream.open_connections()
    assert connections is ZMQChannelsWebsocketConnection._open_sockets
    assert callable(connections.add) and callable(connections.discard)


@pytest.mark.parametrize("name", sorted(upstream.MIRRORED))
def test_the_mirrored_upstream_methods_are_unchanged(name: str) -> None:
    """On a failure: read upstream's new ``name``, bring ``extension/websocket.py``'s override
    in line with it, then record the new digest in ``upstream.MIRRORED``."""
    assert upstream.source_digest(getattr(ZMQChannelsWebsocketConnection, name)) == upstream.MIRRORED[name]


def test_a_changed_method_changes_its_digest() -> None:
    def connect(self: Any) -> None:
        return None

    def connect_changed(self: Any) -> None:
        return print("changed")

    assert upstream.source_digest(connect) != upstream.source_digest(connect_changed)
