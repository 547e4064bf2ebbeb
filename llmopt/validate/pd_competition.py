"""Checks of PD-competition solutions (Pang et al. 2025, eqs 1–25 with llmopt's memory rule).

The schedule is checked by :mod:`llmopt.validate.schedule` under the file's time model; its plan
(``assignment``, ``order``, ``stages``) and its other totals must describe that schedule; the
claims are held against schedules the validator builds itself (greedy stage sequences, the
same schedule without idle time), the file's own heuristics, and an exhaustive enumeration of
stage sequences on instances of up to ``EXACT_MAX_REQUESTS`` requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from llmopt.data.instance import Instance
from llmopt.validate.claims import Evidence, Verdict, tolerance
from llmopt.validate.fields import is_int, is_number, numbers_by_name
from llmopt.validate.pd_exact import BudgetExceeded, greedy_total, optimal_total
from llmopt.validate.schedule import Checked, check_schedule, kv_capacity, stage_levels

EXACT_MAX_REQUESTS = 7
EXACT_MAX_STATES = 200_000
TIME_MODELS = ("stage", "replay")


def check_pd_competition(instance: Instance, sol: dict[str, Any], verdict: Verdict
                         ) -> Evidence:
    reasons = verdict.reasons
    ev = Evidence()
    model = sol.get("time_model")
    if model not in TIME_MODELS:
        reasons.append(f"time_model {model!r} must be 'stage' or 'replay'")
        return ev
    costs = _costs(instance, model)
    if isinstance(costs, str):
        reasons.append(costs)
        return ev
    _own_schedules(instance, costs, ev)
    for name, value in numbers_by_name(sol, "heuristics", reasons).items():
        ev.schedules.append((f"the file's heuristic {name}", value))
    stated_bounds = numbers_by_name(sol, "bounds", reasons)
    for name, value in stated_bounds.items():
        for who, upper in ev.schedules:
            if value > upper + tolerance(upper):
                reasons.append(f"the stated lower bound {name} = {value} is above a schedule "
                               f"of {upper:.3f} ms that {who} found")
                break
    if sol.get("status") in ("optimal", "feasible"):
        found, checked = check_schedule(instance, sol, model)
        reasons += found
        if checked is not None:
            ev.objective = checked.makespan_ms
            ev.schedules.append(("removing the idle time of this schedule", checked.compact_ms))
            reasons += _check_plan(instance, sol, checked)
            reasons += _check_totals(instance, sol, checked)
    return ev


def _costs(instance: Instance, model: str
           ) -> tuple[Callable[[int], float], float, float, int] | str:
    """(stage cost by prompt tokens, cost per decode round, constant, largest stage)."""
    profile = instance.profile
    pre, dec = getattr(profile, "prefill", None), getattr(profile, "decode", None)
    if (pre is None or dec is None or not hasattr(pre, "overhead_ms")
            or not hasattr(dec, "per_client_ms")):
        return f"profile {profile.name} has no PD-competition stage times"
    levels = stage_levels(instance)
    if levels is None:
        return "no largest prefill stage (max_prefill_tokens)"
    cap, step = levels
    if model == "stage":
        def level_cost(tokens: int) -> float:
            return pre.overhead_ms + pre.per_token_ms * min(math.ceil(tokens / step) * step, cap)

        return (level_cost, dec.overhead_ms + dec.per_client_ms * instance.system.clients, 0.0,
                cap)
    constant = dec.per_client_ms * float(instance.output_tokens.sum())
    return (lambda tokens: pre.overhead_ms + pre.per_token_ms * tokens, dec.overhead_ms,
            constant, cap)


def _own_schedules(instance: Instance, costs, ev: Evidence) -> None:
    stage_cost, per_round, constant, cap = costs
    inp = [int(v) for v in instance.input_tokens]
    out = [int(v) for v in instance.output_tokens]
    J, M = instance.system.clients, kv_capacity(instance)
    orders = {"in file order": list(range(len(inp))),
              "longest output first": sorted(range(len(inp)), key=lambda i: -out[i])}
    for label, order in orders.items():
        total = greedy_total(inp, out, J, cap, stage_cost, per_round, M, order)
        if total is not None:
            ev.schedules.append((f"the validator's greedy stages ({label})", total + constant))
    if len(inp) > EXACT_MAX_REQUESTS:
        ev.unchecked_why = (f"{len(inp)} requests; the validator re-solves up to "
                            f"{EXACT_MAX_REQUESTS}")
        return
    try:
        best = optimal_total(inp, out, J, cap, stage_cost, per_round, M, EXACT_MAX_STATES)
    except BudgetExceeded:
        ev.unchecked_why = f"the enumeration gave up after {EXACT_MAX_STATES:,} states"
        return
    if math.isfinite(best):
        ev.optimum = best + constant
        ev.exact_method = (f"the validator's enumeration of stage sequences ({len(inp)} "
                           "requests)")


def _check_plan(instance: Instance, sol: dict[str, Any], checked: Checked) -> list[str]:
    """``assignment``, ``order`` and ``stages`` must describe the schedule's segments."""
    reasons: list[str] = []
    seg = checked.segments
    work = seg[seg["phase"] != "evict"]
    J = instance.system.clients
    first = work.groupby("request", observed=True).agg(
        start=("start_ms", "min"), client=("client", "first"), instance=("instance", "first"))
    client_of = {str(rid): int(row.instance) * J + int(row.client)
                 for rid, row in first.iterrows()}
    assignment = sol.get("assignment")
    if assignment is not None and assignment != client_of:
        wrong = (sorted(set(assignment) ^ set(client_of))
                 + [rid for rid in client_of if assignment.get(rid) != client_of[rid]]
                 if isinstance(assignment, dict) else ["(not a mapping)"])
        reasons.append(f"assignment disagrees with the segments, e.g. {wrong[0]}")
    order = sol.get("order")
    if order is not None:
        expected: dict[str, list[str]] = {}
        for rid in first.sort_values("start", kind="stable").index:
            expected.setdefault(str(client_of[rid]), []).append(str(rid))
        if not isinstance(order, dict) or {str(k): v for k, v in order.items()} != expected:
            reasons.append("order disagrees with the segments (each client's requests in the "
                           "order their prefills start)")
    stages = sol.get("stages")
    if stages is not None:
        reasons += _check_stages(stages, checked)
    return reasons


