"""Checks of offline bin-packing solutions (Pang et al. 2025, eqs 26–30), independent of the
solvers: the assignment and loads are recomputed from the instance; a longest-first packing of
the validator's own refutes any bound above it; the closed-form bounds that a proof line or the
``lower_bound`` certificate names are recomputed (``pcmax_bounds``, written apart from the
solver's); and instances of up to ``EXACT_MAX_REQUESTS`` requests are solved exactly by an
exhaustive search of the validator's own.
"""

from __future__ import annotations

import heapq
import re
from typing import Any

from llmopt.data.instance import Instance
from llmopt.validate.claims import Evidence, Verdict, tolerance
from llmopt.validate.fields import is_int, is_number
from llmopt.validate.pcmax_bounds import recompute_bound

EXACT_MAX_REQUESTS = 14
EXACT_MAX_NODES = 300_000


def check_binpacking(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    reasons = verdict.reasons
    ev = Evidence()
    decode = getattr(instance.profile, "decode", None)
    if decode is None or not hasattr(decode, "per_client_ms"):
        reasons.append(f"profile {instance.profile.name} has no decode-round time to check loads")
        return ev
    t_round = decode.overhead_ms + decode.per_client_ms * instance.system.clients
    weights = [r.output_tokens for r in instance.requests]
    clients = instance.system.clients * instance.system.instances
    ev.schedules.append(("the validator's longest-first packing",
                         longest_first_makespan(weights, clients) * t_round))
    recomputed = _check_named_bounds(sol, weights, clients, t_round, reasons, verdict.notes)
    ev.bounds.update({name: tokens * t_round for name, tokens in recomputed.items()})
    if len(weights) <= EXACT_MAX_REQUESTS:
        best = exact_makespan(weights, clients, EXACT_MAX_NODES)
        if best is not None:
            ev.optimum = best * t_round
            ev.exact_method = f"the validator's exhaustive search ({len(weights)} requests)"
        else:
            ev.unchecked_why = f"the exhaustive search gave up after {EXACT_MAX_NODES:,} nodes"
    else:
        ev.unchecked_why = (f"{len(weights)} requests; the validator re-solves up to "
                            f"{EXACT_MAX_REQUESTS}")
    if sol.get("status") in ("optimal", "feasible"):
        loads = _check_assignment(instance, sol, clients, t_round, reasons)
        if loads is not None:
            ev.objective = max(loads)
            makespan = max(_token_loads(instance, sol["assignment"], clients))
            ev.tight_bound = next((name for name, tokens in recomputed.items()
                                   if tokens == makespan), "")
            _check_optimal_in_tokens(sol, makespan, reasons)
    return ev


def _token_loads(instance: Instance, assignment: dict[str, int], clients: int) -> list[int]:
    loads = [0] * clients
    for r in instance.requests:
        loads[assignment[r.id]] += r.output_tokens
    return loads


def _check_optimal_in_tokens(sol: dict[str, Any], makespan: int, reasons: list[str]) -> None:
    """An optimal claim needs its certificate's bound equal to the makespan in whole tokens (a
    float tolerance in ms could hide tokens when a decode round is very short)."""
    certificate = sol.get("lower_bound")
    if sol.get("status") == "optimal" and isinstance(certificate, dict) \
            and is_int(certificate.get("tokens")) and certificate["tokens"] != makespan:
        reasons.append(f"status optimal, but the makespan is {makespan} tokens and the lower "
                       f"bound {certificate['tokens']} tokens")


def _check_assignment(instance: Instance, sol: dict[str, Any], clients: int, t_round: float,
                      reasons: list[str]) -> list[float] | None:
    assignment = sol.get("assignment")
    if not isinstance(assignment, dict):
        reasons.append("assignment is missing or not a mapping of request id to client")
        return None
    ids = set(instance.ids)
    missing = sorted(ids - assignment.keys())
    unknown = sorted(assignment.keys() - ids)
    if missing:
        reasons.append(f"{len(missing)} request(s) not assigned, e.g. {missing[:3]}")
    if unknown:
        reasons.append(f"{len(unknown)} unknown request id(s), e.g. {unknown[:3]}")
    bad = {rid: c for rid, c in assignment.items() if not is_int(c) or not 0 <= c < clients}
    if bad:
        first = next(iter(bad.items()))
        reasons.append(f"{len(bad)} request(s) on a client outside 0..{clients - 1}, "
                       f"e.g. {first[0]} -> {first[1]!r}")
    if missing or unknown or bad:
        return None
    loads = [0.0] * clients
    for r in instance.requests:
        loads[assignment[r.id]] += r.output_tokens * t_round
    stated = sol.get("loads")
    if not isinstance(stated, list) or len(stated) != clients:
        reasons.append(f"loads must list {clients} client loads")
        return None
    wrong = [j for j, (a, b) in enumerate(zip(stated, loads, strict=True))
             if not is_number(a) or abs(a - b) > tolerance(b)]
    if wrong:
        j = wrong[0]
        reasons.append(f"{len(wrong)} client load(s) wrong, e.g. client {j}: "
                       f"{stated[j]} stated, {loads[j]} recomputed")
    t_stated = sol.get("t_round_ms")
    if t_stated is not None and (not is_number(t_stated) or abs(t_stated - t_round) > 1e-6):
        reasons.append(f"t_round_ms {t_stated!r} but the profile gives {t_round}")
    return loads


# ------------------------------------------------------------------------ bounds and search

def longest_first_makespan(weights: list[int], machines: int) -> int:
    """Each request, longest first, onto the least-loaded client."""
    heap = [0] * machines
    for x in sorted(weights, reverse=True):
        heapq.heapreplace(heap, heap[0] + x)
    return max(heap)


def exact_makespan(weights: list[int], machines: int, max_nodes: int) -> int | None:
    """The optimal makespan by depth-first search over the capacity: the smallest C for which
    the requests, longest first, fit clients of capacity C (clients with equal loads are
    interchangeable, so only one of them is tried). None when ``max_nodes`` are exceeded."""
    items = sorted(weights, reverse=True)
    nodes = 0

    def fits(cap: int, k: int, loads: list[int]) -> bool:
        nonlocal nodes
        nodes += 1
        if nodes > max_nodes:
            raise _GiveUp
        if k == len(items):
            return True
        tried = set()
        for j, load in enumerate(loads):
            if load + items[k] <= cap and load not in tried:
                tried.add(load)
                loads[j] += items[k]
                if fits(cap, k + 1, loads):
                    return True
                loads[j] -= items[k]
        return False

    cap = max(-(-sum(items) // machines), items[0])
    try:
        while not fits(cap, 0, [0] * machines):
            cap += 1
    except _GiveUp:
        return None
    return cap


class _GiveUp(Exception):
    pass


_NAMED_PART = re.compile(r"(ceil\(sum/J\)|[A-Za-z_]\w*)=(\d+)")
_CLOSING = re.compile(r"= (\d+) tokens \((.+)\)\s*$")


def _check_named_bounds(sol: dict[str, Any], weights: list[int], clients: int, t_round: float,
                        reasons: list[str], notes: list[str]) -> dict[str, int]:
    """Every ``name=value`` (tokens) in the proof line and the ``lower_bound`` certificate is
    recomputed; the certificate's bound times t_round must be the file's bound. Returns the
    closed-form bounds recomputed (tokens)."""
    proof = sol.get("proof")
    named: dict[str, int] = {}
    if isinstance(proof, str):
        named.update({k: int(v) for k, v in _NAMED_PART.findall(proof)})
        closing = _CLOSING.search(proof)
        if closing and closing[2] in named and named[closing[2]] != int(closing[1]):
            reasons.append(f"the proof concludes {closing[2]} = {closing[1]} tokens but lists "
                           f"{closing[2]} = {named[closing[2]]}")
        elif closing:
            named.setdefault(closing[2], int(closing[1]))
    field = sol.get("lower_bound")
    if field is not None:
        if not (isinstance(field, dict) and isinstance(field.get("name"), str)
                and is_int(field.get("tokens"))):
            reasons.append("lower_bound must be {name: string, tokens: integer}")
            return {}
        named[field["name"]] = field["tokens"]
        bound = sol.get("bound")
        if is_number(bound) and abs(bound - field["tokens"] * t_round) > tolerance(bound):
            reasons.append(f"bound {bound} is not lower_bound.tokens {field['tokens']} × "
                           f"t_round {t_round}")
    closed_forms: dict[str, int] = {}
    for name, value in named.items():
        recomputed = recompute_bound(name, weights, clients)
        if recomputed is None:
            notes.append(f"bound {name} = {value} tokens named in the proof is a proof by "
                         "search, not recomputed")
            continue
        closed_forms[name] = recomputed
        if recomputed != value:
            reasons.append(f"the proof names {name} = {value} tokens, but it is {recomputed}")
    return closed_forms
