"""Servers of one user that share a data dir share one ledger: each keeps its own entries,
never touches another running server's, and adopts those of servers that are gone.

The ledger itself (two ``Ledger`` objects for one file, concurrent writers from threads and
processes, a failed write, which servers run), a real server registering a suspended kernel
again and writing while another server holds the ledger's lock, then two real ``jupyter server``
processes sharing a data dir (and host memory): one restarted, one killed for good and replaced
by a fresh one."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from live_server import KERNEL_NAME, Server, running_server
from server_fixtures import api, loop_stalls, run, start_kernel, write_behind_writers

from gpuckpt_store import CheckpointStore
from jupyter_gpuckpt.kernels.ledger import Ledger, default_server_id, server_key
from jupyter_gpuckpt.kernels.lifecycle import State
from jupyter_gpuckpt.kernels.records import KernelRecords
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json

LOG = logging.getLogger("test_ledger_ownership")
WRITER = textwrap.dedent("""
    import logging, os, signal, sys
    from pathlib import Path
    from jupyter_gpuckpt.kernels.ledger import Ledger

    path, name, rounds, die = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "die"
    ledger = Ledger(path, lambda: name, logging.getLogger(name))
    for n in range(rounds):
        ledger.save({f"{name}-{i}": {"state": "suspended", "round": n} for i in range(n + 1)})
    if die:  # a server killed for good: its lock goes with its process
        os.kill(os.getpid(), signal.SIGKILL)
