"""Trace replay: notebook sessions through the project's policy on a simulated clock and cluster."""

from .costs import CostModel
from .formats import TraceFormatError, read_trace, write_trace
from .generator import generate
from .simulator import Figures, Setting, contended_gpus, default_settings, simulate, simulate_all
from .trace import Cell, Session, Trace

__all__ = ["Cell", "CostModel", "Figures", "Session", "Setting", "Trace", "TraceFormatError", "contended_gpus",
           "default_settings", "generate", "read_trace", "simulate", "simulate_all", "write_trace"]
