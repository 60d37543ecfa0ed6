"""The wire names between the server and the kernel side, spelled once for both: the server's
calls into a kernel, the environment the server gives a kernel, and the one-line JSON answers
of the helper processes it runs (``python -m kernel_hooks.write_behind``, ``.cuda_park``).

The server (``jupyter_gpuckpt.kernels.kernel_calls``) sends a :data:`REQUEST` on the kernel's shell
channel, its content ``{"call": NAME, "args": {...}}``; the kernel
(``kernel_hooks.ipython.server_calls``) answers on IOPub, the request as parent:
:data:`PROGRESS` messages while it works, then one :data:`REPLY`. They are message types of
their own, not comms, so that jupyter_server can leave them out of the user's activity
(:data:`MESSAGE_TYPES` go into its kernel manager's ``untracked_message_types``) without
leaving out a user's widgets.
"""

from __future__ import annotations

from typing import Any

from .errors import CheckpointNotFound, IntegrityError, RestoreError

REQUEST = "gpuckpt_request"
"""Shell: run a call. Content ``{"call": NAME, "args": {...}}``."""
PROGRESS = "gpuckpt_progress"
"""IOPub: ``{"progress": {"done": BYTES, "total": BYTES}}``, or ``{"working": true}`` when a
call has no bytes to count (importing libraries, unpickling, running cells)."""
REPLY = "gpuckpt_reply"
"""IOPub, one per request: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": TEXT,
"kind": NAME}``. A kernel that goes idle after a request without one has no handler for it."""
COMMS_KEPT = "comms_kept"
"""An argument of the ``restore`` call, true or false (false if left out): whether the
notebook's page still holds the comms the checkpointed kernel had open, under their ids. After
a resume it does (the websocket held the page's messages; the page never saw the kernel go), so
the objects with a comm take theirs back silently; after a failover (the page saw the kernel
restart, and dropped them) or in a fresh kernel it does not, and they open new ones."""
MESSAGE_TYPES = (REQUEST, PROGRESS, REPLY)
"""Every type a call sends: none of them is the user's activity."""
REGISTER = "__import__('kernel_hooks.ipython.server_calls').ipython.server_calls.register(get_ipython())"
"""The one statement the server runs, as a silent user expression, in a kernel that has
``kernel_hooks`` but did not load it at start: it registers the handler of :data:`REQUEST`."""


# -- the environment the server gives a kernel's processes -------------------------------

KERNEL_ENV = "JUPYTER_GPUCKPT_KERNEL"
"""The kernel's id: in every process of the kernel (how its whole tree is found and ended),
and recorded in the checkpoints it takes."""
KERNELSPEC_ENV = "JUPYTER_GPUCKPT_KERNELSPEC"
"""The kernelspec's name, recorded in the checkpoints (optional)."""
ON_TERM_ENV = "JUPYTER_GPUCKPT_ON_TERM"
"""Where a kernel writes its exit note after checkpointing on SIGTERM; arms that handler."""

# -- the answers of the helper processes -------------------------------------------------

PERMANENT_ERRORS = (IntegrityError, CheckpointNotFound, RestoreError)
"""Failures another attempt cannot mend: the copy is damaged or unreadable."""
PARK_UNSUPPORTED = "unsupported"
"""``kind`` of a park helper's refusal: this kernel or machine cannot park (nothing changed)."""
PARK_FAILED = "failed"
"""``kind`` of a park helper's failure part way (``state`` says where the process is)."""


def succeeded(**fields: Any) -> dict[str, Any]:
    """A helper's answer when it did its work."""
    return {"ok": True, **fields}


def failed(error: str, kind: str | None = None, **fields: Any) -> dict[str, Any]:
    """A helper's answer when it did not: ``error`` for the user, ``kind`` for the server."""
    return {"ok": False, "error": error, **({"kind": kind} if kind else {}), **fields}


def failed_with(error: BaseException, **fields: Any) -> dict[str, Any]:
    """:func:`failed` for an exception; ``permanent`` says whether trying again can help."""
    return failed(str(error), type(error).__name__, permanent=isinstance(error, PERMANENT_ERRORS), **fields)
