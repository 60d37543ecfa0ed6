"""Kernel websockets that survive a suspend, and resume the kernel on the first execute.

While a kernel is away (suspended, being suspended or restored, or its process found dead)
this connection answers what the frontend needs to stay connected (``kernel_info_request``,
from the reply cached before the suspend) and holds every other message. An
``execute_request`` to a suspended (or parked) kernel starts the resume: the frontend sees the kernel
``busy`` (and ``resume`` events with progress), the checkpoint is restored, and the held
messages then go to the restored kernel in their original order, so the cell runs against
the restored state. If the kernel cannot be brought back, each held cell gets an error
saying why and is not run. The first cell after a restore also gets the restore report, as
output, so every frontend shows what was (and was not) restored.

A page keeps the ids of the kernel subshells it made (JupyterLab sends each comm target's
messages on a subshell of its own) until it sees the kernel restart, which a resume is not to
it: the restored process has none of them, and ipykernel would drop those messages. The first
message naming one the kernel's current run does not have waits (with those after it) while
this connection asks the kernel whether it has it (made through another connection) and, if
not, creates one in its place; the page's messages then name that one. Sending them to the
main shell instead would make widgets wait for a running cell until the page reloads.

This module builds on jupyter_server's websocket connection class beyond its public methods
(there is no public hook for holding a kernel's messages): the private members it uses go
through ``jupyter_gpuckpt/upstream.py``, and the override of ``connect`` for a kernel that is
away mirrors upstream's stream wiring, whose source digest ``upstream.MIRRORED`` records.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from queue import Empty
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
    serialize_binary_message,
    serialize_msg_to_ws_v1,
)
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from jupyter_server.utils import ensure_async

from .. import upstream
from ..errors import KernelNotFound
from ..kernels.kernel_calls import INTERNAL_SESSION_PREFIX
from ..kernels.lifecycle import AWAY, State

_V1 = "v1.kernel.websocket.jupyter.org"
SUBSHELL_TIMEOUT = 10.0
"""Seconds the kernel may take to list or create a subshell (its control thread answers even
while a cell runs)."""


class _Subshells:
    """The subshell ids a page sends, for one run of the kernel: those the run has, and those
    of an earlier run, each with the subshell made in its place (None if none could be: the
    main shell then takes its messages)."""

    def __init__(self, run: str | None) -> None:
        self.run = run
        self.live: set[str] = set()
        self.renamed: dict[str, str | None] = {}


class SuspendAwareConnection(ZMQChannelsWebsocketConnection):
    """A ``ZMQChannelsWebsocketConnection`` that knows about suspended kernels."""

    _held: list[Any] | None = None
    """The page's messages waiting, in order (None: none wait, messages go straight through)."""
    _releasing = False
    _subshells: _Subshells | None = None

    _cell_event: asyncio.Event | None = None

    @property
    def _cell_held(self) -> asyncio.Event:
        """Set while a held message is a cell: it brings a suspended kernel back."""
        if self._cell_event is None:
            self._cell_event = asyncio.Event()
        return self._cell_event

    @property
    def _parts(self) -> Any:
        app = self.websocket_handler.settings.get("gpuckpt_app")
        return None if app is None else app.parts

    def _record(self) -> Any:
        parts = self._parts
        if parts is None:
            return None
        try:
            return parts.registry.record(self.kernel_id)
        except KernelNotFound:
            return None

    def _is_away(self) -> bool:
        record = self._record()
        return record is not None and record.state in AWAY

    async def prepare(self) -> None:
        if not self._is_away():
            await super().prepare()
            return
        await upstream.register_session(self)
        self.session.key = self.kernel_manager.session.key

    def connect(self) -> Any:
        if not self._is_away():
            return super().connect()
        # The kernel's process is gone: connect the streams (they reach it once it is
        # back) without waiting for it to answer, as the stock class would.
        self.multi_kernel_manager.notify_connect(self.kernel_id)
        self.create_stream()
        for stream in self.channels.values():
            stream.on_recv_stream(self.handle_outgoing_message)
        self.multi_kernel_manager.add_restart_callback(self.kernel_id, self.on_kernel_restarted)
        self.multi_kernel_manager.add_restart_callback(self.kernel_id, self.on_restart_failed, "dead")
        upstream.open_connections().add(self)
        connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        connected.set_result(None)  # the handler awaits it
        return connected

    @classmethod
    async def kernel_moved(cls, kernel_id: str) -> None:
        """The kernel listens elsewhere now (resumed on another node, restarted on other
        ports): every open connection to it reconnects its streams there."""
        moving = [c for c in list(upstream.open_connections())
                  if isinstance(c, cls) and c.kernel_id == kernel_id]
        # one connection closing meanwhile must not fail the others, nor the resume
        for outcome in await asyncio.gather(*(c._reconnect() for c in moving), return_exceptions=True):
            if isinstance(outcome, Exception):
                moving[0].log.warning("gpuckpt: a websocket of kernel %s did not reconnect: %s", kernel_id, outcome)

    async def _reconnect(self) -> None:
        """Close the streams to the old place, open them to the new one, and wait until
        IOPub delivers (so no output of the next cell is missed) before forwarding again."""
        for stream in self.channels.values():
            if not stream.closed():
                stream.close()
        self.create_stream()
        if getattr(self.kernel_manager, "execution_state", None) == "busy":
            # what the process that was there last said: upstream's nudge skips a busy kernel,
            # and IOPub's subscription to the new process then went unchecked (a cell's reply
            # came, its output and idle never did); the new process has run nothing yet
            self.log.info("gpuckpt: kernel %s moved while marked busy: its IOPub is checked anyway", self.kernel_id)
            self.kernel_manager.execution_state = "idle"
        try:
            await self.nudge()
        finally:
            for stream in self.channels.values():
                stream.on_recv_stream(self.handle_outgoing_message)

    def handle_incoming_message(self, incoming_msg: Any) -> None:
        record = self._record()
        if record is None:
            super().handle_incoming_message(incoming_msg)
            return
        if record.state == State.RUNNING and self._held is None and self._process_lost():
            self._parts.failover.process_lost(self.kernel_id, restarting=False)
        channel, header = self._peek(incoming_msg)
        if record.state not in AWAY and self._held is None and self._has_subshell(channel, header):
            if record.pending_report:
                self._show_report(incoming_msg)
            super().handle_incoming_message(self._in_this_run(incoming_msg, channel, header))
            return
        if header["msg_type"] == "kernel_info_request" and record.kernel_info and record.state in AWAY:
            self._reply(channel, "kernel_info_reply", record.kernel_info, header)
            return
        if self._held is None:
            self._held = []
        self._held.append(incoming_msg)
        if header["msg_type"] == "execute_request":
            self._cell_held.set()  # a release waiting for the kernel to come back by itself resumes it now
        if not self._releasing:
            self._releasing = True
            self._parts.tasks.start(f"release held messages of {self.kernel_id}", self._release_when_back())

    def handle_outgoing_message(self, stream: Any, outgoing_msg: list[Any]) -> None:
        if getattr(stream, "channel", stream) == "control" and self._record() is not None:
            _, parts = self.session.feed_identities(outgoing_msg)
            if self.session.unpack(parts[1])["msg_type"] == "create_subshell_reply":
                created = self.session.unpack(parts[4]).get("subshell_id")
                if created:  # the page's, made in the kernel's current run
                    self._subshells_now().live.add(created)
        super().handle_outgoing_message(stream, outgoing_msg)

    def _subshells_now(self) -> _Subshells:
        """The page's subshell ids for the kernel's current run."""
        provisioner = self._parts.registry.provisioner(self.kernel_id)
        run = provisioner.run_id if provisioner is not None else None
        if self._subshells is None or self._subshells.run != run:
            self._subshells = _Subshells(run)
        return self._subshells

    def _has_subshell(self, channel: str, header: dict[str, Any]) -> bool:
        """Whether the kernel's current run has the subshell a message names (or one in its place)."""
        subshell = header.get("subshell_id") if channel == "shell" else None
        if subshell is None:
            return True
        subshells = self._subshells_now()
        return subshell in subshells.live or subshell in subshells.renamed

    def _in_this_run(self, message: Any, channel: str, header: dict[str, Any]) -> Any:
        """``message``, naming the subshell made in place of the earlier run's one it names."""
        if self._subshells is None or not self._subshells.renamed:
            return message
        renamed = self._subshells_now().renamed
        if channel == "shell" and header.get("subshell_id") in renamed:
            return self._rewritten(message, header={**header, "subshell_id": renamed[header["subshell_id"]]})
        if header["msg_type"] == "delete_subshell_request":
            content = self._content(message)
            if content.get("subshell_id") in renamed:
                return self._rewritten(message, content={**content, "subshell_id": renamed[content["subshell_id"]]})
        return message

    async def _make_subshell(self, subshell: str) -> None:
        """Find whether the kernel's current run has the page's ``subshell`` (made through
        another connection) or create one in its place (the page made it in an earlier run)."""
        subshells = self._subshells_now()
        client = self.kernel_manager.client()
        client.session.session = f"{INTERNAL_SESSION_PREFIX}subshells-{uuid.uuid4().hex}"  # its sockets' identity
        client.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
        try:
            if subshell in (await self._ask(client, "list_subshell_request")).get("subshell_id", ()):
                subshells.live.add(subshell)
                return
            made = (await self._ask(client, "create_subshell_request")).get("subshell_id")
            why = "the kernel made none"
        except Exception as e:  # no answer in time, or the kernel went: the page's messages must not wait on
            made, why = None, "the kernel did not answer" if isinstance(e, Empty) else str(e)
        finally:
            client.stop_channels()
        if made is None:
            self.log.warning("gpuckpt: no subshell in place of %s in kernel %s (%s): its messages go to the main "
                             "shell", subshell, self.kernel_id, why)
        else:
            subshells.live.add(made)
        subshells.renamed[subshell] = made

    @staticmethod
    async def _ask(client: Any, msg_type: str) -> dict[str, Any]:
        """The content of the kernel's reply to a control request of ``client``'s own."""
        request = client.session.msg(msg_type, {})
        client.control_channel.send(request)
        deadline = time.monotonic() + SUBSHELL_TIMEOUT
        while True:
            reply = await client.control_channel.get_msg(timeout=max(0.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == request["header"]["msg_id"]:
                return dict(reply["content"])

    def _process_lost(self) -> bool:
        """Whether the kernel's process has ended though nobody suspended it (the restarter
        notices within seconds; a cell sent meanwhile must not reach the next process)."""
        provisioner = self._parts.registry.provisioner(self.kernel_id)
        return provisioner is not None and provisioner.lost()

    def _peek(self, incoming_msg: Any) -> tuple[str, dict[str, Any]]:
        if self.subprotocol == _V1:
            channel, parts = deserialize_msg_from_ws_v1(incoming_msg)
            return channel, json.loads(parts[0])
        msg = self._legacy(incoming_msg)
        return msg.get("channel") or "shell", msg["header"]

    def _content(self, incoming_msg: Any) -> dict[str, Any]:
        if self.subprotocol == _V1:
            return dict(json.loads(deserialize_msg_from_ws_v1(incoming_msg)[1][3]))
        return dict(self._legacy(incoming_msg)["content"])

    @staticmethod
    def _legacy(incoming_msg: Any) -> dict[str, Any]:
        """A message of the legacy protocol: JSON, or binary when it has buffers."""
        if isinstance(incoming_msg, bytes):
            return dict(deserialize_binary_message(incoming_msg))
        return dict(json.loads(incoming_msg))

    def _rewritten(self, incoming_msg: Any, header: dict[str, Any] | None = None,
                   content: dict[str, Any] | None = None) -> Any:
        """``incoming_msg`` with ``header`` or ``content`` in place of its own."""
        if self.subprotocol == _V1:
            channel, parts = deserialize_msg_from_ws_v1(incoming_msg)
            parts = list(parts)
            for index, part in ((0, header), (3, content)):
                if part is not None:
                    parts[index] = self.session.pack(part)
            return serialize_msg_to_ws_v1(parts, channel)
        msg = self._legacy(incoming_msg)
        msg["header"] = header or msg["header"]
        msg["content"] = content or msg["content"]
        if isinstance(incoming_msg, bytes):
            return serialize_binary_message(msg)
        return json.dumps(msg, default=json_default)

    def _write(self, channel: str, msg: dict[str, Any]) -> None:
        if self.subprotocol == _V1:
            self.write_message(serialize_msg_to_ws_v1(msg, channel, self.session.pack), binary=True)
        else:
            msg["channel"] = channel
            self.write_message(json.dumps(msg, default=json_default))

    def _reply(self, channel: str, msg_type: str, content: dict[str, Any], parent: dict[str, Any]) -> None:
        """Answer on the kernel's behalf: a busy/idle pair around the reply, as a kernel would."""
        for chan, kind, body in (("iopub", "status", {"execution_state": "busy"}),
                                 (channel, msg_type, content),
                                 ("iopub", "status", {"execution_state": "idle"})):
            self._write(chan, self.session.msg(kind, body, parent=parent))

    def _show_report(self, message: Any) -> None:
        """Show the kernel's pending restore report as output of ``message``'s cell."""
        record = self._record()
        _, header = self._peek(message)
        if header["msg_type"] != "execute_request" or not record.pending_report:
            return
        text, record.pending_report = record.pending_report, None
        self._write("iopub", self.session.msg("display_data", {
            "data": {"text/plain": text}, "metadata": {}, "transient": {}}, parent=header))

    async def _until_changed(self, record: Any) -> None:
        """Wait for the kernel's next step, or for a cell to be held (it resumes the kernel);
        at most a second, so that a kernel shut down meanwhile is noticed."""
        changed = asyncio.ensure_future(record.changed(timeout=1.0))
        cell = asyncio.ensure_future(self._cell_held.wait())
        try:
            await asyncio.wait({changed, cell}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in (changed, cell):
                waiting.cancel()

    async def _release_when_back(self) -> None:
        """Send the held messages once the kernel is back, and answer each if it cannot come
        back. A held cell brings it back (a resume, or one right after the suspend under way
        ends: the user wins); other requests (completion, inspection, history) wait for it to
        come back however it does (a cell, the return signal, the REST API).

        A suspend the server started keeps its process until it ends: its suspend is not
        abandoned, so a cell that arrives meanwhile runs in the kernel resumed right after."""
        try:
            while True:
                record = self._record()
                if record is None:
                    return self._fail_held("the kernel was shut down")
                if record.state == State.CHECKPOINTING or (
                        record.state in (State.SUSPENDED, State.PARKED) and not self._cell_held.is_set()):
                    await self._until_changed(record)
                elif record.state in (State.SUSPENDED, State.PARKED):
                    # "busy", not "restarting": JupyterLab 4 drops a cell's pending reply and
                    # output on "restarting". The restore's progress goes out as events.
                    upstream.send_status(self, "busy")
                    try:
                        await self._parts.operations.resume(self.kernel_id, reason="execute")
                    except Exception as e:
                        return self._fail_held(f"the kernel could not be resumed: {e}")
                elif record.state in AWAY:
                    error = await record.settled()
                    if error is not None:
                        return self._fail_held(error)
                elif record.state == State.FAILED:
                    return self._fail_held(record.last_error or "the kernel failed")
                else:
                    break
            await ensure_async(self.kernel_manager.is_alive())
            # messages that come meanwhile join the queue (it is None only once it is empty)
            while self._held:
                message = self._held.pop(0)
                channel, header = self._peek(message)
                if not self._has_subshell(channel, header):
                    await self._make_subshell(header["subshell_id"])
                if record.pending_report:
                    self._show_report(message)
                super().handle_incoming_message(self._in_this_run(message, channel, header))
            self._held = None
        finally:
            self._releasing = False
            self._cell_held.clear()

    def _fail_held(self, reason: str) -> None:
        """Answer each held request with ``reason`` (an error reply of its type): the cells
        are not run, and nothing the page waits on is left unanswered."""
        held, self._held = self._held or [], None
        for message in held:
            channel, header = self._peek(message)
            kind = header["msg_type"]
            if not kind.endswith("_request"):
                continue
            error = {"ename": "KernelNotRestored", "evalue": reason,
                     "traceback": [f"The cell was not run: {reason}." if kind == "execute_request"
                                   else f"The kernel did not answer: {reason}."]}
            reply: dict[str, Any] = {"status": "error", **error}
            if kind == "execute_request":
                self._write("iopub", self.session.msg("error", error, parent=header))
                reply["execution_count"] = None
            elif kind == "is_complete_request":
                reply = {"status": "unknown"}  # the protocol's answer when the kernel cannot tell
            self._reply(channel, kind.removesuffix("_request") + "_reply", reply, header)