""")


def _ledger(path: Path, name: str, wait: float = 30.0) -> Ledger:
    return Ledger(path, lambda: name, LOG, wait=wait)


def _read(path: Path) -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return data


def _writer(path: Path, name: str, rounds: int, die: bool = False) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(rounds), "die" if die else "live"])


def test_two_servers_writing_one_ledger_keep_each_others_entries(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    a, b = _ledger(path, "lab-a"), _ledger(path, "lab-b")
    a.save({"k1": {"state": "suspended"}})
    b.save({"k2": {"state": "suspended"}})
    a.save({"k1": {"state": "suspended", "suspended_at": 1.0}, "k3": {"state": "restoring"}})
    assert {k: e["owner"] for k, e in _read(path).items()} == {"k1": "lab-a", "k2": "lab-b", "k3": "lab-a"}
    assert _read(path)["k1"]["suspended_at"] == 1.0
    a.save({})  # a's kernels were shut down: b's entry stays
    assert _read(path) == {"k2": {"state": "suspended", "owner": "lab-b"}}


def test_a_starting_server_claims_its_own_and_orphans_never_a_live_servers(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"k0": {"state": "suspended"}}))  # written before entries had owners
    before = _ledger(path, "lab-a")
    before.save({"k1": {"state": "suspended"}})
    before.close()  # lab-a stopped
    live = _ledger(path, "lab-b")
    live.save({"k2": {"state": "suspended"}})
    killed = _writer(path, "lab-c", 1, die=True)  # lab-c crashed and will not come back
    assert killed.wait(timeout=60) == -signal.SIGKILL

    mine, every = _ledger(path, "lab-a").claim()

    assert sorted(mine) == ["k0", "k1", "lab-c-0"] and sorted(every) == ["k0", "k1", "k2", "lab-c-0"]
    owners = {k: e["owner"] for k, e in _read(path).items()}
    assert owners == {"k0": "lab-a", "k1": "lab-a", "k2": "lab-b", "lab-c-0": "lab-a"}
    live.save({"k2": {"state": "restoring"}})  # the live server goes on with its own
    assert _read(path)["k2"] == {"state": "restoring", "owner": "lab-b"}


@pytest.mark.parametrize("writers", ["threads", "processes"])
def test_servers_writing_at_once_lose_nothing(tmp_path: Path, writers: str) -> None:
    path, names, rounds = tmp_path / "ledger.json", [f"lab-{i}" for i in range(4)], 30
    if writers == "processes":
        processes = [_writer(path, name, rounds) for name in names]
        assert [p.wait(timeout=120) for p in processes] == [0] * len(names)
    else:
        def write(name: str) -> None:
            ledger = _ledger(path, name)
            for n in range(rounds):
                ledger.save({f"{name}-{i}": {"state": "suspended", "round": n} for i in range(n + 1)})

        threads = [threading.Thread(target=write, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    entries = _read(path)
    assert sorted(entries) == sorted(f"{name}-{i}" for name in names for i in range(rounds))
    assert all(e["owner"] == k.rsplit("-", 1)[0] and e["round"] == rounds - 1 for k, e in entries.items())


def test_a_failed_write_keeps_the_file_and_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    a = _ledger(path, "lab-a")
    a.save({"k1": {"state": "suspended"}})
    with pytest.raises(TypeError, match="not JSON serializable"):
        a.save({"k1": {"state": "suspended"}, "k2": {"state": object()}})
    assert _read(path) == {"k1": {"state": "suspended", "owner": "lab-a"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json", "ledger.json.lock", "ledger.json.servers"]
    FileLock(tmp_path / "ledger.json.lock").acquire(timeout=0)  # nobody holds it: another server may write
    _ledger(path, "lab-b").save({"k3": {"state": "suspended"}})
    assert sorted(_read(path)) == ["k1", "k3"]


def test_a_second_server_of_one_identity_takes_none_of_its_kernels(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "ledger.json"
    first = _ledger(path, "lab-a")
    first.save({"k1": {"state": "suspended"}})
    second = _ledger(path, "lab-a", wait=0.5)
    with caplog.at_level(logging.INFO, LOG.name):
        assert second.claim() == ({}, {"k1": {"state": "suspended", "owner": "lab-a"}})
    assert second.owner == f"lab-a (pid {os.getpid()})"
    assert "another running server is 'lab-a'" in caplog.text
    first.close()  # it stopped: the next server of its identity has its kernels at once
    started = time.monotonic()
    assert list(_ledger(path, "lab-a", wait=30).claim()[0]) == ["k1"]
    assert time.monotonic() - started < 5


def test_a_damaged_ledger_is_kept_aside_and_writes_go_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"k1": {"state": "susp')
    _ledger(path, "lab-a").save({"k2": {"state": "suspended"}})
    assert list(_read(path)) == ["k2"]
    [aside] = tmp_path.glob("ledger.json.damaged-*")
    assert aside.read_text() == '{"k1": {"state": "susp'
    assert "was damaged" in caplog.text


def test_the_ledger_and_its_locks_are_private(tmp_path: Path) -> None:
    path = tmp_path / "gpuckpt" / "ledger.json"
    _ledger(path, "lab-a").save({"k1": {"state": "suspended"}})
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")}
    [identity] = [name for name in modes if name.startswith("gpuckpt/ledger.json.servers/")]
    assert modes == {"gpuckpt": 0o700, "gpuckpt/ledger.json": 0o600, "gpuckpt/ledger.json.lock": 0o600,
                     "gpuckpt/ledger.json.servers": 0o700, identity: 0o600}


def test_a_server_tells_the_other_servers_that_run_by_their_keys(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    me, live, stopped = _ledger(path, "lab-a"), _ledger(path, "lab b"), _ledger(path, "lab-c")
    for ledger in (me, live, stopped):
        ledger.save({})
    stopped.close()
    killed = _writer(path, "lab-d", 1, die=True)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    assert me.live_servers() == {server_key("lab b")}
    assert me.key == server_key("lab-a") and len(server_key("lab b")) == 16 and " " not in server_key("lab b")


async def test_writes_wait_off_the_event_loop_land_in_order_and_outlive_a_cancelled_waiter(tmp_path: Path) -> None:
    """While another server holds the ledger's lock, this one's writes queue (the event loop
    goes on); one whose waiter is cancelled (an operation ended by the server's stop) still
    lands, and the last asked for is what the ledger keeps."""
    path = tmp_path / "ledger.json"
    records = KernelRecords(_ledger(path, "lab-a"))
    record = records.make("k1", KERNEL_NAME)
    lock = FileLock(f"{path}.lock", thread_local=False)
    await asyncio.to_thread(lock.acquire)  # another server writes, slowly
    try:
        started = time.monotonic()
        record.state = State.SUSPENDED
        records.save()  # its write waits for the lock
        record.state = State.RESTORING
        records.save()  # this one waits its turn
        waiter = asyncio.ensure_future(records.saved())
        await asyncio.sleep(0.2)
        waiter.cancel()
        assert time.monotonic() - started < 0.5 and not path.exists()
    finally:
        await asyncio.to_thread(lock.release)
    await records.saved()
    assert {k: e["state"] for k, e in _read(path).items()} == {"k1": "restoring"}


def test_a_servers_identity_by_default(jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    root = jp_serverapp.root_dir
    assert default_server_id(jp_serverapp) == f"{socket.gethostname()}:{jp_serverapp.port} {root}"
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/gpu/")
    assert default_server_id(jp_serverapp) == "jupyterhub:/user/alice/gpu/"


# -- one real server --------------------------------------------------------------------------


def _app(serverapp: Any) -> Any:
    return serverapp.web_app.settings["gpuckpt_app"]


async def test_a_kernel_registered_again_is_suspended_from_the_moment_it_is_listed(
        jp_fetch: Any, jp_serverapp: Any) -> None:
    """The ledger has a suspended kernel of a server that is gone; this one registers it again
    (as it starts). Whoever looks at the kernel while it is registered (a REST request, a
    notebook's websocket, the kernel's start event) sees it suspended, never running, until
    its resume."""
    app = _app(jp_serverapp)
    source = await start_kernel(jp_fetch)
    await run(jp_serverapp, source, "x = 'restored'")
    checkpoint = (await api(jp_fetch, "kernels", source, "checkpoint", method="POST", wait="1"))["last_checkpoint"]
    kernel_id = str(uuid.uuid4())
    gone = _ledger(Path(app.ledger_path), "a server that stopped")
    entry = {"kernelspec": KERNEL_NAME, "state": "suspended", "last_checkpoint": checkpoint,
             "suspended_at": time.time()}
    await asyncio.to_thread(gone.save, {kernel_id: entry})
    gone.close()

    states = []
    registering = asyncio.ensure_future(app.parts.restarts.reregister())
    while not registering.done():  # the record each request in between would answer from
        if kernel_id in jp_serverapp.kernel_manager:
            states.append(app.parts.registry.record(kernel_id).state.value)
        await asyncio.sleep(0)
    await registering

    assert states and set(states) == {"suspended"}, states
    assert (await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended"
    assert (await api(jp_fetch, "kernels", kernel_id, "resume", method="POST", wait="1"))["state"] == "running"
    assert (await run(jp_serverapp, kernel_id, "print(x)")).strip() == "restored"


async def test_another_server_holding_the_ledger_stalls_no_request(jp_fetch: Any, jp_serverapp: Any) -> None:
    """Another server holds the ledger's lock for 3 s (a slow write on a network file system,
    say) while this one checkpoints a kernel: the event loop never waits for the lock, other
    requests are answered meanwhile, and the checkpoint's answer comes once the ledger has it."""
    app = _app(jp_serverapp)
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "x = 1")
    await api(jp_fetch, "kernels", kernel_id)
    locked, released = threading.Event(), threading.Event()

    def other_server() -> None:
        with FileLock(f"{app.ledger_path}.lock"):
            locked.set()
            time.sleep(3.0)
        released.set()

    holder = threading.Thread(target=other_server)
    holder.start()
    assert await asyncio.to_thread(locked.wait, 10)
    loop = asyncio.get_running_loop()
    async with loop_stalls() as gaps:
        try:
            checkpoint = asyncio.ensure_future(api(jp_fetch, "kernels", kernel_id, "checkpoint", method="POST",
                                                   wait="1"))
            while app.parts.registry.records.get(kernel_id).last_checkpoint is None:  # saved: its ledger write waits
                await asyncio.sleep(0.02)
            asked = loop.time()
            assert (await api(jp_fetch, "kernels", kernel_id))["last_checkpoint"] is not None
            answered_in = loop.time() - asked
            last = (await checkpoint)["last_checkpoint"]
            answered_after_the_lock = released.is_set()
        finally:
            await asyncio.to_thread(holder.join, 30)
    assert max(gaps) < 1.0, f"the event loop stalled for {max(gaps):.1f} s"
    assert answered_in < 1.0 and answered_after_the_lock
    assert _read(Path(app.ledger_path))[kernel_id]["last_checkpoint"]["id"] == last["id"]


