"""How the server's calls reach a kernel: in the environment a cell has, leaving the kernel idle
to jupyter_server, answering an interrupt, and in a kernel that did not load the hooks at start."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import api, run, start_kernel

from jupyter_gpuckpt.placement.kernelspec import kernelspec_json

LATE_KERNEL_NAME = "python3-gpuckpt-late"
"""A gpuckpt kernelspec without ``--ext=kernel_hooks``: the hooks are importable, not loaded."""
SLOW_TO_SAVE = """
import time
class SlowToSave:
    def __reduce__(self):
        time.sleep({seconds})  # the checkpoint takes this long, in the kernel
        return (SlowToSave, ())
slow = SlowToSave()
"""


async def test_a_restore_imports_libraries_as_a_cell_would(jp_fetch, jp_serverapp):
    """pandas imported outside a cell (no ``get_ipython`` in builtins) takes itself for a
    terminal: ``display.max_columns`` 0, sized to a terminal that is not there."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "import pandas as pd\nframe = pd.DataFrame({'a': [1, 2]})")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")  # a new process: the restore imports
    out = await run(jp_serverapp, kernel_id, "print(pd.get_option('display.max_columns'), frame['a'].sum())")
    assert out.split() == ["20", "3"]


async def _until_the_checkpoint_ends(jp_fetch: Any, kernel_id: str, seconds: float,
                                     during: Callable[[], Awaitable[Any]] | None = None) -> list[dict[str, Any]]:
    """The kernel's models, every 0.1 s, until its checkpoint is taken or has failed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    models: list[dict[str, Any]] = []
    while not models or not (models[-1]["last_checkpoint"] or models[-1]["last_error"]):
        assert loop.time() < deadline, "the checkpoint did not end"
        if during is not None:
            await during()
        models.append(await api(jp_fetch, "kernels", kernel_id))
        await asyncio.sleep(0.1)
    return models


async def test_a_call_leaves_the_kernel_idle_to_the_server(jp_fetch, jp_serverapp):
    """jupyter_server's ``execution_state`` (its culler's, and the busy kernels the policy
    counts as the server's activity) stays idle while the server's own call runs."""
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, SLOW_TO_SAVE.format(seconds=2))
    await asyncio.sleep(0.5)  # the cell's last messages reach the server
    await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST")  # the user's request, and activity
    server = json.loads((await jp_fetch("api", "status")).body)["last_activity"]
    # each pass takes a busy kernel for the server's activity
    models = await _until_the_checkpoint_ends(jp_fetch, kernel_id, 60, during=app.policy_loop.run_pass)
    assert len(models) > 10 and models[-1]["last_checkpoint"] is not None  # 2 s in the kernel at least
    assert {m["execution_state"] for m in models} == {"idle"}
    assert json.loads((await jp_fetch("api", "status")).body)["last_activity"] == server


async def test_an_interrupted_call_fails_and_is_not_run_again(jp_fetch, jp_serverapp):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, SLOW_TO_SAVE.format(seconds=30))
    await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST")
    await asyncio.sleep(2.0)  # the kernel is in the call
    await jp_fetch("api", "kernels", kernel_id, "interrupt", method="POST", body=b"")
    model = (await _until_the_checkpoint_ends(jp_fetch, kernel_id, 20))[-1]  # a second try would take 30 s
    assert (model["state"], model["last_checkpoint"]) == ("running", None)
    assert model["last_error"] == "the kernel was interrupted during the call"
    assert (await run(jp_serverapp, kernel_id, "print(type(slow).__name__)")).strip() == "SlowToSave"


@pytest.fixture
def late_kernelspec(jp_data_dir: Path, jp_server_config: Any) -> str:
    spec = kernelspec_json("GPU checkpoint test, hooks not loaded at start")
    spec["argv"].remove("--ext=kernel_hooks")
    folder = jp_data_dir / "kernels" / LATE_KERNEL_NAME
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))
    return LATE_KERNEL_NAME


async def test_a_kernel_that_did_not_load_the_hooks_gets_them(jp_fetch, jp_serverapp, late_kernelspec):
    kernel_id = await start_kernel(jp_fetch, late_kernelspec)
    count = "print(get_ipython().execution_count)"
    before = await run(jp_serverapp, kernel_id, f"x = 41\n{count}")
    first = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    second = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    assert first["id"] != second["id"]
    # registering ran as a silent expression: not a cell of the user's
    after = await run(jp_serverapp, kernel_id, f"print('gpuckpt_request' in get_ipython().kernel.shell_handlers)\n{count}")
    assert after.split() == ["True", str(int(before) + 1)]
