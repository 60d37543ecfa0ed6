"""REST API (contract): ``/api/gpuckpt/...``, JSON, every route behind the authorizer.

Long operations answer ``202`` with the kernel's model and report progress on the event
stream; ``?wait=1`` waits and answers the result instead.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from kernel_hooks.errors import RestoreError
from kernel_hooks.listing import list_checkpoints
from kernel_hooks.store import CheckpointStore

AUTH_RESOURCE = "kernels"
_KERNEL_ID = re.compile(r"[0-9a-fA-F-]{1,64}")


class GPUCheckpointHandler(APIHandler):
    """Base: access to the extension's manager and app; ids checked before use."""

    auth_resource = AUTH_RESOURCE

    @property
    def app(self) -> Any:
        return self.settings["gpuckpt_app"]

    @property
    def manager(self) -> Any:
        return self.app.manager

    def kernel_id(self, kernel_id: str) -> str:
        if not _KERNEL_ID.fullmatch(kernel_id):
            raise web.HTTPError(400, f"{kernel_id!r} is not a kernel id")
        self.manager.km(kernel_id)  # 404 if unknown
        return kernel_id


class KernelsHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        ids = list(self.app.serverapp.kernel_manager.list_kernel_ids())
        self.finish(json.dumps([self.manager.model(k) for k in ids]))


class KernelHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        self.finish(json.dumps(self.manager.model(self.kernel_id(kernel_id))))


class KernelActionHandler(GPUCheckpointHandler):
    """``POST .../checkpoint``, ``.../suspend``, ``.../resume``."""

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str, action: str) -> None:
        kernel_id = self.kernel_id(kernel_id)
        operation = getattr(self.manager, action)
        if self.get_argument("wait", "0") in ("1", "true", "yes"):
            self.finish(json.dumps(await operation(kernel_id)))
            return
        self.app.start_task(kernel_id, operation(kernel_id))
        await asyncio.sleep(0)  # let the task take the kernel's lock and set its state
        self.set_status(202)
        self.finish(json.dumps(self.manager.model(kernel_id)))


class KernelCheckpointsHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        kernel_id = self.kernel_id(kernel_id)
        infos = await asyncio.to_thread(list_checkpoints, self.app.store())
        self.finish(json.dumps([i.to_json() for i in infos if i.kernel_id == kernel_id]))


class CheckpointHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def delete(self, checkpoint_id: str) -> None:
        store: CheckpointStore = self.app.store()
        try:
            await asyncio.to_thread(store.delete, checkpoint_id)
        except RestoreError as e:
            raise web.HTTPError(404 if "no checkpoint" in str(e) else 400, str(e)) from e
        self.set_status(204)
        self.finish()


class GPUsHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps(await self.app.gpus_model()))


class PolicyHandler(GPUCheckpointHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps(self.app.policy_model()))


_kid = r"(?P<kernel_id>[^/]+)"
default_handlers = [
    (r"/api/gpuckpt/kernels", KernelsHandler),
    (rf"/api/gpuckpt/kernels/{_kid}", KernelHandler),
    (rf"/api/gpuckpt/kernels/{_kid}/(?P<action>checkpoint|suspend|resume)", KernelActionHandler),
    (rf"/api/gpuckpt/kernels/{_kid}/checkpoints", KernelCheckpointsHandler),
    (r"/api/gpuckpt/checkpoints/(?P<checkpoint_id>[^/]+)", CheckpointHandler),
    (r"/api/gpuckpt/gpus", GPUsHandler),
    (r"/api/gpuckpt/policy", PolicyHandler),
]
