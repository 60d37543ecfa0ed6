"""Staged suspends: the kernel's state goes to host memory, the process ends, and the server
writes the checkpoint to the store afterwards. Real server, real kernels, real writer processes."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shutil
import signal
import stat
import threading
import time
from collections.abc import Collection, Coroutine, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from live_server import KERNEL_NAME, running_server
from server_fixtures import api, run, start_kernel, write_behind_writers

from gpuckpt_store import CheckpointStore
from gpuckpt_store import spare as spare_files
from jupyter_gpuckpt import events
from jupyter_gpuckpt.cli import doctor
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json
from jupyter_gpuckpt.staging.host_memory import HostMemory, default_root, parse_limit, physical_memory

STATE = "import numpy as np\nrng = np.random.default_rng(7)\nweights = rng.random(2_500_000)\nnote = 'kept'"
"""20 MB of state that does not compress, and a string."""
CHECK = "print(round(float(weights.sum()), 6), note)"
SLOW = {"policy_interval": 3600.0, "write_behind_bandwidth": 4e6}
"""About 5 s to write the state: long enough to watch the write-behind at work."""


@pytest.fixture
def suspend_events(jp_serverapp: Any) -> Iterator[list[dict[str, Any]]]:
    """Every suspend and resume event the server emits during the test, in order."""
    seen: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append({"event": schema_id.split("/")[-2], **data})

    ids = (events.schema_id("suspend"), events.schema_id("resume"))
    for schema in ids:
        jp_serverapp.event_logger.add_listener(schema_id=schema, listener=listener)
    yield seen
    for schema in ids:
        jp_serverapp.event_logger.remove_listener(schema_id=schema, listener=listener)


def _stores(jp_serverapp: Any) -> tuple[CheckpointStore, CheckpointStore]:
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    return CheckpointStore(app.store_root), CheckpointStore(app.staging_root)


def _pid_alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


async def _until(predicate: Any, timeout: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _durable(jp_fetch: Any, kernel_id: str, timeout: float = 60) -> dict[str, Any]:
    model: dict[str, Any] = {}

    async def durable() -> bool:
        nonlocal model
        model = await api(jp_fetch, "kernels", kernel_id)
        return bool(model["last_checkpoint"]) and model["last_checkpoint"]["durability"] == "durable"

    await _until(durable, timeout, "the write-behind")
    return model


async def _kill_the_writer_mid_write(jp_fetch: Any, kernel_id: str, checkpoint_id: str) -> None:
    """SIGKILL the write-behind of ``checkpoint_id`` once it has written some bytes."""

    async def writing() -> bool:
        return bool(((await api(jp_fetch, "kernels", kernel_id))["write_behind"] or {}).get("bytes_done"))

    await _until(writing, 30, "the writer to write")
    [writer] = write_behind_writers(checkpoint_id)
    os.kill(writer.pid, signal.SIGKILL)


@pytest.mark.parametrize("gpuckpt_config", [SLOW])
async def test_the_process_ends_before_the_state_is_durable_and_resume_reads_host_memory(
        jp_fetch, jp_serverapp, suspend_events, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    expected = await run(jp_serverapp, kernel_id, CHECK)
    pid = int(await run(jp_serverapp, kernel_id, "import os; print(os.getpid())"))
    store, staging = _stores(jp_serverapp)

    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint_id = model["last_checkpoint"]["id"]
    assert model["state"] == "suspended" and model["last_checkpoint"]["durability"] == "staged"
    assert not _pid_alive(pid)
    assert checkpoint_id in staging.ids() and checkpoint_id not in store.ids()  # in memory only, for now
    listed = await api(jp_fetch, "kernels", kernel_id, "checkpoints")
    assert [(c["id"], c["durability"]) for c in listed] == [(checkpoint_id, "staged")]

    # resumed before its write-behind ends: the state can only have come from host memory
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running" and model["report"]["source"] == "host memory"
    assert checkpoint_id not in store.ids()
    assert await run(jp_serverapp, kernel_id, CHECK) == expected

    model = await _durable(jp_fetch, kernel_id)
    assert checkpoint_id in store.ids()
    store.read_manifest(checkpoint_id)  # signed, and by this owner
    await _until(lambda: asyncio.sleep(0, checkpoint_id not in staging.ids()), 10, "the staged copy to go")

    phases = [e["phase"] for e in suspend_events if e["event"] == "suspend"]
    assert phases[0] == "started" and phases[-1] == "durable"
    assert phases.index("released") < phases.index("done") < phases.index("durable")
    assert "writing" in phases  # the write reported its bytes
    released = next(e for e in suspend_events if e["phase"] == "released")
    assert released["durability"] == "staged" and released["checkpoint_id"] == checkpoint_id


@pytest.mark.parametrize("gpuckpt_config", [SLOW])
async def test_a_killed_writer_keeps_the_staged_copy_and_the_previous_checkpoint_then_the_write_completes(
        jp_fetch, jp_serverapp, suspend_events, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    previous = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    await run(jp_serverapp, kernel_id, "weights = rng.random(2_500_000)\nnote = 'changed'")
    expected = await run(jp_serverapp, kernel_id, CHECK)
    store, staging = _stores(jp_serverapp)

    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint_id = model["last_checkpoint"]["id"]
    await _kill_the_writer_mid_write(jp_fetch, kernel_id, checkpoint_id)

    async def failed() -> bool:
        return any(e["phase"] == "write_failed" for e in suspend_events)

    await _until(failed, 30, "the failed write to be reported")
    assert checkpoint_id in staging.ids() and checkpoint_id not in store.ids()
    manifest = store.read_manifest(previous["id"])  # the previous checkpoint is whole
    assert all((store.blobs_dir / blob).is_file() for buffer in manifest["buffers"] for blob in buffer["blobs"])
    failure = next(e for e in suspend_events if e["phase"] == "write_failed")
    assert "code -9" in failure["error"] and failure["retry_in"] > 0

    await _durable(jp_fetch, kernel_id)
    leftovers = [p.name for p in store.blobs_dir.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []  # the next attempt collected what the killed writer left
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["state"] == "running"
    assert await run(jp_serverapp, kernel_id, CHECK) == expected


@pytest.mark.parametrize("gpuckpt_config", [SLOW])
async def test_a_staged_copy_lost_before_it_reached_the_store_falls_back_to_the_last_durable_checkpoint(
        jp_fetch, jp_serverapp, suspend_events, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    previous = (await api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    await run(jp_serverapp, kernel_id, "note = 'changed'")
    store, staging = _stores(jp_serverapp)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint_id = model["last_checkpoint"]["id"]
    await _kill_the_writer_mid_write(jp_fetch, kernel_id, checkpoint_id)
    shutil.rmtree(staging.base)  # host memory cleared (the node rebooted, say) before the retry

    async def fell_back() -> bool:
        return ((await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"] or {}).get("id") == previous["id"]

    await _until(fell_back, 30, "the fallback")
    model = await api(jp_fetch, "kernels", kernel_id)
    assert f"The staged checkpoint {checkpoint_id} was lost before it reached the store" in model["notice"]
    assert f"the kernel resumes from {previous['id']}" in model["notice"]
    assert model["last_checkpoint"]["bytes_total"] == previous["bytes_total"]
    assert 0 <= previous["time"] - model["last_checkpoint"]["time"] < 2  # when it was taken, to the second
    assert model["state"] == "suspended" and checkpoint_id not in store.ids()
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["report"]["source"] == "store"
    assert (await run(jp_serverapp, kernel_id, "print(note)")).strip() == "kept"  # as the last durable one had it


def _inodes(folder: Path) -> dict[int, int]:
    """Inode to allocated bytes of each file in ``folder``."""
    return {st.st_ino: st.st_blocks * 512 for st in (p.stat() for p in folder.iterdir())}


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0}])
async def test_a_suspend_writes_over_the_memory_the_kernels_last_copy_took(jp_fetch, jp_serverapp, gpuckpt_config):
    """A new /dev/shm file took its first write several times slower than one written before:
    the copy a resumed kernel no longer needs becomes its spare files, and its next suspend's
    packs are those files, written over in place."""
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    _, staging = _stores(jp_serverapp)
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    await _durable(jp_fetch, kernel_id)
    first = _inodes(staging.blobs_dir)
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["report"]["source"] == "host memory"
    assert staging.ids() == []  # running again: its copy is in the store, and its memory is kept
    assert _inodes(staging.spare_dir) == first
    assert all(spare_files.tag_of(name) == kernel_id for name in os.listdir(staging.spare_dir))
    assert stat.S_IMODE(staging.spare_dir.stat().st_mode) == 0o700

    await run(jp_serverapp, kernel_id, "weights = np.random.default_rng(8).random(2_500_000); note = 'second'")
    expected = await run(jp_serverapp, kernel_id, CHECK)
    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    assert model["last_checkpoint"]["durability"] == "staged"
    second = _inodes(staging.blobs_dir)
    reused = sum(size for inode, size in second.items() if inode in first)
    assert reused >= 0.8 * sum(second.values()), (first, second)  # its old pages, not new ones
    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["report"]["source"] == "host memory"
    assert await run(jp_serverapp, kernel_id, CHECK) == expected

    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    await app.policy_loop.run_pass()
    assert os.listdir(staging.spare_dir) == []  # shut down: it suspends no more, its memory is freed


def test_a_staging_reserve_is_made_at_start_and_the_first_suspend_writes_into_it(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("staging reserve test", gpus=0)))
    staging = CheckpointStore(tmp_path / "staging")

    def reserve_made() -> Coroutine[Any, Any, bool]:
        return asyncio.sleep(0, spare_files.held(staging.spare_dir, spare_files.RESERVE) >= 768 << 20)

    with running_server(tmp_path, "--GPUCheckpointApp.staging_reserve=768M") as server:
        asyncio.run(_until(reserve_made, 60, "the reserve"))  # made as the server starts
        reserve = _inodes(staging.spare_dir)
        check = doctor.check_host_memory({"staging_root": str(tmp_path / "staging"), "host_memory_limit": "25%",
                                          "staging_reserve": "768M"})
        assert check.status == "OK" and "reserve 768.0 MiB allocated of 768.0 MiB (768M)" in check.detail, check

        kernel_id = server.start_kernel()
        server.run(kernel_id, STATE)
        expected = server.run(kernel_id, CHECK)
        model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
        assert model["last_checkpoint"]["durability"] == "staged"
        assert set(_inodes(staging.blobs_dir)) <= set(reserve)  # the server's first suspend wrote into it
        asyncio.run(_until(reserve_made, 60, "the reserve to be made whole again"))
        assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")["state"] == "running"
        assert server.run(kernel_id, CHECK) == expected


def test_doctor_says_when_the_reserve_is_not_there(tmp_path: Path) -> None:
    root = tmp_path / "staging"
    HostMemory(root, 1 << 30).problem()  # the folder exists, the reserve was never made
    check = doctor.check_host_memory({"staging_root": str(root), "host_memory_limit": "1G",
                                      "staging_reserve": "512M"})
    assert check.status == "WARN" and "new memory" in check.detail, check
    check = doctor.check_host_memory({"staging_root": str(root), "host_memory_limit": "1G",
                                      "staging_reserve": "lots"})
    assert check.status == "FAIL" and "staging_reserve" in check.detail


@pytest.mark.parametrize("gpuckpt_config", [{"policy_interval": 3600.0, "host_memory_limit": "1M"}])
async def test_a_state_over_the_host_memory_limit_goes_straight_to_the_store(
        jp_fetch, jp_serverapp, suspend_events, gpuckpt_config):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, STATE)
    expected = await run(jp_serverapp, kernel_id, CHECK)
    store, staging = _stores(jp_serverapp)

    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    checkpoint_id = model["last_checkpoint"]["id"]
    assert model["last_checkpoint"]["durability"] == "durable" and checkpoint_id in store.ids()
    assert staging.ids() == [] and list(staging.blobs_dir.iterdir()) == []  # the staged attempt took its bytes back
    released = next(e for e in suspend_events if e["phase"] == "released")
    assert released["durability"] == "durable" and "more than" in released["not_staged"]
    phases = [e["phase"] for e in suspend_events if e["event"] == "suspend"]
    assert phases[-3:] == ["released", "done", "durable"]

    model = await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
    assert model["report"]["source"] == "store"
    assert await run(jp_serverapp, kernel_id, CHECK) == expected


@pytest.mark.parametrize("gpuckpt_config", [{**SLOW, "host_memory_limit": "30M"}])
async def test_suspends_at_the_same_time_share_the_host_memory_limit(jp_fetch, jp_serverapp, gpuckpt_config):
    kernels = [await start_kernel(jp_fetch) for _ in range(2)]
    expected = {}
    for kernel_id in kernels:
        await run(jp_serverapp, kernel_id, STATE)  # 20 MB each: one fits in 30 MB, two do not
        expected[kernel_id] = await run(jp_serverapp, kernel_id, CHECK)
    models = await asyncio.gather(*(api(jp_fetch, "kernels", k, "suspend", method="POST", wait="1")
                                    for k in kernels))
    assert sorted(m["last_checkpoint"]["durability"] for m in models) == ["durable", "staged"]
    _, staging = _stores(jp_serverapp)
    used = sum(p.stat().st_size for p in staging.blobs_dir.iterdir())
    assert used <= parse_limit("30M")
    for kernel_id in kernels:
        await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1")
        assert await run(jp_serverapp, kernel_id, CHECK) == expected[kernel_id]


def test_a_server_restarted_during_the_write_behind_finishes_it(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("staged restart test", gpus=0)))
    args = ("--GPUCheckpointApp.write_behind_bandwidth=2e6",)  # about 10 s to write
    with running_server(tmp_path, *args) as server:
        kernel_id = server.start_kernel()
        server.run(kernel_id, STATE)
        expected = server.run(kernel_id, CHECK)
        model = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
        checkpoint_id = model["last_checkpoint"]["id"]
        assert model["last_checkpoint"]["durability"] == "staged"
        deadline = time.monotonic() + 30
        while not (server.api("GET", f"api/gpuckpt/kernels/{kernel_id}")["write_behind"] or {}).get("bytes_done"):
            assert time.monotonic() < deadline, "the write-behind did not start"
            time.sleep(0.1)
    assert write_behind_writers(checkpoint_id) == []  # the stopped server ended its writer mid-write
    store = CheckpointStore(tmp_path / "data" / "gpuckpt" / "store")
    assert checkpoint_id not in store.ids()

    with running_server(tmp_path) as server:
        deadline = time.monotonic() + 60
        model: dict[str, Any] = {}
        while (model.get("last_checkpoint") or {}).get("durability") != "durable":
            assert time.monotonic() < deadline, model
            time.sleep(0.2)
            kernels = {k["id"]: k for k in server.api("GET", "api/gpuckpt/kernels")}  # registered again yet?
            model = kernels.get(kernel_id, {})
        assert model["state"] == "suspended"
        assert checkpoint_id in store.ids()
        assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")["state"] == "running"
        assert server.run(kernel_id, CHECK) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_staging_folder_another_user_planted_is_not_used(tmp_path: Path) -> None:
    planted = tmp_path / "jupyter-gpuckpt-victim"
    planted.mkdir()
    os.chown(planted, 65534, 65534)  # nobody's (the tests run as root, which may do this)
    assert HostMemory(planted, 1 << 30).problem() == f"{planted} belongs to another user"
    assert list(planted.iterdir()) == []  # and nothing was made in it
    assert HostMemory(tmp_path / "mine", 0).problem() == (
        "staging is turned off (GPUCheckpointApp.host_memory_limit is 0)")
    assert HostMemory(tmp_path / "mine", 1 << 30).problem() is None
    assert oct((tmp_path / "mine" / getpass.getuser()).stat().st_mode & 0o777) == oct(0o700)  # private


class _SlowToAnswer(Collection[str]):
    """The staged copies a take must keep, each answered in up to 5 s: a take that walks a
    full host memory (or a slow one) for that long."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.answer = threading.Event()

    def __contains__(self, checkpoint_id: object) -> bool:
        self.asked.set()
        self.answer.wait(5)
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_a_share_is_given_back_without_waiting_for_a_take_under_way(tmp_path: Path) -> None:
    """The event loop gives back a finished suspend's share while another suspend's take walks
    the staged copies in a thread: it must not wait for that walk."""
    host = HostMemory(tmp_path / "staging", 1 << 20)
    staged = host.store()
    staged.prepare()
    copy = staged.checkpoints / staged.new_id()  # a staged copy the take looks at
    copy.mkdir()
    (copy / "manifest.json").write_text("{}")
    first = host.take((), 0, durable=lambda _: True)  # a suspend under way holds all that is free
    needed = _SlowToAnswer()
    taking = threading.Thread(target=host.take, args=(needed, 1000), kwargs={"durable": lambda _: True})
    taking.start()
    assert needed.asked.wait(10)
    started = time.monotonic()
    host.give_back(first)
    waited = time.monotonic() - started
    needed.answer.set()
    taking.join(10)
    assert waited < 0.5, f"giving back waited {waited:.1f} s for the other take"
    assert host.reserved == 0