def _check_stages(stages: Any, checked: Checked) -> list[str]:
    """Stage k: the requests prefilled in the k-th prefill iteration and the decode rounds up
    to the next one (stages without requests merge into the one before, as a replay does)."""
    if not isinstance(stages, list) or not all(
            isinstance(s, dict) and isinstance(s.get("requests"), list)
            and is_int(s.get("decode_rounds")) and s["decode_rounds"] >= 0 for s in stages):
        return ["stages must be a list of {requests: [ids], decode_rounds: integer ≥ 0}"]
    merged: list[tuple[set[str], int]] = []
    for stage in stages:
        if stage["requests"] or not merged:
            merged.append(({str(r) for r in stage["requests"]}, stage["decode_rounds"]))
        else:
            merged[-1] = (merged[-1][0], merged[-1][1] + stage["decode_rounds"])
    its = checked.iterations.sort_values("start_ms", kind="stable").reset_index(drop=True)
    is_prefill = (its["_prefill_tokens"] > 0).to_numpy()
    pre_rows = np.flatnonzero(is_prefill)
    seg = checked.segments
    pre = seg[seg["phase"] == "prefill"]
    actual = []
    for k, r in enumerate(pre_rows):
        nxt = pre_rows[k + 1] if k + 1 < len(pre_rows) else len(its)
        members = {str(x) for x in pre.loc[pre["a"] == r, "request"]}
        actual.append((members, int((~is_prefill[r + 1:nxt]).sum())))
    if len(actual) != len(merged):
        return [f"stages list {len(merged)} prefill stages, the schedule has {len(actual)}"]
    for k, (want, got) in enumerate(zip(merged, actual, strict=True)):
        if want != got:
            return [f"stage {k} disagrees with the schedule: it states {sorted(want[0])} then "
                    f"{want[1]} decode rounds, the schedule has {sorted(got[0])} then "
                    f"{got[1]}"]
    return []


def _check_totals(instance: Instance, sol: dict[str, Any], checked: Checked) -> list[str]:
    """The totals of the schedule's stage sequence under both time models, and its counts."""
    its = checked.iterations
    pre = its["_prefill_tokens"].to_numpy()
    decoding = its["_decoding"].to_numpy()
    is_pre = pre > 0
    expected: dict[str, float] = {
        "prefill_stages": float(is_pre.sum()), "decode_rounds": float((~is_pre).sum()),
        "clients": float(instance.system.clients * instance.system.instances)}
    for model, key in (("stage", "objective_stage_model_ms"),
                       ("replay", "objective_replay_ms")):
        costs = _costs(instance, model)
        if isinstance(costs, str):
            continue
        stage_cost, per_round, _, _ = costs
        if model == "stage":
            total = sum(stage_cost(int(t)) for t in pre[is_pre]) + per_round * (~is_pre).sum()
        else:
            dec = instance.profile.decode  # type: ignore[attr-defined]
            total = (sum(stage_cost(int(t)) for t in pre[is_pre])
                     + float((dec.overhead_ms + dec.per_client_ms * decoding[~is_pre]).sum()))
        expected[key] = float(total)
    reasons = []
    for key, value in expected.items():
        stated = sol.get(key)
        if stated is None:
            continue
        if not is_number(stated) or abs(stated - value) > tolerance(value):
            reasons.append(f"{key} {stated!r} but the schedule gives {value:.6f}")
    return reasons
