"""Checks of InferMax CSP solutions (Kim et al. 2025, section 5) and of replayed schedules.

The schedule is checked by :mod:`llmopt.validate.schedule`; an InferMax solution's ``plan`` (its
batches) must describe that schedule; the claims are held against a serial schedule of the
validator's own, the same schedule without idle time, the file's own heuristics, and, offline
with at most ``EXACT_MAX_REQUESTS`` requests of at most ``EXACT_MAX_TOKENS`` tokens in all, the
optimum of an independent shortest-path search over request states.
"""

from __future__ import annotations

import math
from typing import Any

from llmopt.data.instance import Instance
from llmopt.validate.claims import Evidence, Verdict
from llmopt.validate.fields import is_int, numbers_by_name
from llmopt.validate.infermax_exact import BudgetExceeded, optimum, serial_total
from llmopt.validate.schedule import Checked, check_schedule, kv_capacity

EXACT_MAX_REQUESTS = 3
EXACT_MAX_TOKENS = 18
EXACT_MAX_STATES = 200_000


def check_infermax(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    reasons = verdict.reasons
    ev = Evidence()
    if sol.get("mode") != "continuous":
        reasons.append(f"mode {sol.get('mode')!r} must be 'continuous'")
        return ev
    limits = _limits(instance)
    if isinstance(limits, str):
        reasons.append(limits)
        return ev
    M, C, P = limits
    profile = instance.profile
    requests = [(r.input_tokens, r.output_tokens, r.arrival_ms) for r in instance.requests]
    serial = serial_total(profile, requests, M, C, P)
    if serial is not None:
        ev.schedules.append(("the validator's one-request-at-a-time schedule", serial))
    for name, value in numbers_by_name(sol, "heuristics", reasons).items():
        ev.schedules.append((f"the file's heuristic {name}", value))
    _exact(instance, M, C, P, ev)
    if sol.get("status") in ("optimal", "feasible"):
        found, checked = check_schedule(instance, sol, "infermax")
        reasons += found
        if checked is not None:
            ev.objective = checked.makespan_ms
            ev.schedules.append(("removing the idle time of this schedule", checked.compact_ms))
            if "plan" in sol:
                reasons += _check_plan(sol["plan"], checked)
    return ev


def check_replay(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    """A replayed schedule: valid under its engine's time model, no optimality claim."""
    ev = Evidence()
    if sol.get("status") != "feasible":
        verdict.reasons.append("a replayed schedule carries no proof or infeasibility claim; "
                               f"status must be feasible, not {sol.get('status')!r}")
        return ev
    model = "infermax" if sol.get("mode") == "continuous" else "replay"
    memory = sol.get("unlimited_memory") is not True
    if not memory:
        verdict.notes.append("KV capacity not checked: the file says the schedule assumes "
                             "unlimited memory")
    found, checked = check_schedule(instance, sol, model, memory)
    verdict.reasons.extend(found)
    if checked is not None:
        ev.objective = checked.makespan_ms
        ev.schedules.append(("removing the idle time of this schedule", checked.compact_ms))
    return ev


def _limits(instance: Instance) -> tuple[int, int, int] | str:
    M = kv_capacity(instance)
    C = instance.system.max_batch_tokens or getattr(instance.profile, "max_batch_tokens", None)
    if M is None or C is None:
        return "the instance gives no KV capacity M or batch size C"
    return int(M), int(C), min(instance.system.max_prefill_tokens or C, C)


def _exact(instance: Instance, M: int, C: int, P: int, ev: Evidence) -> None:
    n = instance.num_requests
    tokens = int(instance.input_tokens.sum() + instance.output_tokens.sum())
    if (instance.arrival_ms > 0).any():
        ev.unchecked_why = "the validator re-solves offline instances only"
        return
    if n > EXACT_MAX_REQUESTS or tokens > EXACT_MAX_TOKENS:
        ev.unchecked_why = (f"{n} requests of {tokens} tokens; the validator re-solves up to "
                            f"{EXACT_MAX_REQUESTS} requests of {EXACT_MAX_TOKENS} tokens")
        return
    pairs = [(r.input_tokens, r.output_tokens) for r in instance.requests]
    try:
        ev.optimum = optimum(instance.profile, pairs, M, C, P, EXACT_MAX_STATES)
        ev.exact_method = f"the validator's state search ({n} requests)"
    except BudgetExceeded:
        ev.unchecked_why = f"the state search gave up after {EXACT_MAX_STATES:,} states"
    except ValueError:
        ev.unchecked_why = "the state search found no schedule within M"


def _index(value: Any, n: int | None) -> int | None:
    """An iteration index from a segment's ``a``/``b`` column: the integer, None when it is
    missing, not whole or (given ``n``) not one of the ``n`` iterations."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x) or x != int(x):
        return None
    k = int(x)
    return k if n is None or 0 <= k < n else None


def _check_plan(plan: Any, checked: Checked) -> list[str]:
    """Batch k of the plan (evictions before it, chunks, decodes) must be the schedule's k-th
    iteration; a batch with nothing to process passes its evictions on to the next."""
    if not isinstance(plan, list) or not all(isinstance(b, dict) for b in plan):
        return ["plan must be a list of batches {evict, prefill, decode}"]
    seg = checked.segments
    n = len(checked.iterations)
    evicted: list[list[str]] = [[] for _ in range(n)]
    chunks: list[dict[str, int]] = [{} for _ in range(n)]
    decodes: list[list[str]] = [[] for _ in range(n)]
    for phase, request, a, b, tokens in zip(seg["phase"], seg["request"], seg["a"], seg["b"],
                                            seg["tokens"], strict=True):
        if phase in ("prefill", "refill") and (k := _index(b, n)) is not None:
            chunks[k][str(request)] = int(tokens)
        elif phase == "evict" and (k := _index(a, n)) is not None:
            evicted[k].append(str(request))
        elif phase == "decode":
            first, last = _index(a, None), _index(b, None)
            if first is not None and last is not None:
                for r in range(max(first, 0), min(last, n - 1) + 1):
                    decodes[r].append(str(request))
    actual = [(sorted(e), c, sorted(d)) for e, c, d in zip(evicted, chunks, decodes,
                                                          strict=True)]
    stated = []
    pending: list[str] = []
    for k, batch in enumerate(plan):
        evict, prefill, decode = (batch.get("evict", []), batch.get("prefill", {}),
                                  batch.get("decode", []))
        if not (isinstance(evict, list) and isinstance(prefill, dict)
                and isinstance(decode, list) and all(is_int(c) for c in prefill.values())):
            return [f"plan batch {k} must be {{evict: [ids], prefill: {{id: tokens}}, "
                    "decode: [ids]}"]
        pending += [str(x) for x in evict]
        if prefill or decode:
            stated.append((sorted(pending), {str(q): c for q, c in prefill.items()},
                           sorted(map(str, decode))))
            pending = []
    if len(stated) != len(actual):
        return [f"plan has {len(stated)} non-empty batches, the schedule {len(actual)} "
                "iterations"]
    for k, (want, got) in enumerate(zip(stated, actual, strict=True)):
        if want != got:
            return [f"plan batch {k} disagrees with the schedule's iteration {k}"]
    return []