def test_host_memory_sizes_and_the_default_place() -> None:
    assert parse_limit("512M") == 512 << 20 and parse_limit("8GiB") == 8 << 30 and parse_limit("1000") == 1000
    assert parse_limit("25%") == physical_memory() // 4
    assert parse_limit("0") == 0
    for bad in ("lots", "150%", "-1G"):
        with pytest.raises(ValueError, match="size|at most"):
            parse_limit(bad)
    assert default_root().parent == Path("/dev/shm")  # memory: gone with the node, never on a disk


def test_room_is_made_only_by_dropping_copies_already_in_the_store(kernels: Any) -> None:
    """The staging folder is shared by the user's servers: a copy not yet in the store may be
    another server's, its write-behind still to come, and is never dropped for room."""
    host = HostMemory(kernels.root / "staging", 1 << 30)
    k = kernels.start()
    k.ok("import numpy as np; a = np.random.default_rng(0).random(1 << 18)")  # 2 MB that no chunk repeats
    pending = k.save(host.root)  # the oldest, so the first a drop would take
    k.ok("a = np.random.default_rng(1).random(1 << 18)")
    durable = k.save(host.root)
    host.limit = host.used() + (1 << 20)  # room for 1 MB more: a 3 MB state needs a drop
    share = host.take((), 3 << 20, durable=lambda checkpoint_id: checkpoint_id == durable)
    assert host.ids() == [pending]  # the durable copy made the room, the other one stays
    assert share >= 3 << 20
    host.give_back(share)
    assert host.take((), 8 << 20, durable=lambda checkpoint_id: checkpoint_id == durable) == 0
    assert host.ids() == [pending] and host.reserved == 0