# -- two real servers sharing a data dir ----------------------------------------------------


def _suspended_kernel(server: Server, notebook: str, value: str) -> str:
    session = server.api("POST", "api/sessions", {"path": notebook, "name": notebook, "type": "notebook",
                                                   "kernel": {"name": KERNEL_NAME}})
    kernel_id = str(session["kernel"]["id"])
    server.run(kernel_id, f"mine = {value!r}")
    assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")["state"] == "suspended"
    return kernel_id


def _states(server: Server) -> dict[str, str]:
    return {k["id"]: k["state"] for k in server.api("GET", "api/gpuckpt/kernels")}


def _registers_only(server: Server, kernel_id: str, other: str) -> None:
    """``kernel_id`` is registered again, suspended, and ``other`` is not, even a while later."""
    deadline = time.monotonic() + 60
    # its record is made as its start is announced, and takes the ledger's state a moment later
    while _states(server).get(kernel_id) != "suspended":
        assert time.monotonic() < deadline, f"{kernel_id} was not registered again, suspended: {_states(server)}"
        time.sleep(0.2)
    for _ in range(15):  # the start registers every kernel it takes within a moment
        assert other not in _states(server) and other not in {k["id"] for k in server.api("GET", "api/kernels")}
        time.sleep(0.2)


