"""Independent checks of solution files against their instance.

Nothing here calls the code that produced a solution: loads, schedules, objectives and claims
are re-derived from the instance and the profile's fields alone. :func:`check_solution` returns
a :class:`Verdict` (the reasons a solution is wrong, and notes on what was verified and what was
taken on trust); :func:`validate_solution` just the reasons (empty when valid).

What a verdict of "valid" establishes, per problem:

- the data describe a feasible answer: every load, every segment, the KV memory, the token
  budgets and every iteration time are recomputed; every stated metric, plan and total equals
  the recomputed one;
- no claimed bound is above a schedule known to exist (the validator's own heuristics, the
  same schedule without idle time, the heuristics the file itself lists), no ``infeasible``
  claim stands beside such a schedule, and closed-form bounds named in a proof line are
  recomputed;
- on small instances the optimum is recomputed by an exhaustive method of the validator's own
  and every claim is checked against it; above that size a claim of optimality is reported as
  the solver's, not independently checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmopt.plugins import load
from llmopt.problems.registry import PROBLEMS
from llmopt.validate.claims import Evidence, Verdict, check_claims, check_header

if TYPE_CHECKING:
    from llmopt.data.instance import Instance

Checker = Callable[["Instance", dict[str, Any], Verdict], Evidence]

# the checkers of the files that are no registered problem's ("module:function", loaded when
# used); a registered problem names its own (``ProblemInfo.check``)
CHECKERS: dict[str, str | Checker] = {
    "replay": "llmopt.validate:check_any_replay",
}
# the checker of each mode of replay (a schedule on the simulation core by default)
REPLAY_CHECKERS: dict[str, str | Checker] = {
    "slices": "llmopt.validate.slices:check_slice_replay",
}


def check_any_replay(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    """A replay: slice-level (mode ``slices``, Cheng et al. 2024) or on the simulation core."""
    mode = sol.get("mode")
    checker = REPLAY_CHECKERS.get(mode, "llmopt.validate.infermax:check_replay") \
        if isinstance(mode, str) else "llmopt.validate.infermax:check_replay"
    evidence: Evidence = load(checker)(instance, sol, verdict)
    return evidence


def check_solution(instance: Instance, solution: dict[str, Any]) -> Verdict:
    """Everything the validator can establish about ``solution`` (see the module doc)."""
    verdict = Verdict()
    if not isinstance(solution, dict):
        verdict.reasons.append("a solution must be a JSON object")
        return verdict
    verdict.reasons += check_header(instance, solution)
    problem = solution.get("problem")
    checker = checker_of(problem) if isinstance(problem, str) else None
    if checker is None:
        verdict.reasons.append(f"unknown problem {problem!r}")
        return verdict
    evidence = load(checker)(instance, solution, verdict)
    check_claims(solution, evidence, verdict)
    return verdict


def checker_of(problem: str) -> str | Checker | None:
    """The checker of ``problem``'s solution files, None when llmopt knows none."""
    if problem in CHECKERS:
        return CHECKERS[problem]
    info = PROBLEMS.get(problem)
    return info.check if info is not None and info.check else None


def validate_solution(instance: Instance, solution: dict[str, Any]) -> list[str]:
    """Reasons why ``solution`` is not a valid answer for ``instance`` (empty list if valid)."""
    return check_solution(instance, solution).reasons


__all__ = ["CHECKERS", "Verdict", "check_solution", "validate_solution"]
