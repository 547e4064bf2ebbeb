"""What every back end returns."""

from __future__ import annotations

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
