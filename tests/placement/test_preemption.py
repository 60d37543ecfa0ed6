"""Checkpoint on SIGTERM (Slurm preemption): real kernels are sent SIGTERM, idle, busy in a
cell, waiting in an async cell, or running a server call, and must save, write their exit
note and exit; a fresh kernel then restores what the note names."""

from __future__ import annotations

import getpass
import json
import signal
import stat
import time
from pathlib import Path
from queue import Empty
from typing import Any

from kernel_processes import Kernel, KernelFactory

from gpuckpt_store import protocol

EXIT_SECONDS = 60
"""Bound on SIGTERM-to-exit (a save of a small namespace takes well under a second)."""


def start_armed(kernels: KernelFactory, note: Path, store: Path | None = None) -> Kernel:
    """A kernel started as the server starts a Slurm kernel."""
    return kernels.start(JUPYTER_GPUCKPT_ON_TERM=str(note), JUPYTER_GPUCKPT_STORE=str(store or kernels.store),
                         JUPYTER_GPUCKPT_KERNEL="kernel-under-test")


def terminate(kernel: Kernel, note: Path | None) -> tuple[int, float | None]:
    """SIGTERM the kernel, as Slurm does; its exit status and the seconds until ``note`` appeared."""
    process = kernel.manager.provisioner.process  # type: ignore[union-attr]
    sent = time.monotonic()
    kernel.manager.signal_kernel(signal.SIGTERM)
    deadline = sent + EXIT_SECONDS
    noted = None
    while True:
        exited = process.poll() is not None
        if note is not None and noted is None and note.exists():
            noted = time.monotonic() - sent
        if exited:
            return process.returncode, noted
        assert time.monotonic() < deadline, "the kernel did not exit after SIGTERM"
        time.sleep(0.005)


def read_note(note: Path, seconds: float | None, what: str, failed: bool = False) -> dict[str, Any]:
    assert seconds is not None, "the kernel exited without writing its exit note"
    assert stat.S_IMODE(note.stat().st_mode) == 0o600
    content: dict[str, Any] = json.loads(note.read_text())
    print(f"\n{what}: signal to note {seconds:.3f} s (kernel's own clock: "
          f"{content['saved_at'] - content['signal_at']:.3f} s)")
    assert set(content) == {"reason", "checkpoint_id", "last_cell", "interrupted_cell", "error", "signal_at",
                            "saved_at"}
    assert content["reason"] == "terminated"
    assert (content["error"] is not None) is failed and (content["checkpoint_id"] is None) is failed, content
    assert content["signal_at"] <= content["saved_at"]
    return content


def checkpoints(kernels: KernelFactory) -> list[str]:
    folder = kernels.store / getpass.getuser() / "checkpoints"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def iopub_for(kernel: Kernel, msg_id: str, until: str | None = None, timeout: float = 60) -> list[dict[str, Any]]:
    """The iopub messages of request ``msg_id``: up to the first of type ``until``, or all
    until none comes for a second."""
    found = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kernel.client.get_iopub_msg(timeout=1 if until is None else 0.1)
        except Empty:
            if until is None:
                return found
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            found.append(msg)
            if msg["msg_type"] == until:
                return found
    raise AssertionError(f"no {until} message for {msg_id} in {timeout} s")


def test_sigterm_idle_kernel_checkpoints_and_exits(kernels: KernelFactory, tmp_path: Path) -> None:
    note = tmp_path / "exit-note.json"
    kernel = start_armed(kernels, note)
    last = kernel.client.execute_interactive("a = 41\nwords = ['x', 'y']", timeout=60)["content"]["execution_count"]

    status, seconds = terminate(kernel, note)
    content = read_note(note, seconds, "idle kernel")
    assert status == 0
    assert content["interrupted_cell"] is None and content["last_cell"] == last  # every cell is in it
    assert checkpoints(kernels) == [content["checkpoint_id"]]
    assert kernels.manifest(content["checkpoint_id"])["kernel_id"] == "kernel-under-test"

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {content['checkpoint_id']}")
    assert fresh.value("(a, words)") == (41, ["x", "y"])


def test_sigterm_interrupts_running_cell_then_checkpoints(kernels: KernelFactory, tmp_path: Path) -> None:
    note = tmp_path / "exit-note.json"
    kernel = start_armed(kernels, note)
    kernel.ok("a = 41")
    msg_id = kernel.client.execute('print("started", flush=True)\nn = 0\nwhile True: n += 1')
    started = iopub_for(kernel, msg_id, until="stream")
    count = next(m["content"]["execution_count"] for m in started if m["msg_type"] == "execute_input")
    time.sleep(0.2)

    status, seconds = terminate(kernel, note)
    content = read_note(note, seconds, "busy kernel")
    assert status == 0
    assert content["interrupted_cell"] == count
    errors = [m["content"] for m in iopub_for(kernel, msg_id) if m["msg_type"] == "error"]
    assert [e["ename"] for e in errors] == ["KernelTerminated"], "the cell shows the interruption as its error"

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {content['checkpoint_id']}")
    assert fresh.value("a") == 41
    assert fresh.value("n > 0") is True


