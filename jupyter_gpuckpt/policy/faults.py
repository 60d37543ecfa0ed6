"""Failures in the policy's passes: each source fails alone, is counted, and is logged once.

A pass reads several sources (the GPUs, each pool's waiting requests, what each group holds,
each kernel) and acts on each kernel; any of them can fail: NVML, a Slurm command that times
out, a kernel shut down during the pass, a bug. What failed is left out of that pass, the rest
goes on, and the next pass tries again. A lasting cause would log the same traceback at every
pass (every 10 s): it is logged once with its traceback, then as one debug line per pass,
and once more when it works again. Every failure counts in
``jupyter_gpuckpt_policy_errors_total{source}``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from ..metrics import POLICY_ERRORS, POLICY_SOURCES

_WHAT = {"gpus": "the GPU reading", "demand": "reading the GPU requests waiting in {}",
         "groups": "reading what each group holds from {}", "kernel": "looking at kernel {}",
         "action": "acting on kernel {}", "parked": "suspending parked kernel {}",
         "staging": "settling the staging memory", "pass": "the policy pass"}
"""How the log names what failed, by source (``{}``: the subject), unless the caller says."""
KERNEL_SOURCES = ("kernel", "action", "parked")
"""Sources whose subject is a kernel id (forgotten with the kernel)."""


class PolicyFaults:
    """The causes failing now, by source and subject (a kernel id, a pool, a placement).

    Parameters
    ----------
    log
        Where failures and recoveries are logged.
    """

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self.log = log
        self._failing: dict[tuple[str, str], str] = {}

    def failed(self, source: str, subject: str, error: BaseException, what: str | None = None) -> None:
        """``source`` failed for ``subject`` with ``error``: count it, and log it (``what``
        failed, if said) unless the same cause was logged last time."""
        assert source in POLICY_SOURCES, source
        POLICY_ERRORS.labels(source).inc()
        cause = f"{type(error).__name__}: {error}"
        what = what or _WHAT[source].format(subject)
        if self._failing.get((source, subject)) == cause:
            self.log.debug("gpuckpt policy: %s still fails: %s", what, cause)
            return
        self._failing[(source, subject)] = cause
        self.log.error("gpuckpt policy: %s failed, left out of this pass (logged again when it works or fails "
                       "otherwise): %s", what, cause, exc_info=error)

    def worked(self, source: str, subject: str = "") -> None:
        """``source`` worked for ``subject``: if it was failing, say that it is over."""
        cause = self._failing.pop((source, subject), None)
        if cause is not None:
            self.log.info("gpuckpt policy: %s works again (it failed with %s)", _WHAT[source].format(subject), cause)

    def retain(self, kernel_ids: Collection[str]) -> None:
        """Forget the failures of kernels that are gone (shut down): nothing will recover them."""
        for key in [k for k in self._failing if k[0] in KERNEL_SOURCES and k[1] and k[1] not in kernel_ids]:
            del self._failing[key]
