"""Prometheus metrics (contract: names and labels), served in the server's own ``/metrics``.

jupyter_server serves prometheus_client's default ``REGISTRY`` at ``/metrics``, so the
metrics are created there once, when this module is first imported, as jupyter_server's
own ``prometheus/metrics.py`` does; every server in the process then shares them (tests
start several). Per-server state lives in :class:`ServerMetrics`, one per
:class:`~.app.GPUCheckpointApp`, fed by the app's ``emit`` with every lifecycle event.

=============================================== ======= ==============================
name                                            type    labels
=============================================== ======= ==============================
``jupyter_gpuckpt_kernels``                     gauge   ``state``
``jupyter_gpuckpt_released_gpus``               gauge
``jupyter_gpuckpt_released_gpu_seconds_total``  counter
``jupyter_gpuckpt_checkpoint_duration_seconds`` histo   ``operation``: checkpoint, suspend
``jupyter_gpuckpt_checkpoint_size_bytes``       histo   ``kind``: total, written
``jupyter_gpuckpt_restore_duration_seconds``    histo   ``operation``: resume, restore-after-failure
``jupyter_gpuckpt_operations_total``            counter ``event``, ``outcome``: done, failed
``jupyter_gpuckpt_policy_actions_total``        counter ``action``, ``cause``
``jupyter_gpuckpt_policy_errors_total``         counter ``source``: :data:`POLICY_SOURCES`
=============================================== ======= ==============================

.. versionadded:: 0.1
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .events import OPERATION_EVENTS
from .kernels.lifecycle import State

STATES = tuple(s.value for s in State)
_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

CHECKPOINT_SECONDS = Histogram(
    "jupyter_gpuckpt_checkpoint_duration_seconds",
    "Seconds a successful checkpoint took, from request to checkpoint written "
    "(operation=suspend includes ending the kernel's process).",
    ["operation"],
    buckets=_SECONDS_BUCKETS,
)
CHECKPOINT_BYTES = Histogram(
    "jupyter_gpuckpt_checkpoint_size_bytes",
    "Bytes per successful checkpoint: kind=total is the state it holds, kind=written what was "
    "actually written (blobs already in the store are not written again).",
    ["kind"],
    buckets=tuple(float(2**n) for n in range(10, 40, 2)),  # 1 KiB .. 256 GiB
)
RESTORE_SECONDS = Histogram(
    "jupyter_gpuckpt_restore_duration_seconds",
    "Seconds a successful restore took: a resume (process launch and restore) or a restore "
    "after the kernel's process died.",
    ["operation"],
    buckets=_SECONDS_BUCKETS,
)
GPU_SECONDS_RELEASED = Counter(
    "jupyter_gpuckpt_released_gpu_seconds",
    "GPU-seconds given back to the pool by suspended kernels (seconds suspended times GPUs "
    "released), counted when the kernel is resumed or shut down.",
)
OPERATIONS = Counter(
    "jupyter_gpuckpt_operations",
    "Lifecycle operations that ended, by event and outcome.",
    ["event", "outcome"],
)
POLICY_ACTIONS = Counter(
    "jupyter_gpuckpt_policy_actions",
    "What the policy did or announced, by action (warn, suspend, kept: a user's Keep running) "
    "and cause (idle: the kernel's idle limit; demand: someone waited for a GPU; user).",
    ["action", "cause"],
)
POLICY_SOURCES = ("gpus", "demand", "groups", "kernel", "action", "parked", "staging", "pass")
"""What a policy pass reads or does, each failing alone (see :mod:`.policy_faults`)."""
POLICY_ERRORS = Counter(
    "jupyter_gpuckpt_policy_errors",
    "Failures in the policy's passes, by source: gpus (the GPU reading failed or did not answer: kernels on "
    "those GPUs are not suspended that pass), demand (a pool's waiting GPU requests: squeue), groups (what "
    "each group holds), kernel (looking at one kernel), action (a suspend, warning, checkpoint or conversion "
    "the policy decided), parked (suspending parked kernels over the host memory limit), pass (anything else). "
    "What failed is left out of that pass; the rest goes on, and the next pass tries again.",
    ["source"],
)

# Create every labelled series now, so that each is scraped (as 0) before it first happens.
for _operation in ("checkpoint", "suspend"):
    CHECKPOINT_SECONDS.labels(_operation)
for _kind in ("total", "written"):
    CHECKPOINT_BYTES.labels(_kind)
for _operation in ("resume", "restore-after-failure"):
    RESTORE_SECONDS.labels(_operation)
for _event in OPERATION_EVENTS:
    for _outcome in ("done", "failed"):
        OPERATIONS.labels(_event, _outcome)
for _source in POLICY_SOURCES:
    POLICY_ERRORS.labels(_source)


class ServerMetrics:
    """One server's metrics: its kernels by state, and its suspended kernels' GPUs.

    Parameters
    ----------
    app
        The server's ``GPUCheckpointApp``; read at scrape time (``app.parts.registry.records``,
        ``app.serverapp.kernel_manager``) and held weakly, so a stopped server is dropped.

    GPU-seconds are known only for suspends this server saw: kernels re-registered as
    suspended after a server restart count in the kernels gauge but not in the GPU metrics.
    """

    def __init__(self, app: Any) -> None:
        self._app = weakref.ref(app)
        # kernel id -> (time its GPUs went back to the pool, how many)
        self.suspended: dict[str, tuple[float, int]] = {}
        self._resuming: dict[str, int] = {}

    def observe(self, event: str, data: dict[str, Any], now: float | None = None) -> None:
        """Update the metrics with one lifecycle event; called by the app's ``emit``."""
        now = time.time() if now is None else now
        kernel_id, phase = data.get("kernel_id", ""), data.get("phase")
        if phase in ("done", "failed"):
            OPERATIONS.labels(event, phase).inc()
        if event == "suspend" and phase == "done":
            self.suspended[kernel_id] = (now, int(data.get("gpus_released", 0)))
        elif event == "resume" and phase == "started":
            self._resuming[kernel_id] = self._end_suspension(kernel_id, now)
        elif event == "resume" and phase == "failed":
            # the relaunched process was ended again: its GPUs are back in the pool
            self.suspended[kernel_id] = (now, self._resuming.pop(kernel_id, 0))
        elif event == "resume" and phase == "done":
            self._resuming.pop(kernel_id, None)
        if event == "policy":
            cause = "user" if data["action"] == "kept" else "demand" if data.get("for_demand") else "idle"
            POLICY_ACTIONS.labels(data["action"], cause).inc()
        if phase == "done":
            self._observe_done(event, data)

    @staticmethod
    def _observe_done(event: str, data: dict[str, Any]) -> None:
        seconds = data.get("seconds")
        if event in ("checkpoint", "suspend"):
            if seconds is not None:
                CHECKPOINT_SECONDS.labels(event).observe(seconds)
            for kind, field in (("total", "bytes"), ("written", "bytes_written")):
                if field in data:
                    CHECKPOINT_BYTES.labels(kind).observe(data[field])
        elif seconds is not None:
            RESTORE_SECONDS.labels(event).observe(seconds)

    def _end_suspension(self, kernel_id: str, now: float) -> int:
        """Count a suspension's GPU-seconds; answer how many GPUs it had released."""
        since, gpus = self.suspended.pop(kernel_id, (now, 0))
        GPU_SECONDS_RELEASED.inc(max(0.0, now - since) * gpus)
        return gpus

    def stop(self, now: float | None = None) -> None:
        """The server stops: count its suspensions' GPU-seconds until now and report it no
        more (left to the garbage collector, a stopped server could be scraped later and
        bill the time since as GPU-seconds released)."""
        now = time.time() if now is None else now
        for kernel_id in list(self.suspended):
            self._end_suspension(kernel_id, now)
        COLLECTOR.servers.discard(self)

    def kernel_states(self, now: float | None = None) -> tuple[dict[str, int], int]:
        """Kernels by state and GPUs released now, counting kernels shut down while suspended."""
        counts = dict.fromkeys(STATES, 0)
        app = self._app()
        if app is None:
            return counts, 0
        records = app.parts.registry.records
        live = set(app.serverapp.kernel_manager.list_kernel_ids())
        for kernel_id in live:
            record = records.get(kernel_id)
            counts[record.state.value if record is not None else State.RUNNING.value] += 1
        # A suspended kernel that was shut down released its GPUs until then; we learn of
        # it here, at the latest one scrape interval after the shutdown.
        now = time.time() if now is None else now
        for kernel_id in [k for k in self.suspended if k not in live]:
            self._end_suspension(kernel_id, now)
        return counts, sum(gpus for _, gpus in self.suspended.values())


class GPUCheckpointCollector(Collector):
    """Computes the gauges at scrape time from every live server's :class:`ServerMetrics`."""

    def __init__(self) -> None:
        self.servers: weakref.WeakSet[ServerMetrics] = weakref.WeakSet()

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily("jupyter_gpuckpt_kernels", "Kernels by gpuckpt lifecycle state "
                                  "(kernels it has no record of count as running).", labels=["state"]),
                GaugeMetricFamily("jupyter_gpuckpt_released_gpus",
                                  "GPUs that suspended kernels have given back to the pool."))

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        kernels, released = self._families()
        counts = dict.fromkeys(STATES, 0)
        gpus = 0
        for server in list(self.servers):
            server_counts, server_gpus = server.kernel_states()
            gpus += server_gpus
            for state, count in server_counts.items():
                counts[state] += count
        for state, count in counts.items():
            kernels.add_metric([state], count)
        released.add_metric([], gpus)
        return [kernels, released]


COLLECTOR = GPUCheckpointCollector()
REGISTRY.register(COLLECTOR)


def track(app: Any) -> ServerMetrics:
    """Start the metrics of one server; the app keeps the answer and feeds it its events."""
    server = ServerMetrics(app)
    COLLECTOR.servers.add(server)
    return server
