"""Local placement: the kernel is a process on the server's host, with GPUs by UUID from
this server's pool.

While a kernel is suspended its process tree is gone and its GPUs are back in the pool, but
``poll()`` answers "alive", so jupyter_server keeps the kernel registered under the same id
and its restarter does not step in. While a resume starts the process again the provisioner
answers "alive" too: the resume watches that process itself (and fails at once if it ends),
rather than letting the restarter relaunch it behind the resume's back.
"""

from __future__ import annotations

import os
import socket
from subprocess import Popen
from typing import Any

from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Float, Int

from ..errors import ParkFailed, ParkUnsupported
from ..waiting import until
from . import parking
from .contract import START_SUSPENDED, GPUCheckpointProvisioner, GPUNeeds, Location
from .demand import Demand
from .gpus import GPU, GPUPool
from .processes import TAG, end_kernel_tree, ended

REAP_SECONDS = 5.0
"""How long an ended kernel process may take to be waitable (its threads end after it)."""


async def _reaped(process: Popen[bytes]) -> None:
    """Collect an ended child's exit status, so no zombie (nor an unreaped ``Popen``) stays."""
    await until(lambda: process.poll() is not None, REAP_SECONDS, 0.02)


class LocalPlacement(GPUCheckpointProvisioner, LocalProvisioner):
    """A :class:`LocalProvisioner` that assigns GPUs and can end and relaunch its process."""

    gpus = Int(
        None, allow_none=True, config=True,
        help="GPUs this kernel asks for (kernelspec metadata.kernel_provisioner.config.gpus). "
             "Default: 1 where the host has GPUs, else 0.",
    )
    stop_timeout = Float(5.0, config=True, help="Seconds a suspended kernel's processes get after SIGTERM "
                                                "before SIGKILL.")

    _launch: tuple[list[str], dict[str, Any]] | None = None
    _parked_gpus: list[str] = []
    """UUIDs of the GPUs a parked kernel left: the driver puts its memory back on them."""

    @property
    def has_process(self) -> bool:
        return self.suspended or super().has_process

    @property
    def pool(self) -> GPUPool:
        return GPUPool.instance()

    def location(self, readings: list[GPU] | None = None) -> Location:
        return Location("local", socket.gethostname(), None, self.pool.held_by(self.kernel_id, readings))

    @property
    def run_id(self) -> str | None:
        return None if self.pid is None else str(self.pid)

    @property
    def demand_pool(self) -> str:
        return f"local:{socket.gethostname()}"

    async def demand(self) -> Demand:
        """Kernels of this server waiting in its GPU pool (to start or to resume)."""
        waiting = dict(self.pool.waiting)
        return Demand(sum(waiting.values()), [f"kernel {k[:8]}" for k in waiting])

    def _wanted(self) -> int:
        if self.gpus is not None:
            return int(self.gpus)
        return 1 if self.pool.gpus else 0

    async def _take_gpus(self, env: dict[str, str], uuids: list[str] | None = None) -> None:
        wanted = len(uuids) if uuids else self._wanted()
        if wanted == 0:
            return

        def note_wait(count: int, free: int) -> None:
            self.waiting = (f"waiting for its GPU(s) {', '.join(uuids)}, lent while it was parked" if uuids
                            else f"waiting for {count} GPU(s); {free} free")
            self.log.warning("Kernel %s is %s", self.kernel_id, self.waiting)

        try:
            gpus = await self.pool.acquire(self.kernel_id, wanted, note_wait, uuids=uuids or ())
        finally:
            self.waiting = None
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)

    # -- park ----------------------------------------------------------------------------

    def _kernel_python(self) -> tuple[str, dict[str, Any]]:
        """The kernel's own Python (whose environment has cuda-bindings, not the server's)
        and its environment (its GPUs visible, as the driver needs them to unpark)."""
        assert self._launch is not None, "a kernel is parked only after it was launched"
        cmd, kwargs = self._launch
        return cmd[0], kwargs["env"]

    async def park_problem(self) -> str | None:
        if not self._runs():
            return "the kernel's process is not running"
        python, env = self._kernel_python()
        problem = await parking.park_support(python, env)
        if problem is None and not self.pool.held_by(self.kernel_id):
            return "the kernel holds no GPU"
        return problem

    async def park(self) -> None:
        python, env = self._kernel_python()
        assert self.process is not None
        await parking.park(self.process.pid, python, env)
        self._parked_gpus = [g.uuid for g in self.pool.held_by(self.kernel_id)]
        await self.pool.release(self.kernel_id)

    async def unpark(self) -> None:
        python, env = self._kernel_python()
        assert self.process is not None
        await self._take_gpus({}, self._parked_gpus)
        try:
            await parking.unpark(self.process.pid, python, env)
        except (ParkFailed, ParkUnsupported) as e:
            if getattr(e, "state", None) != "running":  # still parked, or ended next: the GPUs go back
                await self.pool.release(self.kernel_id)
            raise
        self._parked_gpus = []

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        kwargs = await super().pre_launch(**kwargs)
        kwargs["env"] = dict(kwargs.get("env") or os.environ)
        kwargs["env"][TAG] = self.kernel_id
        # Set by the server when it registers again a kernel that was suspended before a restart.
        if kwargs["env"].pop(START_SUSPENDED, None):
            self.suspended = True
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        self._launch = (cmd, kwargs)
        if self.suspended:  # registered again after a server restart: stays suspended
            return self.connection_info
        await self._take_gpus(kwargs["env"])
        return await super().launch_kernel(cmd, **kwargs)

    async def poll(self) -> int | None:
        return None if self.suspended or self.starting else await super().poll()

    async def running(self) -> bool:
        """Whether the kernel's process runs now (whatever ``poll`` tells jupyter_client)."""
        return self._runs()

    def lost(self) -> bool:
        """Whether the process has ended or is ending though nobody asked it to (it is not
        suspended, nor being started by a resume): its messages must not reach a next one."""
        return not (self.suspended or self.starting or self.process is None or self._runs())

    def _runs(self) -> bool:
        process = self.process
        return process is not None and process.poll() is None and not ended(process.pid)

    async def wait(self) -> int | None:
        if self.suspended:  # shutting down a suspended kernel: nothing to wait for
            self.suspended = False
            await self.pool.release(self.kernel_id)
            return 0
        return await super().wait()

    async def shutdown_requested(self, restart: bool = False) -> None:
        # Nothing runs: the kernel is gone at once, and a restart (the user's "Restart Kernel")
        # launches a fresh process with no state, as for any kernel.
        if self.suspended:
            self.suspended = False
            await self.pool.release(self.kernel_id)
        await super().shutdown_requested(restart)

    async def send_signal(self, signum: int) -> None:
        if not self.suspended:
            await super().send_signal(signum)

    async def kill(self, restart: bool = False) -> None:
        if not self.suspended:
            await super().kill(restart)

    async def terminate(self, restart: bool = False) -> None:
        if not self.suspended:
            await super().terminate(restart)

    async def cleanup(self, restart: bool = False) -> None:
        if not self.suspended:
            # The kernel ended (shut down, or died and is restarted): its children go with it.
            self.survivors = await end_kernel_tree(self.kernel_id, None, self.stop_timeout)
            await self.pool.release(self.kernel_id)
        await super().cleanup(restart)

    async def suspend(self) -> list[str]:
        """End the kernel's whole process tree and give its GPUs back; it stays registered.

        Returns the processes that survived (normally none); the GPUs go back to the pool
        only when nothing survived, since a survivor may still hold GPU memory.
        """
        self.suspended = True  # first, so poll() never reports the death we cause
        process = self.process
        self.survivors = await end_kernel_tree(self.kernel_id, process.pid if process else None, self.stop_timeout)
        if process is not None:
            await _reaped(process)
        self.process = None
        if not self.survivors:
            await self.pool.release(self.kernel_id)
        return self.survivors

    async def resume(self, needs: GPUNeeds) -> None:
        """Launch a fresh process on the same ports and from the same connection file (with
        the CurveZMQ keys the manager holds, if any), with GPUs from the pool (the checkpoint
        itself checks, as it loads, that they fit ``needs``)."""
        if not self.suspended:
            return
        assert self._launch is not None, "a kernel is resumed only after it was launched"
        cmd, kwargs = self._launch
        await self._take_gpus(kwargs["env"])
        self.starting = True
        self.suspended = False
        await super().launch_kernel(cmd, **kwargs)