def _resumed_state(server: Server, kernel_id: str) -> str:
    assert server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")["state"] == "running"
    return server.run(kernel_id, "print(mine)").strip()


def _kill(server: Server) -> None:
    """SIGKILL the server's process and wait until it has ended (its locks go with it)."""
    [pid] = [int(f.stem.split("-")[1]) for f in server.runtime_dir.glob("jpserver-*.json")
             if json.loads(f.read_text())["url"] == server.url]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text():
        assert time.monotonic() < deadline, "the killed server did not end"
        time.sleep(0.1)


def test_two_servers_sharing_a_data_dir_keep_their_own_kernels_and_adopt_orphans(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("ownership test", gpus=0)))
    ledger = tmp_path / "data" / "gpuckpt" / "ledger.json"
    lab_a = ("--GPUCheckpointApp.server_id=lab-a",)  # lab-b: the default identity, host, port and root dir
    with ExitStack() as b_running:
        with running_server(tmp_path, *lab_a) as a:
            b = b_running.enter_context(running_server(tmp_path))
            ka = _suspended_kernel(a, "a.ipynb", "from lab-a")
            kb = _suspended_kernel(b, "b.ipynb", "from lab-b")
        lab_b = f"{socket.gethostname()}:{b.url.split(':')[2].split('/')[0]} {tmp_path / 'root'}"
        assert {k: e["owner"] for k, e in _read(ledger).items()} == {ka: "lab-a", kb: lab_b}

        with ExitStack() as a_running:
            # lab-a again, while lab-b runs: its own kernel comes back with its state, lab-b's stays lab-b's
            a = a_running.enter_context(running_server(tmp_path, *lab_a))
            _registers_only(a, ka, kb)
            assert _read(ledger)[kb]["owner"] == lab_b
            assert _resumed_state(a, ka) == "from lab-a"
            assert _states(b) == {kb: "suspended"}
            assert _resumed_state(b, kb) == "from lab-b"
            assert b.api("POST", f"api/gpuckpt/kernels/{kb}/suspend?wait=1")["state"] == "suspended"

            _kill(b)  # lab-b is gone for good; a fresh server adopts its kernel, not running lab-a's
            b_running.close()
            with running_server(tmp_path) as fresh:
                _registers_only(fresh, kb, ka)
                owners = {k: e["owner"] for k, e in _read(ledger).items()}
                assert owners[ka] == "lab-a" and owners[kb] not in ("lab-a", lab_b), owners
                assert _resumed_state(fresh, kb) == "from lab-b"
                assert a.run(ka, "print(mine)").strip() == "from lab-a"


