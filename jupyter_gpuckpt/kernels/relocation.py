"""Relocation: a kernel that listens elsewhere after a resume or a restart (another host,
other ports) is found there again by jupyter_server's kernel manager, its activity tracking,
the cell watcher and every notebook websocket."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_client.connect import port_names

from .. import upstream
from . import activity
from .registry import KernelRegistry


def endpoint(info: dict[str, Any]) -> tuple[Any, ...]:
    """Where a kernel listens: transport, address and ports."""
    return (info.get("transport"), info.get("ip"), *(info.get(f"{c}_port") for c in
                                                     ("shell", "iopub", "stdin", "control", "hb")))


class Relocation:
    """Follows where each kernel of the registry listens."""

    def __init__(self, registry: KernelRegistry) -> None:
        self.registry = registry
        self.on_moved: list[Callable[[str], Awaitable[None]]] = []
        """Called with a kernel's id once it listens elsewhere (the notebooks' websockets)."""
        self._endpoints: dict[str, tuple[Any, ...]] = {}
        registry.on_first_use.append(self._first_seen)

    def _first_seen(self, kernel_id: str, km: Any) -> None:
        self._endpoints[kernel_id] = endpoint(km.get_connection_info())

    def forget(self, kernel_id: str) -> None:
        self._endpoints.pop(kernel_id, None)

    async def connection_changed(self, kernel_id: str) -> None:
        """After a resume or a restart: if the kernel now listens elsewhere, point
        jupyter_server's kernel manager, its activity tracking, the cell watcher and every
        notebook websocket at the new place."""
        registry = self.registry
        km = registry.km(kernel_id)
        provisioner = registry.provisioner(kernel_id)
        if provisioner is not None and provisioner.connection_info:
            info = dict(provisioner.connection_info)
            if endpoint(info) != endpoint(km.get_connection_info()):
                for port in port_names:  # load_connection_info only fills ports that are 0
                    setattr(km, port, 0)
                km.load_connection_info(info)  # the CurveZMQ keys too: the run's are the ones km holds
                km.cleanup_connection_file()  # the server's copy, which `--existing` clients read
                km.write_connection_file()
                upstream.close_control_socket(km)
        registry.note_placement(kernel_id)
        now = endpoint(km.get_connection_info())
        if self._endpoints.get(kernel_id) == now:
            return
        self._endpoints[kernel_id] = now
        last = activity.last_activity(km)
        kernels = registry.kernel_manager
        kernels.ports_changed(kernel_id)
        kernels.stop_buffering(kernel_id)  # a notebook reconnecting gets new streams
        kernels.stop_watching_activity(kernel_id)
        kernels.start_watching_activity(kernel_id)
        activity.restore_activity(km, last.timestamp() if last else None)
        registry.watcher.forget(kernel_id, keep_cells=True)
        registry.watcher.watch(kernel_id, km)
        for listener in self.on_moved:
            await listener(kernel_id)
