"""The wire names of the server's calls into a kernel, spelled once for both sides.

The server (``jupyter_gpuckpt.kernels.kernel_calls``) sends a :data:`REQUEST` on the kernel's shell
channel, its content ``{"call": NAME, "args": {...}}``; the kernel
(``kernel_hooks.ipython.server_calls``) answers on IOPub, the request as parent:
:data:`PROGRESS` messages while it works, then one :data:`REPLY`. They are message types of
their own, not comms, so that jupyter_server can leave them out of the user's activity
(:data:`MESSAGE_TYPES` go into its kernel manager's ``untracked_message_types``) without
leaving out a user's widgets.
"""

from __future__ import annotations

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
