"""A server restart forgets no suspended kernel: same id, same notebook session, resumable,
its idle time kept; and a resume whose kernel fails to start fails at once, resumably."""

from __future__ import annotations

import json
import time
import urllib.error
from pathlib import Path

import pytest
from live_server import KERNEL_NAME, Server, running_server
from paths import TESTS

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json

CRASHY = "python3-gpuckpt-crashy"
RESTARTS = 3


def _kernelspecs(base: Path) -> Path:
    """The gpuckpt kernelspec, and one whose kernel crashes at start while a marker exists."""
    for name in (KERNEL_NAME, CRASHY):
        spec = kernelspec_json(f"restart test ({name})", gpus=0)
        if name == CRASHY:
            spec["argv"][1:3] = [str(TESTS / "crashing_kernel.py"), str(base / "crash-next-start")]
        folder = base / "data" / "kernels" / name
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text(json.dumps(spec))
    return base / "crash-next-start"


def _registered(server: Server, ids: list[str]) -> dict[str, dict]:
    deadline = time.monotonic() + 30
    while not set(ids) <= set(kernels := {k["id"]: k for k in server.api("GET", "api/gpuckpt/kernels")}):
        assert time.monotonic() < deadline, "the suspended kernels were not registered again"
        time.sleep(0.2)
    return kernels


def _post_error(server: Server, path: str) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as raised:
        server.api("POST", path)
    return raised.value.code, json.loads(raised.value.read())["message"]


def test_suspended_kernels_survive_restarts_and_each_resumes(tmp_path: Path) -> None:
    marker = _kernelspecs(tmp_path)
    args = ("--GPUCheckpointApp.ready_timeout=30",)
    suspended_at: dict[str, float] = {}
    with running_server(tmp_path, *args) as server:
        ids = []
        for i, name in enumerate((KERNEL_NAME, CRASHY)):
            session = server.api("POST", "api/sessions", {"path": f"n{i}.ipynb", "name": f"n{i}.ipynb",
                                                           "type": "notebook", "kernel": {"name": name}})
            ids.append(session["kernel"]["id"])
            server.run(ids[-1], f"import numpy as np\nsurvivor = np.arange({i + 1} * 100_000)")
            assert server.api("POST", f"api/gpuckpt/kernels/{ids[-1]}/suspend?wait=1")["state"] == "suspended"
            suspended_at[ids[-1]] = time.time()

    for restart in range(RESTARTS):
        with running_server(tmp_path, *args) as server:
            kernels = _registered(server, ids)
            assert [kernels[k]["state"] for k in ids] == ["suspended", "suspended"]
            # the user's idle time goes on from before the restart, it does not start again
            idle = {k: (kernels[k]["idle_seconds"], time.time() - suspended_at[k]) for k in ids}
            assert all(seconds >= since for seconds, since in idle.values()), idle
            sessions = {s["kernel"]["id"]: s["path"] for s in server.api("GET", "api/sessions")}
            assert sessions == {ids[0]: "n0.ipynb", ids[1]: "n1.ipynb"}

            kernel_id = ids[restart % 2]
            if kernel_id == ids[1]:
                marker.write_text("crash")  # the relaunched process dies at once
                started = time.monotonic()
                code, message = _post_error(server, f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
                assert code == 500 and "the kernel's process exited before it answered" in message
                assert time.monotonic() - started < 25, "a kernel that died at start was waited for"
                model = server.api("GET", f"api/gpuckpt/kernels/{kernel_id}")
                assert model["state"] == "suspended" and "exited before it answered" in model["last_error"]
            model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
            assert model["state"] == "running", model
            total = (restart % 2 + 1) * 100_000
            assert server.run(kernel_id, "print(int(survivor.sum()))").strip() == str(total * (total - 1) // 2)
            assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")["state"] == "suspended"
            suspended_at[kernel_id] = time.time()