STATE = "import numpy as np\nweights = np.random.default_rng(7).random(2_500_000)"
"""20 MB of state that does not compress."""


def _model_until(server: Server, kernel_id: str, done: Any, what: str) -> dict[str, Any]:
    """The kernel's model once ``done(model)`` holds (it may be registered again first)."""
    deadline = time.monotonic() + 90
    while True:
        model = {k["id"]: k for k in server.api("GET", "api/gpuckpt/kernels")}.get(kernel_id, {})
        if model and done(model):
            return model
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {model}"
        time.sleep(0.2)


def _durable(model: dict[str, Any]) -> bool:
    return bool((model.get("last_checkpoint") or {}).get("durability") == "durable")


def _writing(model: dict[str, Any]) -> bool:
    return bool((model.get("write_behind") or {}).get("bytes_done"))


def test_a_starting_server_leaves_a_running_servers_staged_copies_alone(tmp_path: Path) -> None:
    """Host memory is shared by a user's servers. lab-b runs, with a suspended kernel whose
    staged copy is durable (kept in host memory, for a resume from there). lab-a stops while it
    writes a staged copy to the store; lab-b suspends another kernel, whose copy it is writing.
    lab-a starts again: it writes its own copy, and neither drops nor writes lab-b's."""
    folder = tmp_path / "data" / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(kernelspec_json("staged ownership test", gpus=0)))
    slow = "--GPUCheckpointApp.write_behind_bandwidth=1e6"  # 20 s to write the state
    lab_a, lab_b = "--GPUCheckpointApp.server_id=lab-a", "--GPUCheckpointApp.server_id=lab-b"
    with running_server(tmp_path, lab_b, slow) as b:
        kept = _suspended_kernel(b, "kept.ipynb", "from lab-b")
        kept_copy = _model_until(b, kept, _durable, "the small state's write-behind")["last_checkpoint"]["id"]
        with running_server(tmp_path, lab_a, slow) as a:
            own = a.start_kernel()
            a.run(own, STATE)
            assert a.api("POST", f"api/gpuckpt/kernels/{own}/suspend?wait=1")["last_checkpoint"]["durability"] == \
                "staged"
            _model_until(a, own, _writing, "lab-a's write-behind")
        writing = b.start_kernel()
        b.run(writing, STATE)
        writing_copy = b.api("POST", f"api/gpuckpt/kernels/{writing}/suspend?wait=1")["last_checkpoint"]["id"]
        _model_until(b, writing, _writing, "lab-b's write-behind")

        with running_server(tmp_path, lab_a) as a:
            _model_until(a, own, _durable, "lab-a to write its own staged copy again")
            time.sleep(1.0)  # whatever its start does to other copies, it has done by now
            staged = CheckpointStore(tmp_path / "staging").ids()
            assert kept_copy in staged and writing_copy in staged, staged
            assert len(write_behind_writers(writing_copy)) <= 1  # lab-b's own writer, if it has not finished yet

        resumed = b.api("POST", f"api/gpuckpt/kernels/{kept}/resume?wait=1")
        assert resumed["report"]["source"] == "host memory"
        assert b.run(kept, "print(mine)").strip() == "from lab-b"
        _model_until(b, writing, _durable, "lab-b's write-behind to end")
