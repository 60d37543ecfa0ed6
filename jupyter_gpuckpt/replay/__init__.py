"""Trace replay: notebook sessions through the project's policy on a simulated clock and cluster."""

from .costs import CostModel
from .formats import TraceFormatError, read_trace, write_trace
from .generator import generate
from .simulator import (
    CONFIGURED,
    Figures,
    Setting,
    configured_setting,
    contended_gpus,
    default_settings,
    simulate,
    simulate_all,
)
from .trace import Cell, Session, Trace

__all__ = ["CONFIGURED", "Cell", "CostModel", "Figures", "Session", "Setting", "Trace", "TraceFormatError",
           "configured_setting", "contended_gpus", "default_settings", "generate", "read_trace", "simulate",
           "simulate_all", "write_trace"]
