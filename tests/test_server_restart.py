"""A server restart forgets no suspended kernel: same id, same notebook session, resumable."""

from __future__ import annotations

import json
import time
from pathlib import Path

from live_server import KERNEL_NAME, running_server

from jupyter_gpuckpt.kernelspec import kernelspec_json


def test_kernel_suspended_before_a_restart_is_resumable_after_it(tmp_path: Path) -> None:
    spec = tmp_path / "data" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(kernelspec_json("restart test")))

    with running_server(tmp_path) as server:
        session = server.api("POST", "api/sessions", {"path": "train.ipynb", "name": "train.ipynb",
                                                       "type": "notebook", "kernel": {"name": KERNEL_NAME}})
        kernel_id = session["kernel"]["id"]
        server.run(kernel_id, "import numpy as np\nsurvivor = np.arange(100_000)")
        model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
        assert model["state"] == "suspended"

    with running_server(tmp_path) as server:
        # suspended kernels are registered again as the server finishes starting
        deadline = time.monotonic() + 30
        while kernel_id not in (kernels := {k["id"]: k for k in server.api("GET", "api/gpuckpt/kernels")}):
            assert time.monotonic() < deadline, "the suspended kernel was not registered again"
            time.sleep(0.2)
        assert kernels[kernel_id]["state"] == "suspended"
        assert kernel_id in [k["id"] for k in server.api("GET", "api/kernels")]
        # reopening the notebook finds its session, and so its suspended kernel
        sessions = server.api("GET", "api/sessions")
        assert [(s["path"], s["kernel"]["id"]) for s in sessions] == [("train.ipynb", kernel_id)]
        model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
        assert model["state"] == "running"
        assert server.run(kernel_id, "print(int(survivor.sum()))").strip() == str(sum(range(100_000)))
