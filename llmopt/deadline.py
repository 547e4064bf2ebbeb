"""Deadlines: a command's time limit, shared among its phases.

A :class:`Deadline` is a moment on ``time.perf_counter``'s clock (``math.inf``: none). A command
makes one from its ``--time-limit``; each phase (heuristics, bounds, model building, solving,
replaying) gets the whole deadline or a share of the time left (:meth:`Deadline.share`), checks
it between its units of work (a replay, a grid spacing, a window, a sub-solve), and keeps what
it found when it passes. A solver is given the seconds left (:meth:`Deadline.seconds`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Deadline:
    at: float = math.inf  # perf_counter seconds

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """``seconds`` from now; None: no deadline."""
        return cls(math.inf if seconds is None else time.perf_counter() + seconds)

    def left(self) -> float:
        """Seconds left (0 once passed, ``math.inf`` without a deadline)."""
        return max(self.at - time.perf_counter(), 0.0)

    def passed(self) -> bool:
        return time.perf_counter() >= self.at

    def seconds(self) -> float | None:
        """The time left as a solver's time limit: None without a deadline."""
        return None if math.isinf(self.at) else self.left()

    def share(self, fraction: float, *, at_most: float = math.inf,
              at_least: float = 0.0) -> Deadline:
        """A deadline for a phase that may use ``fraction`` of the time left (at least
        ``at_least`` and at most ``at_most`` seconds), never later than this one."""
        if math.isinf(self.at):
            return self if math.isinf(at_most) else Deadline.after(at_most)
        span = min(max(fraction * self.left(), at_least), at_most)
        return Deadline(min(self.at, time.perf_counter() + span))

    def sooner(self, seconds: float) -> Deadline:
        """This deadline ``seconds`` earlier: the time kept back for a phase that follows."""
        return Deadline(self.at - seconds)


NONE = Deadline()
