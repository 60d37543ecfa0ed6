"""Server side of jupyter-gpuckpt: the extension, the provisioner, REST, CLI (see DESIGN.md).

The checkpoint engine itself runs inside kernels, in the ``kernel_hooks`` package.
"""

from typing import Any

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .extension.app import GPUCheckpointApp

    return [{"module": "jupyter_gpuckpt", "app": GPUCheckpointApp}]
