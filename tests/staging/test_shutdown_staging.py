"""A kernel shut down while suspended leaves nothing in host memory, and never before its
staged copy is in the store. Real server, real kernels, real writer processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from server_fixtures import api, run, start_kernel, write_behind_writers

from gpuckpt_store import CheckpointStore
from gpuckpt_store import spare as spare_files

STATE = "import numpy as np\nweights = np.random.default_rng(7).random(2_500_000)\nnote = 'kept'"
"""20 MB of state that does not compress, and a string."""
CHECK = "print(round(float(weights.sum()), 6), note)"
SLOW = {"policy_interval": 3600.0, "write_behind_bandwidth": 4e6}
"""About 5 s to write the state: the kernel is shut down while its copy is being written."""


def _stores(jp_serverapp: Any) -> tuple[CheckpointStore, CheckpointStore]:
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    return CheckpointStore(app.store_root), CheckpointStore(app.staging_root)


async def _until(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _whole(store: CheckpointStore, checkpoint_id: str) -> None:
    """The checkpoint is in the store, signed by its owner, with every blob it names."""
    manifest = store.read_manifest(checkpoint_id)
    blobs = [blob for buffer in manifest["buffers"] for blob in buffer["blobs"]]
    assert blobs and all((store.blobs_dir / blob).is_file() for blob in blobs)


async def _restores(jp_fetch: Any, jp_serverapp: Any, checkpoint_id: str, expected: str) -> None:
    """A new kernel restores the checkpoint from the store, with the state it was taken with."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, f"%gpuckpt restore {checkpoint_id}")
    assert await run(jp_serverapp, kernel_id, CHECK) == expected


async def test_a_suspended_kernel_shut_down_takes_its_staged_copy_out_of_host_memory(jp_fetch, jp_serverapp):
    """Its write-behind ended long before: nothing else would have freed the copy until another
    suspend needed the room."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    expected = await run(jp_serverapp, kernel_id, CHECK)
    store, staging = _stores(jp_serverapp)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint_id = model["last_checkpoint"]["id"]
    assert model["last_checkpoint"]["durability"] == "staged"
    await jp_serverapp.web_app.settings["gpuckpt_app"].parts.write_behind.durable(checkpoint_id)
    assert checkpoint_id in store.ids() and checkpoint_id in staging.ids()  # kept as a cache for its resume
    assert spare_files.held(staging.blobs_dir) >= 20_000_000

    await jp_fetch("api", "kernels", kernel_id, method="DELETE")

    await _until(lambda: asyncio.sleep(0, checkpoint_id not in staging.ids()), "the staged copy to go", 10)
    assert spare_files.held(staging.blobs_dir) == 0 and spare_files.held(staging.spare_dir, kernel_id) == 0
    _whole(store, checkpoint_id)  # the store's copy stays, as every checkpoint of a shut down kernel
    await _restores(jp_fetch, jp_serverapp, checkpoint_id, expected)


@pytest.mark.parametrize("gpuckpt_config", [SLOW])
async def test_a_kernel_shut_down_during_its_write_behind_keeps_the_staged_copy_until_it_is_durable(
        jp_fetch, jp_serverapp, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    expected = await run(jp_serverapp, kernel_id, CHECK)
    store, staging = _stores(jp_serverapp)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint_id = model["last_checkpoint"]["id"]
    assert model["last_checkpoint"]["durability"] == "staged"

    await jp_fetch("api", "kernels", kernel_id, method="DELETE")

    # the copy is the only one of the state: the writer goes on, and the copy stays while it does
    for _ in range(10):
        assert checkpoint_id in staging.ids() and checkpoint_id not in store.ids()
        assert write_behind_writers(checkpoint_id), "the write-behind was stopped by the shutdown"
        await asyncio.sleep(0.2)
    await _until(lambda: asyncio.sleep(0, checkpoint_id in store.ids()), "the write-behind", 60)
    await _until(lambda: asyncio.sleep(0, checkpoint_id not in staging.ids()), "the staged copy to go", 10)
    assert spare_files.held(staging.blobs_dir) == 0
    _whole(store, checkpoint_id)
    await _restores(jp_fetch, jp_serverapp, checkpoint_id, expected)
