"""Kernel websockets that survive a suspend, and resume the kernel on the first execute.

While a kernel is suspended its process is gone, so this connection answers what the
frontend needs to stay connected (``kernel_info_request``, from the reply cached before the
suspend) and holds every other message. An ``execute_request`` starts the resume: the
frontend sees the kernel ``busy`` (and ``resume`` events with progress), the checkpoint is
restored, and the held messages then go to the restored kernel in their original order, so
the cell runs against the restored state and its output reaches the notebook.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from jupyter_server.utils import ensure_async

from .lifecycle import State

_V1 = "v1.kernel.websocket.jupyter.org"


class SuspendAwareConnection(ZMQChannelsWebsocketConnection):
    """A ``ZMQChannelsWebsocketConnection`` that knows about suspended kernels."""

    _held: list[Any]

    @property
    def _manager(self) -> Any:
        app = self.websocket_handler.settings.get("gpuckpt_app")
        return None if app is None else app.manager

    def _record(self) -> Any:
        manager = self._manager
        return None if manager is None else manager.records.get(self.kernel_id)

    def _is_held(self) -> bool:
        record = self._record()
        return record is not None and record.state in (State.SUSPENDED, State.RESTORING)

    async def prepare(self) -> None:
        if not self._is_held():
            await super().prepare()
            return
        await self._register_session()
        self.session.key = self.kernel_manager.session.key

    def connect(self) -> Any:
        if not self._is_held():
            return super().connect()
        self._held = []
        self.multi_kernel_manager.notify_connect(self.kernel_id)
        self.create_stream()
        for stream in self.channels.values():
            stream.on_recv_stream(self.handle_outgoing_message)
        self.multi_kernel_manager.add_restart_callback(self.kernel_id, self.on_kernel_restarted)
        self.multi_kernel_manager.add_restart_callback(self.kernel_id, self.on_restart_failed, "dead")
        ZMQChannelsWebsocketConnection._open_sockets.add(self)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def handle_incoming_message(self, incoming_msg: Any) -> None:
        held = getattr(self, "_held", None)
        if not self._is_held() and not held:
            super().handle_incoming_message(incoming_msg)
            return
        channel, header = self._peek(incoming_msg)
        record = self._record()
        if header["msg_type"] == "kernel_info_request" and record is not None and record.kernel_info:
            self._reply(channel, "kernel_info_reply", record.kernel_info, header)
            return
        if held is None:
            self._held = held = []
        held.append(incoming_msg)
        if header["msg_type"] == "execute_request" and len(held) >= 1:
            asyncio.ensure_future(self._resume_then_release())

    def _peek(self, incoming_msg: Any) -> tuple[str, dict[str, Any]]:
        if self.subprotocol == _V1:
            channel, parts = deserialize_msg_from_ws_v1(incoming_msg)
            return channel, json.loads(parts[0])
        msg = json.loads(incoming_msg)
        return msg.get("channel") or "shell", msg["header"]

    def _reply(self, channel: str, msg_type: str, content: dict[str, Any], parent: dict[str, Any]) -> None:
        """Answer on the kernel's behalf: a busy/idle pair around the reply, as a kernel would."""
        for chan, kind, body in (("iopub", "status", {"execution_state": "busy"}),
                                 (channel, msg_type, content),
                                 ("iopub", "status", {"execution_state": "idle"})):
            msg = self.session.msg(kind, body, parent=parent)
            if self.subprotocol == _V1:
                self.write_message(serialize_msg_to_ws_v1(msg, chan, self.session.pack), binary=True)
            else:
                msg["channel"] = chan
                self.write_message(json.dumps(msg, default=json_default))

    async def _resume_then_release(self) -> None:
        record = self._record()
        if record is None or getattr(self, "_resuming", False):
            return
        self._resuming = True
        try:
            if record.state == State.SUSPENDED:
                # "busy", not "restarting": JupyterLab 4 drops a cell's pending reply and
                # output on "restarting". The restore's progress goes out as events.
                self._send_status_message("busy")
                try:
                    await self._manager.resume(self.kernel_id, reason="execute")
                except Exception as e:
                    self._fail_held(str(getattr(e, "log_message", e)))
                    return
            else:
                await record.resumed.wait()
            await ensure_async(self.kernel_manager.is_alive())
            held, self._held = self._held, []
            for message in held:
                super().handle_incoming_message(message)
        finally:
            self._resuming = False

    def _fail_held(self, reason: str) -> None:
        """The resume failed: answer each held execute request with the reason."""
        held, self._held = self._held, []
        for message in held:
            channel, header = self._peek(message)
            if header["msg_type"] != "execute_request":
                continue
            error = {"ename": "ResumeFailed", "evalue": reason,
                     "traceback": [f"The kernel could not be resumed: {reason}"]}
            msg = self.session.msg("error", error, parent=header)
            if self.subprotocol == _V1:
                self.write_message(serialize_msg_to_ws_v1(msg, "iopub", self.session.pack), binary=True)
            else:
                msg["channel"] = "iopub"
                self.write_message(json.dumps(msg, default=json_default))
            self._reply(channel, "execute_reply", {"status": "error", "execution_count": None, **error}, header)
