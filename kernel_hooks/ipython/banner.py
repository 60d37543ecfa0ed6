"""The kernel's banner, built so that no request for it draws from the user's ``random``."""

from __future__ import annotations

import random
from typing import Any


def keep_one_tip(shell: Any) -> None:
    """Pick the banner's tip once, now, and keep it, with the user's ``random`` put back.

    IPython 9 picks a tip with ``random.choice`` each time it builds the banner, which is
    for every ``kernel_info_request``: the server sends them before each call into the
    kernel, so a checkpoint moved the user's seeded stream. IPython shows ``banner2``
    instead of picking (one blank line above it); ``enable_tip`` off says the same.
    """
    if not getattr(shell, "enable_tip", False) or shell.banner2:
        return  # IPython 8 has no tips; a banner2 of the user's is shown without one
    from IPython.core.tips import pick_tip

    state = random.getstate()
    try:
        tip = pick_tip()
    finally:
        random.setstate(state)
    shell.banner2 = f"Tip: {tip}\n"
    shell.enable_tip = False
