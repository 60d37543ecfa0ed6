"""Reading every user server's kernels, and operating them, with the service's token.

Each user server answers its own ``/api/gpuckpt/kernels`` (the models of README's REST
API), ``/api/sessions`` (which notebook each kernel serves) and ``/metrics``. The service's
role grants ``access:servers``, which the single-user servers accept as full access.

GPU-hours given back come from each server's own ``jupyter_gpuckpt_released_gpu_seconds``
counter: the GPUs each suspend actually released times how long, counted when the kernel
is resumed or shut down (or its server stops). It is the honest figure: a suspended
kernel's model lists no GPUs (it holds none), so ``suspended_for`` alone cannot say how many
it gave back. The counter starts again at 0 with each server process (the hub's culler
stops servers), so the collector adds up what each server reported across restarts, like
Prometheus' ``increase()``, for as long as the service runs.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from prometheus_client.parser import text_string_to_metric_families

from ..rest_client import RestClient, RestError
from .errors import KernelNotFound, ServerUnavailable, WrongState
from .hub_api import HubUser, UserServer

KERNEL_FIELDS = ("id", "kernelspec", "state", "execution_state", "node", "placement", "gpus", "idle_seconds",
                 "last_activity", "last_checkpoint", "suspended_for", "parked_for", "last_error", "notice", "policy")
"""What a row keeps of a user server's kernel model (README's REST API)."""
POLICY_FIELDS = ("reclaim", "idle_timeout", "cpu_idle_timeout", "rhythm", "warn_before", "group", "group_floors",
                 "user_overridable", "refused_overrides", "suspend_on_stop")
"""What a report keeps of a user server's ``/api/gpuckpt/policy``: whether the admin's policy
holds there, and which of the user's kernelspec settings it refused."""
RELEASED_SECONDS = "jupyter_gpuckpt_released_gpu_seconds"
RELEASED_GPUS = "jupyter_gpuckpt_released_gpus"


@dataclass
class ServerReport:
    """One user server, as read now: its kernels, its GPU figures, or why it could not be read."""

    user: str
    server: str
    url: str
    kernels: list[dict[str, Any]] = field(default_factory=list)
    policy: dict[str, Any] = field(default_factory=dict)
    """The server's policy as it applies it (:data:`POLICY_FIELDS`)."""
    released_gpu_seconds: float = 0.0
    """Since the service started, over all this server's processes (see the module's doc)."""
    released_gpus: float = 0.0
    """GPUs its suspended kernels give back now."""
    error: str | None = None


def _figures(text: str) -> tuple[float | None, float]:
    """(released GPU-seconds counter, released GPUs gauge) from a ``/metrics`` page."""
    seconds, gpus = None, 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{RELEASED_SECONDS}_total":
                seconds = float(sample.value)
            elif sample.name == RELEASED_GPUS:
                gpus = float(sample.value)
    return seconds, gpus


class KernelCollector:
    """Reads and operates user servers through the hub's proxy.

    Parameters
    ----------
    proxy_url
        The hub's public address as the service reaches it (``http://127.0.0.1:8000``):
        user servers' paths from the hub are joined to it.
    token
        The service's API token.
    timeout, operation_timeout
        Seconds a read, and a suspend or resume (which waits for the result), may take.
    concurrency
        User servers read at once.
    """

    def __init__(self, proxy_url: str, token: str, timeout: float, operation_timeout: float,
                 concurrency: int) -> None:
        self._client = RestClient(proxy_url, token, timeout, name="a user's server")
        self.timeout = timeout
        self.operation_timeout = operation_timeout
        self._limit = asyncio.Semaphore(concurrency)
        # (user, server) -> (counter last read, GPU-seconds added up over its processes)
        self._released: dict[tuple[str, str], tuple[float, float]] = {}

    async def _request(self, server: UserServer, path: str, method: str = "GET",
                       timeout: float | None = None) -> tuple[int, str]:
        try:
            answer = await self._client.fetch(method, urljoin(server.url, path), timeout=timeout or self.timeout,
                                              errors=False)
        except RestError as e:
            raise ServerUnavailable(f"{server.user}'s server cannot be reached: {e.reason}") from e
        body = answer.body.decode("utf-8", "replace")
        if answer.code >= 300 and answer.code not in (404, 409):
            raise ServerUnavailable(f"{server.user}'s server answered {answer.code} to {path}: {_message(body)}")
        return answer.code, body

    async def _read(self, server: UserServer) -> ServerReport:
        report = ServerReport(server.user, server.name, server.url)
        try:
            async with self._limit:
                code, kernels = await self._request(server, "api/gpuckpt/kernels")
                if code == 404:
                    raise ServerUnavailable(f"{server.user}'s server does not run the jupyter_gpuckpt extension")
                _, sessions = await self._request(server, "api/sessions")
                _, metrics = await self._request(server, "metrics")
        except ServerUnavailable as e:
            report.error = str(e)
            return report
        notebooks = {s["kernel"]["id"]: s.get("path") for s in json.loads(sessions or "[]") if s.get("kernel")}
        report.kernels = [{"user": server.user, "server": server.name, "notebook": notebooks.get(model["id"]),
                           **{key: model.get(key) for key in KERNEL_FIELDS}} for model in json.loads(kernels)]
        report.policy = await self._policy(server)
        counter, report.released_gpus = _figures(metrics)
        report.released_gpu_seconds = self._add_up((server.user, server.name), counter)
        return report

    async def _policy(self, server: UserServer) -> dict[str, Any]:
        """The server's policy, or nothing where it cannot be read: its kernels are listed anyway."""
        try:
            async with self._limit:
                code, body = await self._request(server, "api/gpuckpt/policy")
            found = json.loads(body) if code == 200 else {}
        except (ServerUnavailable, ValueError):
            return {}
        return {key: value for key, value in found.items() if key in POLICY_FIELDS} if isinstance(found, dict) else {}

    def _add_up(self, key: tuple[str, str], counter: float | None) -> float:
        """The server's GPU-seconds over its processes: a counter below its last reading is a new process."""
        last, total = self._released.get(key, (0.0, 0.0))
        if counter is None:
            return total
        total += counter - last if counter >= last else counter
        self._released[key] = (counter, total)
        return total

    async def collect(self, users: list[HubUser]) -> list[ServerReport]:
        """Every server of ``users``, read concurrently; a server that fails says why in its report."""
        return list(await asyncio.gather(*(self._read(s) for user in users for s in user.servers)))

    async def operate(self, user: HubUser, kernel_id: str, action: str) -> dict[str, Any]:
        """``suspend`` or ``resume`` the user's kernel ``kernel_id`` (a checked id) and wait for
        the result: the kernel's model with ``outcome``, as its server answers it."""
        for server in user.servers:
            code, body = await self._request(server, f"api/gpuckpt/kernels/{kernel_id}/{action}?wait=1", "POST",
                                             timeout=self.operation_timeout)
            if code == 409:
                raise WrongState(_message(body))
            if code != 404:
                answer: dict[str, Any] = json.loads(body)
                return {"user": user.name, "server": server.name, **answer}
        raise KernelNotFound(f"{user.name} has no kernel {kernel_id}")


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message") or body[:200])
    except (ValueError, AttributeError):
        return body[:200]
