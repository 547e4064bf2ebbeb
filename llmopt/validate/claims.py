"""The claims of a solution file, checked against what the validator could establish itself.

A problem's checker re-derives what it can from the instance and the solution's own data (the
objective the data give, schedules known to exist, an exact optimum on small instances) and
collects it as :class:`Evidence`; :func:`check_claims` then holds the file's status, objective,
bound, gap and proof against it. What cannot be verified is said in the verdict's notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from llmopt.validate.fields import is_number, number_or_none, string_or_none

STATUSES = ("optimal", "feasible", "infeasible", "time_limit_no_solution", "error")
ABS_TOL = 2e-3   # ms: solution files carry times rounded to the microsecond
REL_TOL = 1e-9


@dataclass
class Verdict:
    """``reasons``: why the solution is wrong (empty: valid); ``notes``: what was verified
    independently and what was taken on trust."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.reasons


@dataclass
class Evidence:
    """What the validator established about an instance and a solution.

    ``objective``: the value the solution's own data give (None when they give none);
    ``schedules``: (who found it, value) of schedules known to exist, each an upper bound on
    the optimum; ``optimum``: the exact optimum when an independent exact method ran (with
    ``exact_method`` saying which), else ``unchecked_why`` says why not; ``bounds``: closed-form
    lower bounds the validator recomputed (name → value); ``tight_bound``: the name of one of
    them that the solution's own objective meets exactly (established in the problem's integer
    units, not within a float tolerance)."""

    objective: float | None = None
    schedules: list[tuple[str, float]] = field(default_factory=list)
    optimum: float | None = None
    exact_method: str = ""
    unchecked_why: str = ""
    bounds: dict[str, float] = field(default_factory=dict)
    tight_bound: str = ""
    no_objective_why: str = ""  # why an answer may have no finite objective (checked), if it may


def tolerance(value: float) -> float:
    return ABS_TOL + REL_TOL * abs(value)


def check_header(instance: Any, sol: dict[str, Any]) -> list[str]:
    """Instance hash, status, units, and the types of the common fields."""
    reasons = []
    if sol.get("instance_sha256") != instance.sha256:
        reasons.append(
            f"instance_sha256 {str(sol.get('instance_sha256'))[:12]}… does not match the "
            f"instance ({instance.sha256[:12]}…): the solution was made for other data")
    status = sol.get("status")
    if not isinstance(status, str) or status not in STATUSES:
        reasons.append(f"status {status!r} is not one of {', '.join(STATUSES)}")
    if sol.get("units") != "ms":
        reasons.append(f"units {sol.get('units')!r}, expected 'ms'")
    for key in ("solver", "proof", "problem"):
        string_or_none(sol, key, reasons)
    for key in ("runtime_s", "time_limit_s"):
        value = number_or_none(sol, key, reasons)
        if value is not None and value < 0:
            reasons.append(f"{key} {value} is negative")
    notes = sol.get("notes")
    if notes is not None and not (isinstance(notes, list)
                                  and all(isinstance(x, str) for x in notes)):
        reasons.append("notes must be a list of strings")
    if "interrupted" in sol and not isinstance(sol["interrupted"], bool):
        reasons.append(f"interrupted {sol['interrupted']!r} is not true or false")
    return reasons


def check_claims(sol: dict[str, Any], ev: Evidence, verdict: Verdict) -> None:
    """Status, objective, bound, gap and proof against the evidence (see the module doc)."""
    reasons = verdict.reasons
    status = sol.get("status")
    solver = sol.get("solver") if isinstance(sol.get("solver"), str) else "the solver"
    obj = number_or_none(sol, "objective", reasons)
    bound = number_or_none(sol, "bound", reasons)
    has_solution = status in ("optimal", "feasible")
    if has_solution and obj is None:
        if ev.no_objective_why and bound is None:
            verdict.notes.append(f"no finite objective, checked: {ev.no_objective_why}")
        else:
            reasons.append(f"status {status} but objective is {sol.get('objective')!r}")
        return
    if not has_solution and sol.get("objective") is not None:
        reasons.append(f"status {status} but an objective {sol.get('objective')!r} is given")
    if has_solution and obj is not None and ev.objective is not None \
            and abs(obj - ev.objective) > tolerance(ev.objective):
        reasons.append(f"objective {obj} but the solution's own data give {ev.objective:.6f}")
    if obj is not None and bound is not None and bound > obj + tolerance(obj):
        reasons.append(f"bound {bound} exceeds objective {obj}")
    if status == "optimal":
        if bound is None or obj is None or abs(obj - bound) > tolerance(obj):
            reasons.append(f"status optimal but objective {obj} and bound {bound} differ "
                           "(no proof)")
        if not isinstance(sol.get("proof"), str) or not sol["proof"].strip():
            reasons.append("status optimal without a proof line")
    _check_gap(sol, obj, bound, has_solution, reasons)
    for who, value in ev.schedules:
        if bound is not None and bound > value + tolerance(value):
            reasons.append(f"bound {bound} is above a schedule of {value:.3f} ms that {who} "
                           "found: it is no lower bound")
    if status == "infeasible" and ev.schedules:
        who, value = min(ev.schedules, key=lambda s: s[1])
        reasons.append(f"status infeasible, but {who} found a schedule of {value:.3f} ms")
    for name, value in ev.bounds.items():
        if obj is not None and has_solution and value > obj + tolerance(obj):
            reasons.append(f"the recomputed lower bound {name} = {value:.3f} ms is above the "
                           f"objective {obj}: the schedule cannot be valid")
    if ev.optimum is not None:
        best = ev.optimum
        if bound is not None and bound > best + tolerance(best):
            reasons.append(f"bound {bound} is above the optimum {best:.3f} ms "
                           f"({ev.exact_method})")
        if status == "optimal" and obj is not None and obj > best + tolerance(best):
            reasons.append(f"status optimal, but the optimum is {best:.3f} ms "
                           f"({ev.exact_method}), below the objective {obj}")
        if status == "infeasible":
            reasons.append(f"status infeasible, but {ev.exact_method} solved it "
                           f"({best:.3f} ms)")
    if status == "optimal" and not reasons:
        if ev.optimum is not None:
            verdict.notes.append(f"optimality checked independently: {ev.exact_method} gives "
                                 f"{ev.optimum:.3f} ms")
        elif ev.tight_bound:
            verdict.notes.append(f"optimality checked independently: the validator's own lower "
                                 f"bound {ev.tight_bound} equals the objective")
        else:
            why = f" ({ev.unchecked_why})" if ev.unchecked_why else ""
            proof = sol.get("proof")
            verdict.notes.append(f"optimality claimed by {solver} ({proof}), not "
                                 f"independently checked{why}")
    elif status == "infeasible" and not reasons:
        verdict.notes.append(f"infeasibility claimed by {solver}, not independently checked")


def _check_gap(sol: dict[str, Any], obj: float | None, bound: float | None,
               has_solution: bool, reasons: list[str]) -> None:
    gap = sol.get("gap")
    if gap is not None and not is_number(gap):
        reasons.append(f"gap {gap!r} is not a finite number")
        return
    if has_solution and obj is not None and bound is not None:
        expected = 0.0 if obj == 0 else max(obj - bound, 0.0) / abs(obj)
        if gap is None or not math.isclose(gap, expected, rel_tol=1e-6, abs_tol=1e-9):
            reasons.append(f"gap {gap} but (objective − bound)/objective = {expected}")
