"""Solver back ends: thin, uniform wrappers around HiGHS (through Pyomo) and OR-Tools CP-SAT.

Each returns an :class:`~llmopt.backends.common.Outcome` holding the incumbent objective, the
proven bound and how the run ended, and keeps the incumbent when the time limit is hit or the
user interrupts (Ctrl-C).
"""

from llmopt.backends.common import Outcome

__all__ = ["Outcome"]
