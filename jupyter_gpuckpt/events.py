"""Lifecycle events (contract): versioned jupyter_events schemas, one per event.

The schemas live in ``event_schemas/<event>/v1.yaml``. :class:`~.app.GPUCheckpointApp`
registers them on the server's event logger at start-up, and the manager's
``emit(event, data)`` sends each event there, so browsers receive them through
jupyter_server's own ``/api/events/subscribe`` websocket and admins through any handler
configured on ``ServerApp.event_logger``.

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Emit = Callable[[str, dict[str, Any]], None]
"""``emit(event, data)``: how the manager reports each phase of each operation."""

#: The operations' events, by the name the manager passes to ``emit``; each has phases.
OPERATION_EVENTS = ("checkpoint", "suspend", "resume", "restore-after-failure")
#: Every event: the operations', and the policy's warnings and decisions to act.
EVENTS = (*OPERATION_EVENTS, "policy")
#: The phases of an operation; every operation event carries one.
PHASES = ("started", "progress", "released", "done", "failed", "writing", "write_failed", "durable")

SCHEMA_DIR = Path(__file__).parent / "event_schemas"
SCHEMA_URI = "https://events.jupyter.org/jupyter_gpuckpt"
VERSION = 1


def schema_id(event: str) -> str:
    """The ``$id`` of the current schema of ``event``, e.g. ``.../jupyter_gpuckpt/suspend/v1``."""
    if event not in EVENTS:
        raise ValueError(f"unknown gpuckpt event {event!r}; known: {', '.join(EVENTS)}")
    return f"{SCHEMA_URI}/{event}/v{VERSION}"


def schema_path(event: str) -> Path:
    """The YAML file that defines ``schema_id(event)``."""
    schema_id(event)  # checks the name
    return SCHEMA_DIR / event / f"v{VERSION}.yaml"


def register_schemas(serverapp: Any) -> None:
    """Register every event's schema on the server's ``jupyter_events.EventLogger``.

    Called by ``GPUCheckpointApp.initialize_settings``, before the server accepts event
    subscriptions: a websocket subscribing to all events listens only to the schemas
    registered when it opens.
    """
    for event in EVENTS:
        serverapp.event_logger.register_event_schema(schema_path(event))


def emit(serverapp: Any, event: str, data: dict[str, Any]) -> None:
    """Send one event to the server's event bus, which validates ``data`` against its schema.

    Raises
    ------
    jsonschema.ValidationError
        ``data`` does not fit the schema (only checked while someone listens).
    """
    serverapp.event_logger.emit(schema_id=schema_id(event), data=data)
