"""``GET /api/gpuckpt/gpus``: the host's GPUs as read now, who holds them and who waits."""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from typing import Any

from ..placement.gpus import GPUPool


async def gpus_model() -> dict[str, Any]:
    """Read off the event loop; ``read_at`` and ``reading_problem`` say when the figures were
    read and, if they are not fresh (NVML failed or did not answer within
    ``GPUPool.read_timeout``), why."""
    pool = GPUPool.instance()
    readings = await pool.readings()
    return {"node": socket.gethostname(),
            "gpus": [{**g.to_json(), "kernel_id": pool.holders.get(g.uuid)} for g in readings.gpus],
            "waiting": [{"kernel_id": k, "gpus": n} for k, n in pool.waiting.items()],
            "read_at": datetime.fromtimestamp(readings.read_at, timezone.utc).isoformat(),
            "reading_problem": readings.problem}
