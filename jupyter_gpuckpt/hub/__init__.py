"""The JupyterHub service: every user's GPU kernels in one place, for admins and users.

``python -m jupyter_gpuckpt.hub`` is started by the hub as a managed service;
:func:`configure` registers it, its role and its scopes in ``jupyterhub_config.py``.

.. versionadded:: 0.2
"""

from .app import GPUCheckpointHubApp
from .hub_config import SERVICE_NAME, configure

__all__ = ["SERVICE_NAME", "GPUCheckpointHubApp", "configure"]
