"""Independent checks of solution files against their instance.

Nothing here calls the code that produced a solution: loads, objectives and statuses are
re-derived from the instance and the profile's fields alone. ``validate_solution`` returns the
list of reasons a solution is wrong (empty when it is valid).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llmopt.instance import Instance
from llmopt.pcmax_recheck import recompute_bound
from llmopt.result import STATUSES

REL_TOL = 1e-7
ABS_TOL = 1e-6


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def validate_solution(instance: Instance, solution: dict[str, Any]) -> list[str]:
    """Reasons why ``solution`` is not a valid answer for ``instance`` (empty list if valid)."""
    reasons = _check_header(instance, solution)
    checker = _CHECKERS.get(solution.get("problem"))
    if checker is None:
        reasons.append(f"unknown problem {solution.get('problem')!r}")
        return reasons
    reasons += checker(instance, solution)
    return reasons


def _check_header(instance: Instance, sol: dict[str, Any]) -> list[str]:
    reasons = []
    if sol.get("instance_sha256") != instance.sha256:
        reasons.append(
            f"instance_sha256 {str(sol.get('instance_sha256'))[:12]}… does not match the "
            f"instance ({instance.sha256[:12]}…): the solution was made for other data"
        )
    if sol.get("status") not in STATUSES:
        reasons.append(f"status {sol.get('status')!r} is not one of {', '.join(STATUSES)}")
    if sol.get("units") != "ms":
        reasons.append(f"units {sol.get('units')!r}, expected 'ms'")
    return reasons


def _check_objective_and_bound(sol: dict[str, Any], true_objective: float | None) -> list[str]:
    """Objective recomputed, bound not above it, optimal only with objective == bound, gap."""
    reasons = []
    status, obj, bound = sol.get("status"), sol.get("objective"), sol.get("bound")
    has_solution = status in ("optimal", "feasible")
    if has_solution:
        if not isinstance(obj, int | float):
            return [f"status {status} but objective is {obj!r}"]
        if true_objective is not None and not close(obj, true_objective):
            reasons.append(f"objective {obj} but the solution's own data give {true_objective}")
    if bound is not None and not isinstance(bound, int | float):
        reasons.append(f"bound {bound!r} is not a number")
        return reasons
    if has_solution and bound is not None and bound > obj + max(ABS_TOL, REL_TOL * abs(obj)):
        reasons.append(f"bound {bound} exceeds objective {obj}")
    if status == "optimal" and (bound is None or not close(obj, bound)):
        reasons.append(f"status optimal but objective {obj} and bound {bound} differ (no proof)")
    gap = sol.get("gap")
    if has_solution and bound is not None:
        expected = 0.0 if obj == 0 else max(obj - bound, 0.0) / abs(obj)
        if gap is None or not math.isclose(gap, expected, rel_tol=1e-6, abs_tol=1e-9):
            reasons.append(f"gap {gap} but (objective − bound)/objective = {expected}")
    return reasons


def _check_binpacking(instance: Instance, sol: dict[str, Any]) -> list[str]:
    reasons: list[str] = []
    assignment = sol.get("assignment")
    if sol.get("status") not in ("optimal", "feasible"):
        return _check_objective_and_bound(sol, None)
    if not isinstance(assignment, dict):
        return [*reasons, "assignment is missing or not a mapping of request id to client"]
    clients = instance.system.clients * instance.system.instances
    ids = {r.id for r in instance.requests}
    missing = sorted(ids - assignment.keys())
    unknown = sorted(assignment.keys() - ids)
    if missing:
        reasons.append(f"{len(missing)} request(s) not assigned, e.g. {missing[:3]}")
    if unknown:
        reasons.append(f"{len(unknown)} unknown request id(s), e.g. {unknown[:3]}")
    bad = {rid: c for rid, c in assignment.items()
           if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < clients}
    if bad:
        first = next(iter(bad.items()))
        reasons.append(f"{len(bad)} request(s) on a client outside 0..{clients - 1}, "
                       f"e.g. {first[0]} -> {first[1]!r}")
    profile = instance.profile
    decode = getattr(profile, "decode", None)
    if decode is None or not hasattr(decode, "per_client_ms"):
        return [*reasons, f"profile {profile.name} has no decode-round time to check loads"]
    t_round = decode.overhead_ms + decode.per_client_ms * instance.system.clients
    loads = [0.0] * clients
    for r in instance.requests:
        c = assignment.get(r.id)
        if isinstance(c, int) and not isinstance(c, bool) and 0 <= c < clients:
            loads[c] += r.output_tokens * t_round
    stated = sol.get("loads")
    if not isinstance(stated, list) or len(stated) != clients:
        reasons.append(f"loads must list {clients} client loads")
    else:
        wrong = [j for j, (a, b) in enumerate(zip(stated, loads, strict=True))
                 if not isinstance(a, int | float) or not close(a, b)]
        if wrong:
            j = wrong[0]
            reasons.append(f"{len(wrong)} client load(s) wrong, e.g. client {j}: "
                           f"{stated[j]} stated, {loads[j]} recomputed")
    if reasons:
        return reasons
    reasons += _check_bound_certificate(instance, sol, t_round)
    return reasons + _check_objective_and_bound(sol, max(loads))


def _check_bound_certificate(instance: Instance, sol: dict[str, Any],
                             t_round: float) -> list[str]:
    """``data.lower_bound`` names the bound behind ``bound``: a closed-form one is recomputed
    from the output lengths by ``llmopt.pcmax_recheck`` (code separate from the solver's)."""
    cert = sol.get("lower_bound")
    if cert is None:
        return []  # solutions written before the certificate existed
    if not isinstance(cert, dict) or not isinstance(cert.get("name"), str) \
            or not isinstance(cert.get("tokens"), int) or isinstance(cert.get("tokens"), bool):
        return [f"lower_bound {cert!r} must be {{name: str, tokens: int}}"]
    name, tokens = cert["name"], cert["tokens"]
    bound = sol.get("bound")
    if isinstance(bound, int | float) and not close(bound, tokens * t_round):
        return [f"bound {bound} is not lower_bound.tokens {tokens} × t_round {t_round}"]
    weights = [r.output_tokens for r in instance.requests]
    clients = instance.system.clients * instance.system.instances
    recomputed = recompute_bound(name, weights, clients)
    if recomputed is not None and recomputed != tokens:
        return [f"lower_bound {name} = {tokens} tokens, but it recomputes to {recomputed}"]
    return []


def _check_replay(instance: Instance, sol: dict[str, Any]) -> list[str]:
    from llmopt.validate_schedule import check_replay, check_timing

    reasons = check_replay(instance, sol)
    if _well_formed(reasons):
        model = "infermax" if sol.get("mode") == "continuous" else "replay"
        reasons += check_timing(instance, _frame(sol), sol.get("iterations"), model)
    if sol.get("status") == "optimal":
        reasons.append("a replayed schedule carries no optimality proof; status must be feasible")
    if sol.get("bound") is not None:
        reasons += _check_objective_and_bound(sol, None)
    return reasons


def _check_pd_competition(instance: Instance, sol: dict[str, Any]) -> list[str]:
    """A PD-competition solution is a schedule under its time model, with a bound."""
    from llmopt.validate_schedule import check_replay, check_timing

    if sol.get("status") not in ("optimal", "feasible"):
        return _check_objective_and_bound(sol, None)
    model = sol.get("time_model")
    if model not in ("stage", "replay"):
        return [f"time_model {model!r} must be 'stage' or 'replay'"]
    reasons = check_replay(instance, sol)
    if _well_formed(reasons):
        reasons += check_timing(instance, _frame(sol), sol.get("iterations"), model)
        reasons += _check_objective_and_bound(sol, float(sol["objective"]))
    return reasons


def _check_infermax_csp(instance: Instance, sol: dict[str, Any]) -> list[str]:
    """An InferMax CSP solution is a continuous-batching schedule under the InferMax cost
    model; it must respect M and C and its timing must follow the profile."""
    from llmopt.validate_schedule import check_replay, check_timing

    if sol.get("status") not in ("optimal", "feasible"):
        return _check_objective_and_bound(sol, None)
    if sol.get("mode") != "continuous":
        return [f"mode {sol.get('mode')!r} must be 'continuous'"]
    reasons = check_replay(instance, sol)
    if _well_formed(reasons):
        reasons += check_timing(instance, _frame(sol), sol.get("iterations"), "infermax")
        reasons += _check_objective_and_bound(sol, float(sol["objective"]))
    return reasons


def _well_formed(reasons: list[str]) -> bool:
    """Whether the segments are readable enough to check their timing."""
    return not any(r.startswith(("segments are", "segment field", "unknown")) for r in reasons)


def _frame(sol: dict[str, Any]):
    import pandas as pd

    seg = pd.DataFrame(sol["segments"])
    return seg.astype({"start_ms": float, "end_ms": float})


_CHECKERS: dict[str, Callable[[Instance, dict[str, Any]], list[str]]] = {
    "binpacking": _check_binpacking,
    "replay": _check_replay,
    "pd-competition": _check_pd_competition,
    "infermax-csp": _check_infermax_csp,
}
