"""Which names in the kernel's namespace are the user's variables.

IPython keeps its own entries there (``In``, ``Out``, ``_``, ``_i3``, ``exit`` ...); those are
either rebuilt by the restored kernel itself or restored separately as kernel state. So are the
globals a compiler generated there (see :mod:`.compiler_globals`).
"""

from __future__ import annotations

import re
from typing import Any

from . import compiler_globals

_IPYTHON_NAMES = re.compile(r"^(_|__|___|_i+|_i\d+|_\d+|_ih|_oh|_dh|In|Out|exit|quit|get_ipython)$")


def user_variables(user_ns: dict[str, Any], hidden: dict[str, Any]) -> dict[str, Any]:
    """The user's variables: everything but dunder names, IPython's own entries and the
    globals torch's dynamo generated.

    Parameters
    ----------
    user_ns
        The shell's ``user_ns``.
    hidden
        The shell's ``user_ns_hidden``: names present when the kernel started, which
        ``%who`` hides too. A hidden name the user re-bound counts as the user's.
    """
    generated = compiler_globals.generated(user_ns)
    return {
        name: value
        for name, value in user_ns.items()
        if not (name.startswith("__") and name.endswith("__"))
        and not _IPYTHON_NAMES.match(name)
        and not (name in hidden and hidden[name] is value)
        and name not in generated
    }
