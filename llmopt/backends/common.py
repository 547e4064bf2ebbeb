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