SLOW_COMPILE = """
import ast, time
class SlowOnce(ast.NodeTransformer):
    armed = False
    def visit_Module(self, node):
        if SlowOnce.armed:
            SlowOnce.armed = False
            print("compiling", flush=True)
            time.sleep(1)
        return node
get_ipython().ast_transformers.append(SlowOnce())
"""


def test_sigterm_while_ipython_prepares_the_cell(kernels: KernelFactory, tmp_path: Path) -> None:
    """A SIGTERM while the cell runs IPython's code around it (an AST transformer here) is
    not raised there (IPython would drop the transformer): it is repeated until it lands in
    the cell's code."""
    note = tmp_path / "exit-note.json"
    kernel = start_armed(kernels, note)
    kernel.ok(SLOW_COMPILE)
    kernel.ok("a = 41\nSlowOnce.armed = True")
    msg_id = kernel.client.execute("n = 0\nwhile True: n += 1")
    started = iopub_for(kernel, msg_id, until="stream")
    count = next(m["content"]["execution_count"] for m in started if m["msg_type"] == "execute_input")

    status, seconds = terminate(kernel, note)
    content = read_note(note, seconds, "cell being compiled")
    assert status == 0
    assert content["interrupted_cell"] == count
    errors = [m["content"] for m in iopub_for(kernel, msg_id) if m["msg_type"] == "error"]
    assert [e["ename"] for e in errors] == ["KernelTerminated"]

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {content['checkpoint_id']}")
    assert fresh.value("(a, 'n' in globals())") == (41, True)


def test_sigterm_while_async_cell_waits(kernels: KernelFactory, tmp_path: Path) -> None:
    """A top-level-await cell waiting in the event loop is not running code to interrupt:
    the save runs from the loop at once, and the cell counts as interrupted."""
    note = tmp_path / "exit-note.json"
    kernel = start_armed(kernels, note)
    msg_id = kernel.client.execute('import asyncio\nb = 7\nprint("waiting", flush=True)\nawait asyncio.sleep(3600)')
    started = iopub_for(kernel, msg_id, until="stream")
    count = next(m["content"]["execution_count"] for m in started if m["msg_type"] == "execute_input")

    status, seconds = terminate(kernel, note)
    content = read_note(note, seconds, "async cell waiting")
    assert status == 0
    assert content["interrupted_cell"] == count

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {content['checkpoint_id']}")
    assert fresh.value("b") == 7


def test_a_run_the_server_ended_exits_on_sigterm_without_a_checkpoint(kernels: KernelFactory,
                                                                     tmp_path: Path) -> None:
    """A suspend or a shutdown writes the note before Slurm's SIGTERM: the kernel, whose state
    the server has just saved (or which is shut down), exits at once and keeps that note."""
    note = tmp_path / "exit-note.json"
    kernel = start_armed(kernels, note)
    kernel.ok("a = 1")
    note.write_text(json.dumps({"reason": "ended by the server"}))
    status, _ = terminate(kernel, None)
    assert status == 0 and checkpoints(kernels) == []
    assert json.loads(note.read_text()) == {"reason": "ended by the server"}


def test_sigterm_during_server_save_lets_it_answer_first(kernels: KernelFactory, tmp_path: Path) -> None:
    """A server call is never cut off: the server's save answers, then the kernel saves
    again (the note names that newer checkpoint) and exits."""
    note = tmp_path / "exit-note.json"
    kernel = start_armed(kernels, note)
    kernel.ok("import numpy as np\nbig = np.arange(60_000_000, dtype=np.int64)")
    request = kernel.client.session.msg(protocol.REQUEST, {"call": "save", "args": {"store": str(kernels.store)}})
    kernel.client.shell_channel.send(request)
    msg_id = request["header"]["msg_id"]
    # busy: the save has begun (its first progress would come only after half a second, and
    # it may be over by then)
    iopub_for(kernel, msg_id, until="status")

    status, seconds = terminate(kernel, note)
    content = read_note(note, seconds, "during a server save")
    assert status == 0
    replies = [m["content"] for m in iopub_for(kernel, msg_id) if m["msg_type"] == protocol.REPLY]
    assert len(replies) == 1 and replies[0]["ok"], replies
    server_save = replies[0]["result"]["id"]
    assert checkpoints(kernels) == sorted([server_save, content["checkpoint_id"]])
    assert kernels.manifest(content["checkpoint_id"])["parent"] == server_save


def test_failed_save_still_writes_the_note_and_exits(kernels: KernelFactory, tmp_path: Path) -> None:
    note = tmp_path / "exit-note.json"
    (tmp_path / "a-file").write_text("")
    kernel = start_armed(kernels, note, store=tmp_path / "a-file" / "store")
    kernel.ok("a = 41")

    status, seconds = terminate(kernel, note)
    content = read_note(note, seconds, "failed save", failed=True)
    assert status == 0
    assert "SaveError" in content["error"] and "a-file" in content["error"], content["error"]


def test_sigterm_without_the_variable_just_ends_the_kernel(kernels: KernelFactory) -> None:
    kernel = kernels.start()
    kernel.ok("a = 41")
    status, _ = terminate(kernel, None)
    assert status == -signal.SIGTERM
    assert checkpoints(kernels) == []
