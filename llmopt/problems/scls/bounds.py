"""Lower bounds on section 5's measures of every slice-level schedule (Cheng et al. 2024), and of
the iteration-level baseline ILS, under the paper's cost model (eqs 1–5, 8–9): the last finish
(``makespan_ms``, "last end"), the mean and p95 response time, and (an upper bound) the request
throughput, for the instance's arrivals on its W = ``system.instances`` model instances.

Notation: request r arrives at a_r with I_r input and O_r output tokens; D_r = Σ_{t=1..O_r}
(I_r + t) = O_r·I_r + O_r(O_r + 1)/2; the coefficients p1..p4 (eq 3) and d1..d4 (eq 4) must all
be ≥ 0 (else no bound: ``slice_bounds`` returns None).

**Slice-level schedules** (``SLICE``: padded static batches, any batcher, offloader, interval
and slice length S; what ``llmopt.validate.slices`` accepts). A request's k-th slice has it in
a batch of N_k ≥ 1 requests padded to L_k ≥ P_k, its prompt then (I_r plus the g_1 + … +
g_{k−1} tokens generated in its earlier slices), for L_o,k ≥ g_k iterations, g_k the tokens it
generates there. With non-negative coefficients T_serve(N, L, L_o) (eqs 1–4) does not decrease
in N, L or L_o, so the slice lasts at least T_serve(1, P_k, g_k), and its slices run one after
another. Summed over the slices, the decode sums telescope: Σ_k (g_k·P_k + g_k(g_k + 1)/2) =
Σ_t (I_r + t) = D_r, and the prefills cost at least the first one. Hence

1. *alone*: finish_r ≥ a_r + T_serve(1, I_r, O_r) = a_r + (p1 + p3)·I_r + p2 + p4 +
   (d1 + d3)·D_r + (d2 + d4)·O_r. So response_r ≥ T_serve(1, I_r, O_r), and the mean, the p95
   (a percentile with linear interpolation does not decrease in any value) and the last finish
   are at least those of these times.
2. *work*: a batch's time is its members' own parts (p1·L + p2 + d1·Σ_l (L + l) + d2·L_o each,
   at least p1·P_k + p2 + d1·(g_k·P_k + g_k(g_k+1)/2) + d2·g_k) plus the batch's own (p3·L + p4
   + Σ_l (d3·(L + l) + d4) ≥ p4 + d4·L_o). Summed over a request's slices its own parts are at
   least w_r = p1·I_r + p2 + d1·D_r + d2·O_r. A batch holds at most N_cap requests (eq 8 with
   ζ, or Algorithm 2's rules, at the shortest prompt and S = 1; and at most n) and each of its
   iterations gives each member at most one token, so the requests R_t arriving at t or later
   need at least ⌈Σ_{R_t} O_r / N_cap⌉ batch iterations and ⌈|R_t| / N_cap⌉ batches, all
   starting at t or later. W instances run one batch at a time each, so for every arrival time
   t: last finish ≥ t + (Σ_{R_t} w_r + d4·⌈Σ_{R_t} O_r / N_cap⌉ + p4·⌈|R_t| / N_cap⌉) / W (the
   last batch to end finishes a request: one that finishes none returns every member for
   another batch).

**ILS** (``ITERATION``: the simulation core's continuous batching timed by eqs 3–4 per request,
``llmopt.data.cost.scls.iteration_ms``: a prefill part p1·P + p2·N + p3·P/N + p4 and a decode
part d1·(K + d) + d2·d + d3·(K + d)/d + d4). The first token comes from the first decode, so
each later token t = 1 … O_r comes from an iteration of its own: a decode reading I_r + t − 1
KVs, whose part is at least d1·(I_r + t) + d2 + d4, or, after an eviction, the end of a refill
of I_r + t − 1 tokens, whose chunks cost at least p1·(I_r + t − 1) + p2 + p4; q_t is the smaller.
The prompt's chunks cost at least p1·I_r + p2 + p4. p3 and d3 multiply the batch's mean
length, not the request's, and are dropped. So finish_r ≥ a_r + p1·I_r + p2 + p4 + Σ_t q_t
(*alone*). The *work* bound holds with w_r = p1·I_r + p2 + Σ_t min(d1·(I_r + t) + d2,
p1·(I_r + t − 1) + p2) (the request's own parts), at most J = ``system.clients`` requests per
iteration (N_cap = min(n, J)), and, for the iterations' own parts, at least min(p4, d4) per
iteration giving R_t a token and p4 per iteration taking their first chunks (an iteration may
do both: the larger of the two totals is kept).

Neither bound uses prefix caching: a cached prefix would not be counted by eq 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from llmopt.data.cost.scls import SclsProfile
from llmopt.data.instance import Instance


class Engine(StrEnum):
    """The schedules a bound holds for."""

    SLICE = "slice"          # padded static batches (SLS, SO, PM, AB, LB, SCLS)
    ITERATION = "iteration"  # continuous batching on eqs 3–4 per request (ILS)


VALID_UNDER = {
    Engine.SLICE: "eqs 1–5 and 8–9 (Algorithm 2), p and d ≥ 0: every slice-level schedule "
                  "(padded static batches, any batcher, offloading, interval and slice length) "
                  "on {w} model instance(s) with these arrivals; no prefix cache",
    Engine.ITERATION: "eqs 3–4 per request, p and d ≥ 0: every continuous-batching schedule "
                      "of the simulation core (ILS, any router, evictions included) on {w} "
                      "model instance(s), at most system.clients running each; no prefix cache",
}


@dataclass(frozen=True)
class SliceBounds:
    """Lower bounds (ms) on the last finish and on the mean and p95 response time, and an upper
    bound on the request throughput (requests/s), for the schedules of ``engine``."""

    engine: Engine
    makespan_ms: float
    response_mean_ms: float
    response_p95_ms: float
    throughput_rps: float
    alone_ms: float      # the alone bound on the last finish
    work_ms: float       # the work bound on it
    batch_cap: int       # N_cap
    valid_under: str

    def row(self) -> dict[str, float]:
        """The bounds as a row of ``policies.slice.replay.LADDER_COLUMNS``' measures."""
        return {"throughput_rps": self.throughput_rps, "response_mean_ms": self.response_mean_ms,
                "response_p95_ms": self.response_p95_ms, "makespan_ms": self.makespan_ms}


