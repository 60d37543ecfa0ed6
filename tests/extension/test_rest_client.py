"""The project's one HTTP client against a real jupyter_server that wants no token: POSTs
carry the XSRF cookie it sets, errors carry the server's own message, and a server that is
not there says so in the system's words."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from jupyter_gpuckpt.rest_client import RestClient, RestError


@pytest.fixture
def jp_server_config(jp_server_config: Any) -> Any:
    jp_server_config["ServerApp"]["token"] = ""  # not IdentityProvider's: pytest-jupyter fills an empty one
    return jp_server_config


@pytest.fixture
def url(jp_fetch: Any, jp_http_port: int, jp_base_url: str) -> str:
    """Where the test's server listens (jp_fetch makes it listen on jp_http_port)."""
    return f"http://localhost:{jp_http_port}{jp_base_url}"


async def test_a_post_without_a_token_carries_the_xsrf_cookie(jp_serverapp: Any, url: str) -> None:
    client = RestClient(url)
    try:
        kernel = await client.json("POST", "api/kernels", body={"name": "python3"})
        assert kernel["name"] == "python3" and kernel["id"] in jp_serverapp.kernel_manager
        assert (await client.fetch("DELETE", f"api/kernels/{kernel['id']}")).code == 204
    finally:
        client.close()

    bare = RestClient(url)
    bare._xsrf = ""  # as if the server had set no cookie: the POST goes without one
    try:
        with pytest.raises(RestError) as refused:
            await bare.json("POST", "api/kernels", body={"name": "python3"})
    finally:
        bare.close()
    assert refused.value.code == 403 and "(HTTP 403)" in refused.value.message


async def test_an_http_error_keeps_the_servers_message(url: str) -> None:
    client = RestClient(url)
    try:
        with pytest.raises(RestError) as missing:
            await client.json("GET", "api/kernels/00000000-0000-0000-0000-000000000000")
        answer = await client.fetch("GET", "api/kernels/00000000-0000-0000-0000-000000000000", errors=False)
    finally:
        client.close()
    assert missing.value.code == 404 and missing.value.said and "00000000" in missing.value.said
    assert missing.value.message == f"{missing.value.said} (HTTP 404)"
    assert answer.code == 404 and answer.message == missing.value.said


async def test_a_server_that_is_not_there_says_so() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RestClient(f"http://127.0.0.1:{port}/", name="the test server")
    try:
        with pytest.raises(RestError) as gone:
            await client.json("GET", "api/status")
    finally:
        client.close()
    assert gone.value.code is None and gone.value.reason == "Connection refused"
    assert gone.value.message == "cannot reach the test server: Connection refused"
