"""What every back end returns."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Ending = Literal["optimal", "feasible", "infeasible", "no_solution", "error"]


@dataclass
class Outcome:
    """How a back-end run ended.

    ``ending`` is the back end's own verdict: ``optimal`` only when the solver proved it.
    ``objective`` and ``bound`` are in the model's own units; ``solution`` is whatever the caller's
    ``collect`` function read from the solver's incumbent (``None`` when there is none).
    """

    ending: Ending
    objective: float | None
    bound: float | None
    runtime_s: float
    solver_version: str
    interrupted: bool = False
    message: str = ""
    solution: Any = None


def solution_or_none(ending: str, collect: Any, value_of: Any) -> Any:
    """Call ``collect(value_of)`` when the run has a solution to read."""
    return collect(value_of) if ending in ("optimal", "feasible") and collect else None


def interrupted_before_the_solver(solver_version: str, phase: str) -> Outcome:
    """A run stopped by Ctrl-C (or SIGTERM) before its solver returned: no solution or bound of
    the solver's; the caller keeps the incumbent it had."""
    return Outcome(ending="no_solution", objective=None, bound=None, runtime_s=0.0,
                   solver_version=solver_version, interrupted=True,
                   message=f"interrupted during {phase}: the best heuristic schedule is kept")


def answer_reserve_s(limit: float) -> float:
    """Seconds kept back from a solver for reading and replaying its answer and writing it: a
    tenth of the time limit, 0.5–5 s (none without a limit)."""
    return min(max(0.1 * limit, 0.5), 5.0) if math.isfinite(limit) else 0.0


def time_left(deadline: float, limit: float) -> float | None:
    """Seconds a solver may still use, keeping back ``answer_reserve_s``; None when the model
    was built too late (the solver is then not run)."""
    left = deadline - answer_reserve_s(limit) - time.perf_counter()
    return left if left > 0.05 else None


class OutOfTime(Exception):
    """Building or loading a model passed its deadline: the solver is not run."""


class BuildClock:
    """The deadline of a model's building, checked while a Pyomo component is built (every
    ``every`` calls of its rule) and between components or loops (:meth:`check`)."""

    def __init__(self, deadline: float, every: int = 256) -> None:
        self.deadline, self.every, self.late, self._calls = deadline, every, False, 0

    def rule(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """``rule``, or once the deadline has passed ``Constraint.Skip`` for every index left
        (an exception inside Pyomo's construction would be logged as an error): call
        :meth:`check` after the component."""
        if math.isinf(self.deadline):
            return rule
        from pyomo.core import Constraint  # a Pyomo model is being built: Pyomo is loaded

        def checked(*args: Any) -> Any:
            self._calls += 1
            if self.late or (self._calls % self.every == 0
                             and time.perf_counter() > self.deadline):
                self.late = True
                return Constraint.Skip
            return rule(*args)

        return checked

    def check(self) -> None:
        """Raise :class:`OutOfTime` if the deadline has passed."""
        if self.late or time.perf_counter() > self.deadline:
            self.late = True
            raise OutOfTime


def out_of_time_while_building(solver_version: str) -> Outcome:
    """The model was ready only after the time limit: the caller keeps its incumbent."""
    return Outcome(ending="no_solution", objective=None, bound=None, runtime_s=0.0,
                   solver_version=solver_version,
                   message="time limit reached while building the model: the solver was not "
                           "run; the best heuristic schedule is kept")


MODEL_MEMORY_LIMIT_MB = 2048  # a model whose estimated peak memory is larger is not built


def model_too_large(estimate_mb: float, what: str, advice: str, solver_version: str, *,
                    build_s: float = 0.0, deadline: float = math.inf) -> Outcome | None:
    """An outcome that skips the model (the caller keeps its incumbent) when its estimated
    memory exceeds :data:`MODEL_MEMORY_LIMIT_MB` or its estimated building time (``build_s``)
    would pass the deadline; None when it may be built."""
    if estimate_mb > MODEL_MEMORY_LIMIT_MB:
        need = (f"would need about {estimate_mb / 1024:.1f} GB (limit "
                f"{MODEL_MEMORY_LIMIT_MB / 1024:.0f} GB)")
    elif time.perf_counter() + build_s > deadline:
        need = (f"would take about {build_s:.0f} s to build, more than the "
                f"{max(deadline - time.perf_counter(), 0):.0f} s left")
    else:
        return None
    return Outcome(ending="no_solution", objective=None, bound=None, runtime_s=0.0,
                   solver_version=solver_version,
                   message=f"{what} {need}: not built; {advice}; the best heuristic schedule "
                           "is kept")


@dataclass(frozen=True)
class Footprint:
    """What a model costs per unit of its size (a request-bin pair, a binary, a variable or a
    constraint), as measured: memory in MB above ``base_mb`` and building time in seconds."""

    mb_per_unit: float
    s_per_unit: float
    base_mb: float = 0.0

    def too_large(self, units: int, what: str, advice: str, solver_version: str,
                  deadline: float) -> Outcome | None:
        """:func:`model_too_large` for a model of ``units`` units."""
        return model_too_large(self.base_mb + self.mb_per_unit * units, what, advice,
                               solver_version, build_s=self.s_per_unit * units,
                               deadline=deadline)

    def fits(self, units: int, deadline: float) -> bool:
        """Whether a model of ``units`` units fits in memory and can be built by ``deadline``."""
        return self.too_large(units, "", "", "", deadline) is None
