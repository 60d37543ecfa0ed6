"""REST API (contract): ``/api/gpuckpt/...``, JSON, every route behind the authorizer.

Long operations answer ``202`` with the kernel's model and report progress on the event
stream; ``?wait=1`` waits and answers the result instead. The parts raise domain errors
(``errors.py``, ``gpuckpt_store``); this module alone turns them into HTTP status codes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from gpuckpt_store import CheckpointError, CheckpointNotFound, is_checkpoint_id, shown

from ..errors import (
    CheckpointInUse,
    CheckpointUntouchable,
    GPUCheckpointError,
    KernelNotFound,
    OperationFailed,
    ParkUnsupported,
    PlacementError,
    StoreUnavailable,
    Unplaceable,
    WrongState,
)
from .gpus_model import gpus_model
from .wiring import ServerParts

AUTH_RESOURCE = "kernels"
_KERNEL_ID = re.compile(r"[0-9a-fA-F-]{1,64}", re.ASCII)
_STATUS: list[tuple[type[Exception], int]] = [
    (KernelNotFound, 404), (CheckpointNotFound, 404), (WrongState, 409), (CheckpointInUse, 409),
    (CheckpointUntouchable, 409), (StoreUnavailable, 503), (Unplaceable, 409), (PlacementError, 503),
    (ParkUnsupported, 409), (OperationFailed, 500), (GPUCheckpointError, 500), (CheckpointError, 500),
]
"""Domain errors, most specific first, and the status each answers."""


@contextmanager
def _http_errors() -> Iterator[None]:
    """Domain errors raised inside become the HTTP errors they map to, message kept."""
    try:
        yield
    except (GPUCheckpointError, CheckpointError) as e:
        code = next(code for kind, code in _STATUS if isinstance(e, kind))
        raise web.HTTPError(code, str(e)) from e


class GPUCheckpointHandler(APIHandler):
    """Base: the extension's app and its parts; ids checked before use; domain errors answered."""

    auth_resource = AUTH_RESOURCE

    @property
    def app(self) -> Any:
        return self.settings["gpuckpt_app"]

    @property
    def parts(self) -> ServerParts:
        parts: ServerParts = self.app.parts
        return parts

    def kernel_id(self, kernel_id: str) -> str:
        if not _KERNEL_ID.fullmatch(kernel_id):
            raise web.HTTPError(400, f"{shown(kernel_id)} is not a kernel id")
        return kernel_id

    async def answer(self, work: Callable[[], Any], status: int = 200) -> None:
        """Finish with the JSON of what ``work()`` returns or resolves to (nothing for None),
        or with the status its error maps to."""
        with _http_errors():
            result = work()
            if inspect.isawaitable(result):
                result = await result
        self.set_status(status)
        self.finish(None if result is None else json.dumps(result))


class PolledHandler(GPUCheckpointHandler):
    """Base of the ``GET`` routes, which the frontend's panel and the hub service poll: reading
    them is not the user's activity, or an idle server with the panel open would never be
    culled (jupyter_server's ``/api/status`` is not activity either). What the user asks for
    (``POST``, ``DELETE``) is."""

    _track_activity = False


class KernelsHandler(PolledHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.answer(self.parts.registry.models)


class KernelHandler(PolledHandler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        await self.answer(lambda: self.parts.registry.model(self.kernel_id(kernel_id)))


class KernelActionHandler(GPUCheckpointHandler):
    """``POST .../checkpoint``, ``.../suspend[?mode=]``, ``.../resume``, ``.../rebuild[?keep=1]``; what
    cannot start (a suspend of a kernel that is not checkpointable, a state that refuses the
    action) is refused at once, whatever ``wait``."""

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str, action: str) -> None:
        kernel_id = self.kernel_id(kernel_id)
        options: dict[str, Any] = {}
        mode = self.get_argument("mode", None)
        if mode is not None:
            if action != "suspend" or mode not in ("park", "suspend"):
                raise web.HTTPError(400, "mode is for suspend only, and is 'park' or 'suspend'")
            options["mode"] = mode
        keep = self.get_argument("keep", None)
        if keep is not None:
            if action != "rebuild" or keep not in ("0", "1", "true", "false"):
                raise web.HTTPError(400, "keep is for rebuild only, and is 1 or 0")
            options["keep"] = keep in ("1", "true")
        if self.get_argument("wait", "0") in ("1", "true", "yes"):
            await self.answer(lambda: getattr(self.parts.operations, action)(kernel_id, **options))
            return
        with _http_errors():  # what cannot start is refused now (404, 409, 503), not failed in the background
            await self.parts.operations.check_can_start(kernel_id, action)
        self.app.start_operation(kernel_id, action, **options)
        await asyncio.sleep(0)  # let the task take the kernel's lock and set its state
        with _http_errors():
            model = await self.parts.registry.model(kernel_id)
        self.set_status(202)
        self.finish(json.dumps({**model, "outcome": "started"}))


class KeepRunningHandler(GPUCheckpointHandler):
    """``POST .../keep``: the user's "Keep running" on a policy warning; counts as activity."""

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        kernel_id = self.kernel_id(kernel_id)
        await self.answer(lambda: self.app.reclaimer.keep(kernel_id))


class UserReturnedHandler(GPUCheckpointHandler):
    """``POST .../returned``: JupyterLab saw the user come back to the kernel's notebook (its tab
    shown, its window focused, typing in it); a suspended kernel's resume starts at once
    (``202``, unless ``resume_on_return`` is off: ``200`` with why)."""

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        kernel_id = self.kernel_id(kernel_id)
        with _http_errors():
            outcome = self.app.user_returned(kernel_id)
        await asyncio.sleep(0)  # let a resume take the kernel's lock and set its state
        with _http_errors():
            model = await self.parts.registry.model(kernel_id)
        if outcome == "started":
            self.set_status(202)
        else:
            self.set_status(200)
        self.finish(json.dumps({**model, "outcome": outcome}))


class KernelCheckpointsHandler(PolledHandler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        await self.answer(lambda: self.parts.retention.checkpoints(self.kernel_id(kernel_id)))


class CheckpointHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def delete(self, checkpoint_id: str) -> None:
        if not is_checkpoint_id(checkpoint_id):
            raise web.HTTPError(400, f"{shown(checkpoint_id)} is not a checkpoint id")
        await self.answer(lambda: self.parts.retention.delete_checkpoint(checkpoint_id), status=204)


class GPUsHandler(PolledHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.answer(gpus_model)


class PolicyHandler(PolledHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.answer(self.app.policy_model)


_kid = r"(?P<kernel_id>[^/]+)"
default_handlers = [
    (r"/api/gpuckpt/kernels", KernelsHandler),
    (rf"/api/gpuckpt/kernels/{_kid}", KernelHandler),
    (rf"/api/gpuckpt/kernels/{_kid}/(?P<action>checkpoint|suspend|resume|rebuild)", KernelActionHandler),
    (rf"/api/gpuckpt/kernels/{_kid}/keep", KeepRunningHandler),
    (rf"/api/gpuckpt/kernels/{_kid}/returned", UserReturnedHandler),
    (rf"/api/gpuckpt/kernels/{_kid}/checkpoints", KernelCheckpointsHandler),
    (r"/api/gpuckpt/checkpoints/(?P<checkpoint_id>[^/]+)", CheckpointHandler),
    (r"/api/gpuckpt/gpus", GPUsHandler),
    (r"/api/gpuckpt/policy", PolicyHandler),
]
