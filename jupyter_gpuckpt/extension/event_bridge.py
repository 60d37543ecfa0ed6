"""The one way the server's parts report lifecycle events: each is logged, counted in the
metrics and sent to jupyter_server's event bus (``events.py`` has the schemas)."""

from __future__ import annotations

import logging
from typing import Any

from .. import events, metrics


class EventBridge:
    """``emit(event, data)`` for the parts (:data:`~..events.Emit`).

    Parameters
    ----------
    serverapp
        Whose ``event_logger`` the events go to.
    tracked
        The metrics the events are counted in.
    log
        Where each event is logged, and an event that cannot be sent.
    """

    def __init__(self, serverapp: Any, tracked: metrics.ServerMetrics,
                 log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.serverapp = serverapp
        self.tracked = tracked
        self.log = log

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        """``data`` must fit the event's schema in ``event_schemas/<event>/v1.yaml``."""
        self.log.info("gpuckpt %s: %s", event, data)
        try:
            self.tracked.observe(event, data)
            events.emit(self.serverapp, event, data)
        except Exception:  # a bad event must not break the kernel operation that reports it
            self.log.exception("gpuckpt could not emit %s event %s", event, data)
