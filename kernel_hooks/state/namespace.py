"""Which names in the kernel's namespace are the user's variables.

IPython keeps its own entries there (``In``, ``Out``, ``_``, ``_i3``, ``exit`` ...); those are
either rebuilt by the restored kernel itself or restored separately as kernel state.
"""

from __future__ import annotations

import re
from typing import Any

_IPYTHON_NAMES = re.compile(r"^(_|__|___|_i+|_i\d+|_\d+|_ih|_oh|_dh|In|Out|exit|quit|get_ipython)$")


def user_variables(user_ns: dict[str, Any], hidden: dict[str, Any]) -> dict[str, Any]:
    """The user's variables: everything but dunder names and IPython's own entries.

    Parameters
    ----------
    user_ns
        The shell's ``user_ns``.
    hidden
        The shell's ``user_ns_hidden``: names present when the kernel started, which
        ``%who`` hides too. A hidden name the user re-bound counts as the user's.
    """
    return {
        name: value
        for name, value in user_ns.items()
        if not (name.startswith("__") and name.endswith("__"))
        and not _IPYTHON_NAMES.match(name)
        and not (name in hidden and hidden[name] is value)
    }
