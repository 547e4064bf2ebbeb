"""Checks of SLO-aware priority-mapping solutions (Huang et al. 2025, section 3, eqs 2–19),
independent of the solvers: the priority order and the batches are checked against the
requests and the batch-size limit; every request's prefill (eq 14) and decode time (eqs 15–16,
summed token by token, not in the solver's closed form), its wait (eq 11: the longest request of
each batch before its own), TTFT, TPOT and E2E are recomputed from the profile's fields, and so
are each request's batch and batch size, which requests meet their SLOs, n, t = Σ E2E, the
objective t / n and G = 1000 · n / t requests/s (eq 2), and G's bound is 1000 / the bound.
The batch limit is the instance's ``system.clients`` on one model instance (a file planned for
more requests a batch is invalid; one planned for fewer cannot claim the instance's optimum),
``requests`` lists every request once with its class, and ``unmeetable`` is recomputed (the
requests that miss their SLO even alone at time 0, in any batch size allowed).
A CP-SAT answer may claim that its clock holds every time exactly (``cpsat.exact_clock``): that
is checked against the decimals of the profile's coefficients.
Serving the requests one per batch in the order given is a schedule of the validator's own (an
upper bound on the optimal t / n); up to ``EXACT_MAX_REQUESTS`` requests the optimum is
recomputed by enumerating every order and every split into batches.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from typing import Any

from llmopt.data.instance import Instance
from llmopt.validate.claims import Evidence, Verdict, tolerance
from llmopt.validate.fields import is_int, is_number

EXACT_MAX_REQUESTS = 6
MET_TOLERANCE_MS = 1e-6


class _Times:
    """Eqs 14–17 per request and batch size, from the bilinear profile's fields."""

    def __init__(self, instance: Instance, max_batch: int) -> None:
        profile: Any = instance.profile
        p, d = profile.prefill, profile.decode
        self.requests = instance.requests
        self.prefill: dict[tuple[int, int], float] = {}
        self.exec: dict[tuple[int, int], float] = {}
        for i, r in enumerate(self.requests):
            for b in range(1, max_batch + 1):
                pre = p.alpha * b * r.input_tokens + p.beta * b + p.gamma * r.input_tokens \
                    + p.delta
                dec = 0.0
                for k in range(1, r.output_tokens + 1):
                    length = r.input_tokens + k
                    dec += d.alpha * b * length + d.beta * b + d.gamma * length + d.delta
                self.prefill[i, b] = pre
                self.exec[i, b] = pre + dec

    def meets_alone(self, i: int, b: int) -> bool:
        """Whether request i meets its targets started at time 0 in a batch of size b."""
        return _meets(self.requests[i], self.prefill[i, b], self.exec[i, b])[1]

    def evaluate(self, batches: list[list[int]]) -> tuple[int, float, list[dict[str, Any]]]:
        """(requests meeting their SLOs, Σ E2E in ms, per-request times) of ``batches``."""
        start, met, total = 0.0, 0, 0.0
        rows: list[dict[str, Any]] = [{} for _ in self.requests]
        for position, batch in enumerate(batches):
            b = len(batch)
            for i in batch:
                r = self.requests[i]
                ttft = start + self.prefill[i, b]
                e2e = start + self.exec[i, b]
                tpot, ok = _meets(r, ttft, e2e)
                rows[i] = {"ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "met": ok,
                           "wait_ms": start, "batch": position, "batch_size": b}
                met += ok
                total += e2e
            start += max(self.exec[i, b] for i in batch)
        return met, total, rows


