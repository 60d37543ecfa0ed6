"""The server side's parts, built once per server, each given the parts below it.

::

    KernelRegistry                     kernels/registry.py (records, ledger, settings)
      Retention, Relocation            staging/retention.py, kernels/relocation.py
        WriteBehind                    staging/write_behind.py
          KernelOperations, Failover   operations/actions.py, operations/failover.py
            Restarts                   operations/restarts.py

Nothing below this module knows of it; the extension, its handlers, websockets and the
policy are given the parts they use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..events import Emit
from ..kernels.ledger import Ledger
from ..kernels.records import KernelRecords
from ..kernels.registry import KernelRegistry
from ..kernels.relocation import Relocation
from ..kernels.settings import Settings
from ..operations.actions import KernelOperations
from ..operations.failover import Failover
from ..operations.restarts import Restarts
from ..staging.host_memory import HostMemory
from ..staging.retention import Retention
from ..staging.write_behind import WriteBehind
from ..tasks import BackgroundTasks


@dataclass
class ServerParts:
    """One server's parts, bottom to top."""

    registry: KernelRegistry
    retention: Retention
    relocation: Relocation
    write_behind: WriteBehind
    operations: KernelOperations
    failover: Failover
    restarts: Restarts
    host_memory: HostMemory
    tasks: BackgroundTasks


def build(kernel_manager: Any, session_manager: Any, settings: Settings, ledger: Ledger, host_memory: HostMemory,
          emit: Emit, tasks: BackgroundTasks) -> ServerParts:
    """The parts over jupyter_server's kernel and session managers.

    Parameters
    ----------
    kernel_manager
        The server's ``MappingKernelManager``.
    session_manager
        The server's ``SessionManager`` (a suspended kernel's notebook is attached again to
        it after a restart), or None.
    settings
        Store, retention and deadlines.
    ledger
        Where suspended kernels are remembered across restarts.
    host_memory
        Where suspends stage the kernel's state.
    emit
        ``emit(event, data)`` for lifecycle events (see ``events.py``).
    tasks
        Where background work (failovers, write-behinds) runs.
    """
    registry = KernelRegistry(kernel_manager, session_manager, KernelRecords(ledger), settings)
    retention = Retention(registry, host_memory)
    relocation = Relocation(registry)
    write_behind = WriteBehind(registry, retention, host_memory, tasks, emit)
    below = (registry, relocation, retention, write_behind, host_memory, tasks, emit)
    operations = KernelOperations(*below)
    failover = Failover(*below)
    restarts = Restarts(registry, operations, write_behind, host_memory, tasks.log)
    return ServerParts(registry, retention, relocation, write_behind, operations, failover, restarts, host_memory,
                       tasks)
