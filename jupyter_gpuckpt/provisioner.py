"""The kernel provisioner: GPUs by UUID, and a kernel that can be suspended and resumed.

Selected by a kernelspec's ``metadata.kernel_provisioner`` (``jupyter gpuckpt
install-kernelspec`` writes one). While a kernel is suspended its process is gone and its
GPUs are back in the pool, but ``poll()`` answers "alive", so jupyter_server keeps the
kernel registered under the same id and its restarter does not step in.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Int

from .gpus import GPUPool

START_SUSPENDED = "JUPYTER_GPUCKPT_START_SUSPENDED"


class GPUCheckpointProvisioner(LocalProvisioner):
    """A :class:`LocalProvisioner` that assigns GPUs and can end and relaunch its process."""

    gpus = Int(
        None, allow_none=True, config=True,
        help="GPUs this kernel asks for (kernelspec metadata.kernel_provisioner.config.gpus). "
             "Default: 1 where the host has GPUs, else 0.",
    )
    stop_timeout = Int(5, config=True, help="Seconds to wait after SIGTERM before SIGKILL on suspend.")

    suspended = False
    waiting_for_gpus: str | None = None
    _launch: tuple[list[str], dict[str, Any]] | None = None

    @property
    def has_process(self) -> bool:
        return self.suspended or super().has_process

    @property
    def pool(self) -> GPUPool:
        return GPUPool.instance()

    def _wanted(self) -> int:
        if self.gpus is not None:
            return int(self.gpus)
        return 1 if self.pool.gpus else 0

    async def _take_gpus(self, env: dict[str, str]) -> None:
        wanted = self._wanted()
        if wanted == 0:
            return

        def note_wait(count: int, free: int) -> None:
            self.waiting_for_gpus = f"waiting for {count} GPU(s); {free} free"
            self.log.warning("Kernel %s is %s", self.kernel_id, self.waiting_for_gpus)

        gpus = await self.pool.acquire(self.kernel_id, wanted, note_wait)
        self.waiting_for_gpus = None
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        kwargs = await super().pre_launch(**kwargs)
        kwargs["env"] = dict(kwargs.get("env") or {})
        # Set by the server when it re-registers a kernel that was suspended before a restart.
        if kwargs["env"].pop(START_SUSPENDED, None):
            self.suspended = True
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        self._launch = (cmd, kwargs)
        if self.suspended:  # re-registered after a server restart: stays suspended
            return self.connection_info
        await self._take_gpus(kwargs["env"])
        return await super().launch_kernel(cmd, **kwargs)

    async def poll(self) -> int | None:
        return None if self.suspended else await super().poll()

    async def wait(self) -> int | None:
        if self.suspended:  # shutting down a suspended kernel: nothing to wait for
            self.suspended = False
            await self.pool.release(self.kernel_id)
            return 0
        return await super().wait()

    async def shutdown_requested(self, restart: bool = False) -> None:
        if self.suspended and not restart:  # nothing runs: the kernel is gone at once
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
            await self.pool.release(self.kernel_id)
        await super().cleanup(restart)

    async def suspend(self) -> None:
        """End the kernel's process and give its GPUs back; it stays registered."""
        self.suspended = True  # first, so poll() never reports the death we cause
        process = self.process
        if process is not None:
            process.send_signal(signal.SIGTERM)
            for _ in range(self.stop_timeout * 10):
                if process.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                process.kill()
            await asyncio.get_running_loop().run_in_executor(None, process.wait)
            self.process = None
        await self.pool.release(self.kernel_id)

    async def resume(self) -> None:
        """Launch a fresh process on the same ports (and GPUs from the pool) again."""
        if not self.suspended:
            return
        assert self._launch is not None, "a kernel is resumed only after it was launched"
        cmd, kwargs = self._launch
        await self._take_gpus(kwargs["env"])
        self.suspended = False
        await super().launch_kernel(cmd, **kwargs)