def _meets(r: Any, ttft: float, e2e: float) -> tuple[float | None, bool]:
    """(TPOT, whether every target of request ``r`` holds) for these TTFT and E2E."""
    tpot = (e2e - ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else None
    return tpot, all(value is None or target is None or value <= target + MET_TOLERANCE_MS
                     for value, target in ((ttft, r.ttft_slo_ms), (tpot, r.tpot_slo_ms),
                                           (e2e, r.e2e_slo_ms)))


def _objective(met: int, total: float) -> float:
    return total / met if met else math.inf


def check_slo_priority(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    reasons = verdict.reasons
    ev = Evidence()
    if instance.profile.family != "bilinear":
        reasons.append(f"profile {instance.profile.name} is not of the bilinear family")
        return ev
    max_batch = sol.get("max_batch")
    if not is_int(max_batch) or max_batch < 1:
        reasons.append(f"max_batch {max_batch!r} is not an integer >= 1")
        return ev
    clients = instance.system.clients
    if instance.system.instances != 1:
        reasons.append(f"a priority plan is for one model instance; the instance has "
                       f"{instance.system.instances} (system.instances)")
    if max_batch > clients:
        reasons.append(f"max_batch {max_batch} is above the instance's system.clients = "
                       f"{clients}: its batches cannot run there")
    elif max_batch < clients and sol.get("status") == "optimal":
        reasons.append(f"optimal for batches of at most {max_batch}, not for the instance's "
                       f"system.clients = {clients}")
    times = _Times(instance, max_batch)
    n = instance.num_requests
    met, total, _ = times.evaluate([[i] for i in range(n)])
    if met:
        ev.schedules.append(("one request per batch in the instance's order (the "
                             "validator's)", _objective(met, total)))
    if n <= EXACT_MAX_REQUESTS:
        best = _enumerated_optimum(instance, times, max_batch)
        if math.isfinite(best):
            ev.optimum = best
            ev.exact_method = (f"the validator's enumeration of every order and batch split "
                               f"of {n} requests")
    else:
        ev.unchecked_why = (f"{n} requests; the validator enumerates up to "
                            f"{EXACT_MAX_REQUESTS}")
    unmeetable = [r.id for i, r in enumerate(instance.requests)
                  if not any(times.meets_alone(i, b) for b in range(1, max_batch + 1))]
    if sol.get("status") in ("optimal", "feasible"):
        ev.objective = _check_decision(instance, sol, times, max_batch, unmeetable, reasons)
    if len(unmeetable) == n:
        # nothing meets its SLO even alone at time 0, so no plan meets any: G = 0 for every
        # plan, and t / n has no finite value
        ev.no_objective_why = ("no request meets its SLO even alone at time 0, so G = 0 for "
                               "every plan")
    return ev


def _enumerated_optimum(instance: Instance, times: _Times, max_batch: int) -> float:
    """The least t / n over every order and split into batches; kept per instance (by its
    SHA-256) and batch limit, since a cross-check validates several answers on one instance."""
    key = (instance.sha256, max_batch)
    if key not in _OPTIMA:
        if len(_OPTIMA) >= 64:
            _OPTIMA.clear()
        n = instance.num_requests
        _OPTIMA[key] = min((_objective(*times.evaluate(split)[:2])
                            for order in itertools.permutations(range(n))
                            for split in _splits(list(order), max_batch)), default=math.inf)
    return _OPTIMA[key]


_OPTIMA: dict[tuple[str, int], float] = {}


def _splits(order: list[int], max_batch: int):
    """Every split of ``order`` into consecutive batches of at most ``max_batch``."""
    if not order:
        yield []
        return
    for size in range(1, min(max_batch, len(order)) + 1):
        for rest in _splits(order[size:], max_batch):
            yield [order[:size], *rest]


def _check_decision(instance: Instance, sol: dict[str, Any], times: _Times, max_batch: int,
                    unmeetable: list[str], reasons: list[str]) -> float | None:
    index = {r.id: i for i, r in enumerate(instance.requests)}
    batches, priority = sol.get("batches"), sol.get("priority")
    if not isinstance(batches, list) or not all(
            isinstance(b, list) and b and all(x in index for x in b) for b in batches):
        reasons.append("batches must be a list of non-empty lists of request ids")
        return None
    flat = [x for b in batches for x in b]
    if sorted(flat) != sorted(index):
        reasons.append("the batches do not hold every request exactly once")
        return None
    if priority != flat:
        reasons.append("priority is not the batches' requests in order")
    if any(len(b) > max_batch for b in batches):
        reasons.append(f"a batch holds more than max_batch = {max_batch} requests")
        return None
    met, total, rows = times.evaluate([[index[x] for x in b] for b in batches])
    if sol.get("unmeetable") != unmeetable:
        reasons.append(f"unmeetable is {sol.get('unmeetable')!r:.80}, recomputed "
                       f"{unmeetable!r:.80} (missing their SLO even alone at time 0)")
    for key, value in (("n_met", met), ("total_latency_ms", total),
                       ("g_per_s", 1000.0 * met / total if total > 0 else 0.0)):
        given = sol.get(key)
        if not is_number(given) or not math.isclose(given, value, abs_tol=tolerance(value)):
            reasons.append(f"{key} is {given!r}, recomputed {value:,.6f} (eqs 2, 3, 6, 14-17)")
    _check_bound_in_g(sol, reasons)
    _check_clock(instance, sol, reasons)
    listed = sol.get("requests")
    ids = [row.get("id") if isinstance(row, dict) else None for row in listed] \
        if isinstance(listed, list) else None
    if ids is None or sorted(map(str, ids)) != sorted(index):
        reasons.append("requests must list every request once, by id")
    if isinstance(listed, list):
        for row in listed:
            rid = row.get("id") if isinstance(row, dict) else None
            i = index.get(rid) if isinstance(rid, str) else None
            if i is None:
                reasons.append(f"requests: an entry without a known id ({row!r:.60})")
                continue
            for key in ("ttft_ms", "tpot_ms", "e2e_ms", "wait_ms"):
                value = rows[i][key]
                if value is None:
                    if row.get(key) is not None:
                        reasons.append(f"requests {row['id']}: {key} is {row.get(key)!r}, "
                                       "recomputed none (a single output token)")
                elif not is_number(row.get(key)) or not math.isclose(
                        row[key], value, abs_tol=tolerance(value)):
                    reasons.append(f"requests {row['id']}: {key} is {row.get(key)!r}, "
                                   f"recomputed {value:,.6f}")
            if row.get("slo_class") != instance.requests[i].slo_class:
                reasons.append(f"requests {row['id']}: slo_class is {row.get('slo_class')!r}, "
                               f"the instance's {instance.requests[i].slo_class!r}")
            for key in ("met", "batch", "batch_size"):
                if row.get(key) != rows[i][key] or type(row.get(key)) is not type(rows[i][key]):
                    reasons.append(f"requests {row['id']}: {key} is {row.get(key)!r}, "
                                   f"recomputed {rows[i][key]!r}")
    return _objective(met, total) if met else None


def _check_clock(instance: Instance, sol: dict[str, Any], reasons: list[str]) -> None:
    """A CP-SAT answer states its clock, 10^-``clock_decimals`` ms, and whether that clock holds
    every time exactly (``exact_clock``). Eqs 14–16 multiply the profile's coefficients by
    integers (batch size, lengths), so a time has no more decimals than the coefficients: the
    clock is exact only when no coefficient has more decimals than it."""
    cp = sol.get("cpsat")
    if not isinstance(cp, dict) or cp.get("exact_clock") is not True:
        return
    profile: Any = instance.profile
    clock = cp.get("clock_decimals")
    most = max(_decimals(getattr(part, name)) for part in (profile.prefill, profile.decode)
               for name in ("alpha", "beta", "gamma", "delta"))
    if not is_int(clock) or clock < most:
        reasons.append(f"cpsat.exact_clock is true on a clock of 10^-{clock!r} ms, but the "
                       f"profile's coefficients have up to {most} decimals")


def _decimals(x: float) -> int:
    """Decimals of ``x`` as written (its shortest repr)."""
    return max(0, -int(Decimal(repr(float(x))).normalize().as_tuple().exponent))


def _check_bound_in_g(sol: dict[str, Any], reasons: list[str]) -> None:
    """``g_bound_per_s`` is the file's bound on t / n, as requests/s: 1000 / bound."""
    bound, given = sol.get("bound"), sol.get("g_bound_per_s")
    if not is_number(bound) or bound <= 0:
        return
    value = 1000.0 / bound
    if not is_number(given) or not math.isclose(given, value, rel_tol=1e-9,
                                                abs_tol=tolerance(value)):
        reasons.append(f"g_bound_per_s is {given!r}, but the bound on t / n, "
                       f"{bound:,.6f} ms, gives {value:,.9f} requests/s")
