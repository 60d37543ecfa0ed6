"""Prometheus metrics of the whole hub (contract: names and labels), at ``/services/gpuckpt/metrics``.

Computed at scrape time from one reading of every user server, in a registry of the
service's own (not prometheus_client's global one): the figures are the users', not this
process's. Every series is per user; ``sum()`` in PromQL gives the hub's total.

=================================================== ======= ==================
name                                                type    labels
=================================================== ======= ==================
``jupyter_gpuckpt_hub_kernels``                     gauge   ``user``, ``state``
``jupyter_gpuckpt_hub_gpus_held``                   gauge   ``user``
``jupyter_gpuckpt_hub_released_gpus``               gauge   ``user``
``jupyter_gpuckpt_hub_released_gpu_seconds_total``  counter ``user``
``jupyter_gpuckpt_hub_server_up``                   gauge   ``user``, ``server``
=================================================== ======= ==================

.. versionadded:: 0.2
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .collect import ServerReport


class _Reading(Collector):
    """One scrape's figures, from the servers' reports."""

    def __init__(self, reports: list[ServerReport]) -> None:
        self.reports = reports

    def collect(self) -> Iterable[Metric]:
        kernels = GaugeMetricFamily("jupyter_gpuckpt_hub_kernels", "Users' kernels by gpuckpt lifecycle state.",
                                    labels=["user", "state"])
        held = GaugeMetricFamily("jupyter_gpuckpt_hub_gpus_held", "GPUs users' kernels hold now.", labels=["user"])
        released = GaugeMetricFamily("jupyter_gpuckpt_hub_released_gpus",
                                     "GPUs users' suspended kernels give back now.", labels=["user"])
        seconds = CounterMetricFamily(
            "jupyter_gpuckpt_hub_released_gpu_seconds",
            "GPU-seconds users' suspended kernels gave back (counted at resume or shutdown), added up over "
            "their servers' restarts since this service started.", labels=["user"])
        up = GaugeMetricFamily("jupyter_gpuckpt_hub_server_up", "1 if the user server answered this scrape.",
                               labels=["user", "server"])
        states: Counter[tuple[str, str]] = Counter()
        per_user: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for report in self.reports:
            up.add_metric([report.user, report.server], 0 if report.error else 1)
            figures = per_user[report.user]
            figures[1] += report.released_gpus
            figures[2] += report.released_gpu_seconds
            for kernel in report.kernels:
                states[report.user, str(kernel["state"])] += 1
                figures[0] += len(kernel.get("gpus") or ())
        for (user, state), count in sorted(states.items()):
            kernels.add_metric([user, state], count)
        for user, (gpus, gpus_released, gpu_seconds) in sorted(per_user.items()):
            held.add_metric([user], gpus)
            released.add_metric([user], gpus_released)
            seconds.add_metric([user], gpu_seconds)
        return [kernels, held, released, seconds, up]


def exposition(reports: list[ServerReport]) -> bytes:
    """The text format Prometheus scrapes, for these reports."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Reading(reports))
    return generate_latest(registry)