def coefficients_apply(profile: SclsProfile) -> bool:
    """Whether the bounds hold: every coefficient of eqs 3–4 non-negative."""
    return min(profile.time_coefficients()) >= 0


def slice_bounds(instance: Instance, engine: Engine = Engine.SLICE) -> SliceBounds | None:
    """The bounds of the module doc for the schedules of ``engine``; None when a coefficient
    is negative (or the profile is not of the scls family)."""
    profile = instance.profile
    if not isinstance(profile, SclsProfile) or not coefficients_apply(profile):
        return None
    p, d = profile.prefill, profile.decode
    a = instance.arrival_ms.astype(float)
    i = instance.input_tokens.astype(float)
    o = instance.output_tokens.astype(float)
    n = len(a)
    if n == 0:
        return None
    decode_sum = o * i + o * (o + 1) / 2
    if engine is Engine.SLICE:
        alone = (p.c1 + p.c3) * i + p.c2 + p.c4 + (d.c1 + d.c3) * decode_sum + (d.c2 + d.c4) * o
        own = p.c1 * i + p.c2 + d.c1 * decode_sum + d.c2 * o
        cap = max(1, min(n, profile.max_batch(int(i.min()), 1)))
        per_token, per_batch = d.c4, p.c4
    else:
        later = _sum_min_linear(o, d.c1 * i + d.c2 + d.c4, d.c1,
                                p.c1 * (i - 1) + p.c2 + p.c4, p.c1)
        alone = p.c1 * i + p.c2 + p.c4 + later
        own = p.c1 * i + p.c2 + _sum_min_linear(o, d.c1 * i + d.c2, d.c1,
                                                 p.c1 * (i - 1) + p.c2, p.c1)
        cap = max(1, min(n, int(instance.system.clients)))
        per_token, per_batch = min(d.c4, p.c4), p.c4
    w = int(instance.system.instances)
    work = _work_bound(a, own, o, cap, per_token, per_batch, w, separate=engine is Engine.SLICE)
    alone_end = float((a + alone).max())
    makespan = max(alone_end, work)
    span_s = (makespan - float(a.min())) / 1000.0
    return SliceBounds(
        engine, makespan, float(alone.mean()), float(np.percentile(alone, 95)),
        n / span_s if span_s > 0 else math.inf, alone_end, work, cap,
        VALID_UNDER[engine].format(w=w))


def _sum_min_linear(count: np.ndarray, a1: np.ndarray, b1: float, a2: np.ndarray,
                    b2: float) -> np.ndarray:
    """Σ_{t=1..count} min(a1 + b1·t, a2 + b2·t), per element (the two lines cross once)."""
    out = np.empty(len(count))
    for k, (m, x1, x2) in enumerate(zip(count.astype(int), a1, a2, strict=True)):
        t = np.arange(1, m + 1, dtype=float)
        out[k] = float(np.minimum(x1 + b1 * t, x2 + b2 * t).sum())
    return out


def _work_bound(arrivals: np.ndarray, own: np.ndarray, outputs: np.ndarray, cap: int,
                per_token: float, per_batch: float, instances: int, separate: bool) -> float:
    """max over arrival times t of t + (the work of the requests arriving at t or later, and
    the least overhead of their iterations and batches) / W; ``separate``: the two overheads
    add up (a static batch pays both), else the larger counts (see the module doc)."""
    order = np.argsort(arrivals, kind="stable")[::-1]       # latest first
    a, w, o = arrivals[order], np.cumsum(own[order]), np.cumsum(outputs[order])
    count = np.arange(1, len(a) + 1)
    tokens = per_token * np.ceil(o / cap)
    batches = per_batch * np.ceil(count / cap)
    overhead = tokens + batches if separate else np.maximum(tokens, batches)
    return float((a + (w + overhead) / instances).max())


__all__ = ["Engine", "SliceBounds", "coefficients_apply", "slice_bounds"]
