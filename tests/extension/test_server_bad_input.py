"""Bad input gets a clear error and harms nothing: auth, ids, an unwritable store."""

from __future__ import annotations

import json

import pytest
from server_fixtures import api, run, start_kernel
from tornado.httpclient import HTTPClientError


@pytest.mark.parametrize("authorization", ["token not-the-token", ""])
async def test_unauthenticated_requests_are_refused(jp_fetch, authorization):
    for method, path in (("GET", ("kernels",)), ("GET", ("gpus",)), ("GET", ("policy",)),
                         ("POST", ("kernels", "0000", "suspend")), ("DELETE", ("checkpoints", "x"))):
        with pytest.raises(HTTPClientError) as raised:
            await jp_fetch("api", "gpuckpt", *path, method=method, body=b"" if method == "POST" else None,
                           headers={"Authorization": authorization})
        assert raised.value.code == 403, path


@pytest.mark.parametrize(("path", "code", "message"), [
    (("kernels", "not a kernel!"), 400, "is not a kernel id"),
    (("kernels", "0123abcd-0000-0000-0000-000000000000"), 404, "Kernel does not exist"),
    (("kernels", "0123abcd-0000-0000-0000-000000000000", "checkpoints"), 404, "Kernel does not exist"),
])
async def test_bad_kernel_ids(jp_fetch, path, code, message):
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("api", "gpuckpt", *path)
    assert raised.value.code == code
    assert message in json.loads(raised.value.response.body)["message"]


@pytest.mark.parametrize(("checkpoint_id", "code"), [("..", 400), ("etc-passwd", 400),
                                                      ("20990101-000000-abcdef01", 404)])
async def test_bad_checkpoint_ids(jp_fetch, checkpoint_id, code):
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("api", "gpuckpt", "checkpoints", checkpoint_id, method="DELETE")
    assert raised.value.code == code
    assert "traceback" not in raised.value.response.body.decode().lower()


async def test_suspend_of_unknown_kernel_and_actions_out_of_order(jp_fetch, jp_serverapp):
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("api", "gpuckpt", "kernels", "0123abcd-0000-0000-0000-000000000000", "suspend",
                       method="POST", body=b"{not json", params={"wait": "1"})
    assert raised.value.code == 404
    kernel_id = await start_kernel(jp_fetch)
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["state"] == "running"
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    with pytest.raises(HTTPClientError) as raised:
        await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1")
    assert raised.value.code == 409
    assert "is suspended, not running" in json.loads(raised.value.response.body)["message"]


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "store_root": "/dev/null/store"}])
async def test_unwritable_store_fails_clearly_and_the_kernel_keeps_its_state(jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "precious = 'still here'")
    for action in ("checkpoint", "suspend"):
        with pytest.raises(HTTPClientError) as raised:
            await api(jp_fetch, "kernels", kernel_id, action, method="POST", wait="1")
        assert raised.value.code == 503
        message = json.loads(raised.value.response.body)["message"]
        assert "/dev/null is not a directory, so the checkpoint store /dev/null/store cannot be used" in message
        assert "GPUCheckpointApp.store_root" in message
    model = await api(jp_fetch, "kernels", kernel_id)
    assert model["state"] == "running" and "/dev/null is not a directory" in model["last_error"]
    assert (await run(jp_serverapp, kernel_id, "print(precious)")).strip() == "still here"


def test_an_unwritable_store_is_reported_at_start_and_by_doctor(tmp_path):
    from live_server import running_server

    with running_server(tmp_path, "--GPUCheckpointApp.store_root=/dev/null/store") as server:
        log = (tmp_path / "server.log").read_text()
        assert "gpuckpt: /dev/null is not a directory, so the checkpoint store /dev/null/store cannot be used" in log
        assert server.api("GET", "api/gpuckpt/policy")["store_problem"].startswith("/dev/null is not a directory")
        doctor = server.cli("doctor")
    assert doctor.returncode == 1
    assert "FAIL  store        /dev/null is not a directory, so the checkpoint store /dev/null/store cannot be used" \
        in doctor.stdout
