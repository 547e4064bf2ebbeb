"""The exact optimum of G = n / t (Huang et al. 2025, eq 2) with CP-SAT, with proof.

G is a ratio, so it is solved parametrically: for a number k of met requests, T_k is the least
total latency t (eq 3) of a plan in which at least k requests meet their SLOs (eq 7), and
G* = max_k k / T_k. T_k does not decrease with k, so with T_min the least t of any plan, no k
with k / T_min ≤ G_inc (the incumbent's G) can beat the incumbent.

Order of the sub-solves: (1) k_max, the most requests that can meet their SLOs together
(Moore–Hodgson at batch 1; else CP-SAT on at most MAX_MET_SHARE of the time limit, below
Moore–Hodgson on a relaxation, ``max_met_bound``); (2) when
more than one k would be tried at batch > 1, T_0 (the least t of any plan, or its proven bound;
at batch 1 the closed-form bound is T_0, Smith's rule) on at most
MIN_T_SHARE of the time left, which replaces the closed-form T_min when larger and prunes the
small k; (3) T_k for k = k_max downwards while k / T_min > G_inc, over the plans not yet
evaluated (below). Steps 1 and 2 are hinted with the plan found so far that is feasible for
them of least t; step 3 has no feasible hint (every plan found is forbidden there).

Model (one instance, requests i, batch slots j = 0..N−1, sizes s = 1..B):

- x_ij: request i runs in batch j (Σ_j x_ij = 1); y_js: batch j holds s requests (s = 0: empty;
  Σ_s y_js = 1, Σ_i x_ij = Σ_s s·y_js; an empty batch is followed by empty ones);
- w_is: request i runs in a batch of s requests (Σ_s w_is = 1; x_ij ∧ y_js ⇒ w_is);
- the batch's duration D_j ≥ t_exec,i(s)·w_is for every request in it (eq 11: its longest
  request; eqs 14–17 tabulated per size), start_0 = 0, start_{j+1} = start_j + D_j;
- st_i ≥ start_j when x_ij (the wait of eq 11; only ≥ is needed: a later start only delays);
- t = Σ_i (st_i + Σ_s t_exec,i(s)·w_is) (eqs 3–4);
- met_i ⇒ st_i + Σ_s t_p,i(s)·w_is ≤ TTFT target (eq 8), st_i + t_exec,i ≤ E2E target (eq 4),
  and w_is = 0 for each size s at which the TPOT target fails (TPOT does not depend on the
  wait); met_i = 0 for a request that misses even alone at time 0 (reported as unmeetable);
- Σ met_i ≥ k, and t ≤ k / G_inc (only plans better than the incumbent matter).

Every plan of the problem is a solution of the model with at least its met count and at most
its t (its D_j, st_i exactly, N = number of requests slots suffice), and every model solution
read back as batches is a plan whose evaluation is no worse in the model's own relaxed times.

Time. Times are integers of 10^-d ms: d is the decimals of the profile's coefficients when
N + 1 horizons (every request run alone at the largest batch, one after another) stay within
``CLOCK_UNITS``, else fewer (10^-3 ms for Table 2 at 6–10 requests). Each time is rounded down
and each target up: the model is a relaxation. A plan's model t is at most its exact t, and a
plan with k requests meeting their SLOs has at least k met in the model; so k / (the model's
T_k) is an upper bound on k / T_k, and an infeasible sub-solve with t ≤ ⌊k / G_inc⌋ clock
units proves that no plan of at least k met has G > G_inc.

On a rounded clock the model's T_k lies below the exact t of the plan it proves optimal (up to
about N(N+1)/2 units), so its bound k / T_k can stay above the plan's exact G; a few µs on the
objective t / n, but no proof (issue 30: the validator rejected such "optimal" answers). So from
step 3 on every plan evaluated exactly (``model.evaluate``) is forbidden in the model (a clause
on its assignment; G_inc is the best of them, so they need no further bound), and identical
requests are kept in index order (``identical_requests``: a relabelled plan has the same n and
t). Each sub-solve then bounds the plans not evaluated yet. When one proves an optimum whose
bound is above G_inc·(1 + 1e-9), its plan has just been read back, evaluated and forbidden, and
the same k is solved again (a rounding window; at most ``WINDOW_PLANS`` in all) until the
sub-solve is infeasible (every plan that could beat G_inc on the model's relaxed account is then
evaluated: k / T_k ≤ G_inc exactly) or its bound comes within 1e-9 of G_inc. The same holds
for a target rounded up (a plan met in the model but not exactly) and for Dinkelbach's steps.
``proven`` only when the bound on G is within a relative 1e-9 of the incumbent's exact G, with no
allowance for the clock; when time or ``WINDOW_PLANS`` stops the windows, the model's bound is
returned as it is (a valid bound, not a proof).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar

import numpy as np
from ortools.sat.python import cp_model

from llmopt.backends.cpsat import solve_stoppable, subsolver
from llmopt.problems.slo_priority.model import (
    MET_TOLERANCE_MS,
    Batches,
    Evaluation,
    SloPriorityData,
    evaluate,
    g_per_s,
)
from llmopt.progress import SILENT, Progress
from llmopt.sequencing import moore_hodgson

CLOCK_UNITS = 10 ** 9
MAX_MET_SHARE = 0.4  # of the time limit, at most, for the most requests meeting their SLOs
MIN_T_SHARE = 0.25   # of the time left, at most, for T_0
T = TypeVar("T", int, float)
PROOF_TOLERANCE = 1e-9
WINDOW_PLANS = 1000  # at most this many sub-solves repeated for the clock's rounding


@dataclass
class ExactOutcome:
    batches: Batches
    n_met: int
    total_ms: float
    g_per_s: float
    bound_g_per_s: float          # a proven upper bound on G (requests/s)
    proven: bool
    decimals: int                 # the model's clock: 10^-decimals ms
    exact_clock: bool             # the clock holds every time exactly
    solves: list[dict[str, object]] = field(default_factory=list)
    forbidden: int = 0            # plans evaluated exactly, then forbidden in the model
    windows: int = 0              # sub-solves repeated because the rounding kept G's bound open


def _decimals(x: float) -> int:
    exponent = Decimal(repr(float(x))).normalize().as_tuple().exponent
    return max(0, -int(exponent))


def clock_decimals(data: SloPriorityData) -> tuple[int, bool]:
    """The clock's decimals and whether every time is exact on it."""
    p = data.profile
    need = max(_decimals(c) for c in p.time_coefficients())
    B = data.max_batch
    horizon = sum(max(row[1:B + 1]) for row in data.exec_ms)
    d = need
    while d > 0 and (data.n + 1) * horizon * 10 ** d > CLOCK_UNITS:
        d -= 1
    return d, d == need


def _clock_tables(data: SloPriorityData, scale: int
                  ) -> tuple[list[list[int]], list[list[int]], int]:
    """t_exec and t_p per request and batch size (column 0 unused) in clock units, rounded
    down, and the horizon (every request at its slowest size, one after another)."""
    B = data.max_batch
    ex = [[0] + [math.floor(data.exec_ms[i][s] * scale) for s in range(1, B + 1)]
          for i in range(data.n)]
    pre = [[0] + [math.floor(data.prefill_ms[i][s] * scale) for s in range(1, B + 1)]
           for i in range(data.n)]
    return ex, pre, sum(max(row[1:]) for row in ex)


class _Model:
    def __init__(self, data: SloPriorityData, decimals: int, only_met: bool = False) -> None:
        """``only_met``: the model places only the met requests (for the most requests that
        can meet their SLOs together; valid when times do not decrease with the batch size,
        ``monotone``: the others then run after them, and a met request's batch without
        them is no slower)."""
        self.data, self.only_met = data, only_met
        n, B = data.n, data.max_batch
        scale = 10 ** decimals
        self.scale = scale
        m = cp_model.CpModel()
        ex, pre, horizon = _clock_tables(data, scale)
        N = n  # batch slots
        x = [[m.new_bool_var(f"x{i}_{j}") for j in range(N)] for i in range(n)]
        y = [[m.new_bool_var(f"y{j}_{s}") for s in range(B + 1)] for j in range(N)]
        w = [[m.new_bool_var(f"w{i}_{s}") for s in range(B + 1)] for i in range(n)]
        start = [m.new_int_var(0, horizon, f"start{j}") for j in range(N + 1)]
        dur = [m.new_int_var(0, horizon, f"D{j}") for j in range(N)]
        st = [m.new_int_var(0, horizon, f"st{i}") for i in range(n)]
        met = [m.new_bool_var(f"met{i}") for i in range(n)]
        m.add(start[0] == 0)
        for i in range(n):
            m.add_exactly_one(w[i])
            if only_met:
                m.add(sum(x[i]) == met[i])
                m.add(w[i][0] == met[i].Not())
            else:
                m.add_exactly_one(x[i])
                m.add(w[i][0] == 0)
        for j in range(N):
            m.add_exactly_one(y[j])
            m.add(sum(x[i][j] for i in range(n)) == sum(s * y[j][s] for s in range(B + 1)))
            m.add(start[j + 1] == start[j] + dur[j])
            if j + 1 < N:
                m.add_implication(y[j][0], y[j + 1][0])
            if j < -(-n // B) and not only_met:
                m.add(y[j][0] == 0)  # at least ⌈n/B⌉ batches are non-empty
            for i in range(n):
                for s in range(1, B + 1):
                    m.add_bool_or([x[i][j].Not(), y[j][s].Not(), w[i][s]])
                exec_i = sum(ex[i][s] * w[i][s] for s in range(1, B + 1))
                m.add(dur[j] >= exec_i).only_enforce_if(x[i][j])
                m.add(dur[j] >= min(ex[i][1:]) * x[i][j])  # the same without big-M
                m.add(st[i] >= start[j]).only_enforce_if(x[i][j])
        exec_expr = [sum(ex[i][s] * w[i][s] for s in range(1, B + 1)) for i in range(n)]
        for i in range(n):
            if all(data.slack_ms[i][s] < 0 for s in range(1, B + 1)):
                m.add(met[i] == 0)
                continue
            for s in range(1, B + 1):
                if data.slack_ms[i][s] < 0 and not self._ttft_e2e_only(i, s):
                    m.add_implication(met[i], w[i][s].Not())   # TPOT fails at size s
            ttft, e2e = data.ttft_slo_ms[i], data.e2e_slo_ms[i]
            if ttft is not None:
                deadline = math.ceil((ttft + MET_TOLERANCE_MS) * scale)
                m.add(st[i] + sum(pre[i][s] * w[i][s] for s in range(1, B + 1))
                      <= deadline).only_enforce_if(met[i])
            if e2e is not None:
                deadline = math.ceil((e2e + MET_TOLERANCE_MS) * scale)
                m.add(st[i] + exec_expr[i] <= deadline).only_enforce_if(met[i])
        self.total_hi = n * horizon + horizon
        self.total = m.new_int_var(0, self.total_hi, "t")
        m.add(self.total == sum(st) + sum(exec_expr))
        # valid cuts: batch j (of the first ⌈N/B⌉, all non-empty) starts after j batches each
        # lasting at least a distinct request's least execution time; t ≥ the lower bound
        e_min = sorted(min(row[1:]) for row in ex)
        if not only_met:
            for j in range(1, min(N, -(-n // B)) + 1):
                m.add(start[j] >= sum(e_min[:j]))
            m.add(self.total >= _lower_bound([min(row[1:]) for row in ex], B))
        self.count = m.new_int_var(0, n, "n")
        m.add(self.count == sum(met))
        self.model, self.x, self.y, self.w, self.met = m, x, y, w, met
        self.st, self.start, self.dur = st, start, dur
        self.n_slots = N

    def _ttft_e2e_only(self, i: int, s: int) -> bool:
        """Whether slack −inf at size s comes from TTFT/E2E at time 0 rather than TPOT (the
        model's deadlines express those; TPOT needs the implication)."""
        d = self.data
        tpot = d.tpot_slo_ms[i]
        out = d.output_tokens[i]
        return not (tpot is not None and out > 1
                    and d.decode_ms[i][s] / (out - 1) > tpot + MET_TOLERANCE_MS)

    def set_domain(self, var: cp_model.IntVar, lo: int, hi: int) -> None:
        proto = self.model.proto.variables[var.index]
        proto.domain[0] = lo
        proto.domain[1] = hi

    def hint(self, batches: Batches) -> None:
        m, data = self.model, self.data
        m.clear_hints()
        ev = evaluate(data, batches)
        if self.only_met:  # the met requests' batches without the others
            batches = tuple(kept for b in batches if (kept := tuple(i for i in b if ev.met[i])))
        where = {i: j for j, b in enumerate(batches) for i in b}
        for i in range(data.n):
            for j in range(self.n_slots):
                m.add_hint(self.x[i][j], where.get(i) == j)
            size = len(batches[where[i]]) if i in where else 0
            for s in range(self.data.max_batch + 1):
                m.add_hint(self.w[i][s], size == s)
            m.add_hint(self.met[i], ev.met[i])
        for j in range(self.n_slots):
            size = len(batches[j]) if j < len(batches) else 0
            for s in range(self.data.max_batch + 1):
                m.add_hint(self.y[j][s], size == s)

    def position(self, i: int) -> cp_model.LinearExpr:
        """Request i's batch slot (its place in the priority order, up to its batch)."""
        return cp_model.LinearExpr.weighted_sum(self.x[i], list(range(self.n_slots)))

    def exclude(self, batches: Batches) -> None:
        """Forbid the model's solution of this plan (batch j in slot j)."""
        self.model.add_bool_or([self.x[i][j].Not() for j, b in enumerate(batches) for i in b])

    def read(self, value: object) -> Batches:
        v = value  # solver.value
        batches = []
        for j in range(self.n_slots):
            members = tuple(i for i in range(self.data.n) if v(self.x[i][j]))  # type: ignore
            if members:
                batches.append(members)
        if self.only_met:  # the others after them, in full batches
            placed = {i for b in batches for i in b}
            rest = [i for i in range(self.data.n) if i not in placed]
            B = self.data.max_batch
            batches.extend(tuple(rest[p:p + B]) for p in range(0, len(rest), B))
        return tuple(batches)


class _SingleModel(_Model):
    """Max batch 1: x_ip = request i at position p. Position p starts at
    start_p = Σ_{p'<p} Σ_i t_exec,i·x_ip' and t = Σ_p (N − p)·Σ_i t_exec,i·x_ip (eqs 3–4, 11):
    linear, the assignment relaxation of Σ C_j. met_i ∧ x_ip ⇒ start_p meets i's TTFT and E2E
    targets (eqs 4, 8); a request whose TPOT fails alone is unmeetable."""

    def __init__(self, data: SloPriorityData, decimals: int) -> None:
        self.data, self.only_met = data, False
        n = data.n
        scale = 10 ** decimals
        self.scale = scale
        m = cp_model.CpModel()
        ex = [math.floor(data.exec_ms[i][1] * scale) for i in range(n)]
        pre = [math.floor(data.prefill_ms[i][1] * scale) for i in range(n)]
        horizon = sum(ex)
        x = [[m.new_bool_var(f"x{i}_{p}") for p in range(n)] for i in range(n)]
        met = [m.new_bool_var(f"met{i}") for i in range(n)]
        start = [m.new_int_var(0, horizon, f"start{p}") for p in range(n)]
        for i in range(n):
            m.add_exactly_one(x[i])
        for p in range(n):
            m.add_exactly_one(x[i][p] for i in range(n))
        dur = [sum(ex[i] * x[i][p] for i in range(n)) for p in range(n)]
        m.add(start[0] == 0)
        for p in range(1, n):
            m.add(start[p] == start[p - 1] + dur[p - 1])
        e_sorted = sorted(ex)
        for p in range(1, n):
            m.add(start[p] >= sum(e_sorted[:p]))
        for i in range(n):
            if data.slack_ms[i][1] < 0:
                m.add(met[i] == 0)
                continue
            limits = []
            ttft, e2e = data.ttft_slo_ms[i], data.e2e_slo_ms[i]
            if ttft is not None:
                limits.append(math.ceil((ttft + MET_TOLERANCE_MS) * scale) - pre[i])
            if e2e is not None:
                limits.append(math.ceil((e2e + MET_TOLERANCE_MS) * scale) - ex[i])
            if limits:
                latest = min(limits)
                for p in range(n):
                    m.add(start[p] <= latest).only_enforce_if([met[i], x[i][p]])
        self.total_hi = n * horizon
        self.total = m.new_int_var(0, self.total_hi, "t")
        m.add(self.total == sum((n - p) * dur[p] for p in range(n)))
        m.add(self.total >= _lower_bound(ex, 1))
        self.count = m.new_int_var(0, n, "n")
        m.add(self.count == sum(met))
        self.model, self.x, self.met, self.n_slots = m, x, met, n

    def hint(self, batches: Batches) -> None:
        m, data = self.model, self.data
        m.clear_hints()
        ev = evaluate(data, batches)
        for i in range(data.n):
            for p in range(data.n):
                m.add_hint(self.x[i][p], ev.batch_of[i] == p)
            m.add_hint(self.met[i], ev.met[i])

    def position(self, i: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.weighted_sum(self.x[i], list(range(self.n_slots)))

    def exclude(self, batches: Batches) -> None:
        self.model.add_bool_or([self.x[b[0]][p].Not() for p, b in enumerate(batches)])

    def read(self, value: object) -> Batches:
        v = value
        n = self.data.n
        return tuple((next(i for i in range(n) if v(self.x[i][p])),)  # type: ignore
                     for p in range(n))


class _IntervalModel(_Model):
    """Max batch B ≥ 1, batches as intervals of the priority sequence: z_as = a batch of s
    requests takes sequence positions a..a+s−1 (the z cover every position once: the batch
    sizes, eq 10), v_ias = request i runs in that batch (Σ_i v_ias = s·z_as, Σ_as v_ias = 1).
    A batch lasts D_as ≥ t_exec,i(s)·v_ias for each i (eq 11; and ≥ their mean), starts at
    start_a = Σ_{a'+s' ≤ a} D_a's' and delays the N − a − s requests after it, so
    t = Σ_as (N − a − s)·D_as + Σ_ias t_exec,i(s)·v_ias (eqs 3–4) is linear; met_i ∧ v_ias ⇒
    start_a meets i's TTFT and E2E targets at size s, and met_i ⇒ v_ias = 0 where TPOT fails."""

    def __init__(self, data: SloPriorityData, decimals: int) -> None:
        self.data, self.only_met = data, False
        n, B = data.n, data.max_batch
        scale = 10 ** decimals
        self.scale = scale
        m = cp_model.CpModel()
        ex, pre, horizon = _clock_tables(data, scale)
        spans = [(a, s) for a in range(n) for s in range(1, B + 1) if a + s <= n]
        z = {(a, s): m.new_bool_var(f"z{a}_{s}") for a, s in spans}
        v = {(i, a, s): m.new_bool_var(f"v{i}_{a}_{s}") for i in range(n) for a, s in spans}
        dur = {(a, s): m.new_int_var(0, max(ex[i][s] for i in range(n)), f"D{a}_{s}")
               for a, s in spans}
        met = [m.new_bool_var(f"met{i}") for i in range(n)]
        for p in range(n):
            m.add_exactly_one(z[a, s] for a, s in spans if a <= p < a + s)
        for a, s in spans:
            m.add(sum(v[i, a, s] for i in range(n)) == s * z[a, s])
            for i in range(n):
                m.add(dur[a, s] >= ex[i][s] * v[i, a, s])
            m.add(s * dur[a, s] >= sum(ex[i][s] * v[i, a, s] for i in range(n)))
        for i in range(n):
            m.add_exactly_one(v[i, a, s] for a, s in spans)
        start = [m.new_int_var(0, horizon, f"start{a}") for a in range(n)]
        for a in range(n):
            m.add(start[a] == sum(dur[a2, s2] for a2, s2 in spans if a2 + s2 <= a))
        for i in range(n):
            if all(data.slack_ms[i][s] < 0 for s in range(1, B + 1)):
                m.add(met[i] == 0)
                continue
            ttft, e2e = data.ttft_slo_ms[i], data.e2e_slo_ms[i]
            for s in range(1, B + 1):
                if data.slack_ms[i][s] < 0 and not self._ttft_e2e_only(i, s):
                    for a2, s2 in spans:
                        if s2 == s:
                            m.add_implication(met[i], v[i, a2, s2].Not())
                    continue
                limits = []
                if ttft is not None:
                    limits.append(math.ceil((ttft + MET_TOLERANCE_MS) * scale) - pre[i][s])
                if e2e is not None:
                    limits.append(math.ceil((e2e + MET_TOLERANCE_MS) * scale) - ex[i][s])
                if limits:
                    latest = min(limits)
                    for a2, s2 in spans:
                        if s2 == s:
                            m.add(start[a2] <= latest).only_enforce_if([met[i], v[i, a2, s2]])
        self.total_hi = (n + 1) * horizon
        self.total = m.new_int_var(0, self.total_hi, "t")
        m.add(self.total == sum((n - a - s) * dur[a, s] for a, s in spans)
              + sum(ex[i][s] * v[i, a, s] for i, a, s in v))
        m.add(self.total >= _lower_bound([min(row[1:]) for row in ex], B))
        self.count = m.new_int_var(0, n, "n")
        m.add(self.count == sum(met))
        self.model, self.met, self.n_slots = m, met, n
        self.z, self.v, self.spans = z, v, spans

    def hint(self, batches: Batches) -> None:
        m, data = self.model, self.data
        m.clear_hints()
        ev = evaluate(data, batches)
        where: dict[int, tuple[int, int]] = {}
        used = set()
        a = 0
        for b in batches:
            used.add((a, len(b)))
            for i in b:
                where[i] = (a, len(b))
            a += len(b)
        for a, s in self.spans:
            m.add_hint(self.z[a, s], (a, s) in used)
        for (i, a, s), var in self.v.items():
            m.add_hint(var, where[i] == (a, s))
        for i in range(data.n):
            m.add_hint(self.met[i], ev.met[i])

    def position(self, i: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.weighted_sum([self.v[i, a, s] for a, s in self.spans],
                                                [a for a, _ in self.spans])

    def exclude(self, batches: Batches) -> None:
        literals, a = [], 0
        for b in batches:
            literals += [self.v[i, a, len(b)].Not() for i in b]
            a += len(b)
        self.model.add_bool_or(literals)

    def read(self, value: object) -> Batches:
        val = value
        out = []
        for a, s in self.spans:
            if val(self.z[a, s]):  # type: ignore
                out.append((a, tuple(i for i in range(self.data.n)
                                     if val(self.v[i, a, s]))))  # type: ignore
        return tuple(b for _, b in sorted(out))


def monotone(data: SloPriorityData) -> bool:
    """Whether every request's prefill and decode times do not decrease with the batch size
    (true for non-negative coefficients, e.g. Table 2)."""
    B = data.max_batch
    return all(t[i][s] <= t[i][s + 1] for t in (data.prefill_ms, data.decode_ms)
               for i in range(data.n) for s in range(1, B))


def max_met_bound(data: SloPriorityData, instances: int = 1) -> int:
    """An upper bound on the most requests that can meet their SLOs together, exact at max
    batch 1: Moore and Hodgson's algorithm for 1||ΣU_j on p_i = e_i / B (e_i = min_s
    t_exec,i(s)), request i due at L_i + p_i + (B − 1)·max_k p_k, L_i = max_s slack_i(s) (the
    latest start of its batch at any size). Requests without a deadline (only a TPOT target that
    holds) are met anywhere (last).

    Why it bounds: list a plan's met requests by batch. A batch lasts at least each member's
    t_exec ≥ e, so the e of the requests in earlier batches sum to at most B times the start st_i
    of i's batch, and st_i ≤ L_i when i is met: Σ_(earlier) p_k ≤ L_i, plus at most B − 1
    batch-mates listed before i, each p_k ≤ max p. So the met requests meet these due dates in
    that order. At B = 1 (p = t_exec,i(1), due at slack_i(1) + t_exec,i(1)) it is exact.

    On W = ``instances`` model instances (Algorithm 2's plans: any split of the requests, each
    instance its own batches from time 0) the same holds with W·B in place of B: list the met
    requests by the start of their batch. Before i (in that order) come, on each instance, the
    requests of batches that ended by st_i (their e sum to at most B·st_i there) and those of at
    most one batch running or starting at st_i (at most B, each e ≤ max e; on i's own instance
    i's batch-mates, at most B − 1). So Σ_(up to i) e ≤ W·B·st_i + (W·B − 1)·max e + e_i: with
    p = e / (W·B), Σ_(up to i) p ≤ L_i + p_i + (W·B − 1)·max p."""
    B = data.max_batch
    least = [min(row[1:B + 1]) for row in data.exec_ms]
    wide = instances * B
    mates = (wide - 1) * max(least, default=0.0) / wide
    free = 0
    jobs = []
    for i in range(data.n):
        latest = max(data.slack_ms[i][1:B + 1])
        if latest == math.inf:
            free += 1
        elif latest >= 0:
            p = least[i] / wide
            jobs.append((latest + p + mates, p))
    # rel_tol: a plan adds the same times in another order (rounding)
    return len(jobs) - len(moore_hodgson(jobs, rel_tol=1e-9)) + free


def total_latency_lower_bound(data: SloPriorityData) -> float:
    """A lower bound (ms) on t (eq 3) over every plan, from e_i = min_s t_exec,i(s), each
    request's least execution time (``_lower_bound``). With B = 1 it is the shortest-first
    order's total, the exact minimum (Smith's rule)."""
    return _lower_bound([min(row[1:data.max_batch + 1]) for row in data.exec_ms],
                        data.max_batch)


def _lower_bound(least: list[T], max_batch: int) -> T:
    """The bound of :func:`total_latency_lower_bound` from each request's least execution
    time e (in ms, or in the model's rounded clock units: the model's cut must use its own
    rounded times, which the bound then holds for); e_(1) ≤ … ≤ e_(n) sorted, B = max_batch.

    t = Σ_i e2e_i ≥ Σ_i e_i + Σ_j D_j·A_j (eqs 3, 4, 11): batch j of a plan's M batches lasts D_j
    and A_j requests wait for it. For each M from ⌈n/B⌉ to n, over plans of exactly M batches:

    - A_j ≥ c_j = max(n − (j+1)·B, M − 1 − j): the later batches hold at most B requests and at
      least one each; c_j falls with j, so Σ_j D_j·A_j ≥ Σ_r D_[r]·c_r with D_[r] the durations
      in ascending order (rearrangement);
    - D_[r] ≥ e_(r+1): the r+1 shortest batches have distinct longest requests;
    - D_[r] ≥ e_(n−q·B), q = M − 1 − r: the q·B + 1 requests of largest e do not fit in the q
      batches longer than D_[r], so one of them runs in a batch no longer than it.

    The bound is the least over M; at M = ⌈n/B⌉ the last argument gives the total of the
    sorted requests cut into consecutive full batches."""
    n, B = len(least), max_batch
    if n == 0:
        return sum(least)
    e = np.sort(np.asarray(least))  # int64 for clock units: exact
    waits = []
    for M in range(-(-n // B), n + 1):
        r = np.arange(M)
        after = np.maximum(n - (r + 1) * B, M - 1 - r)
        longest = np.maximum(e[r], e[np.maximum(n - (M - 1 - r) * B, 1) - 1])
        waits.append((after * longest).sum())
    return (e.sum() + min(waits)).item()


def _hint_for(found: list[Evaluation], k: int | None) -> Batches | None:
    """The plan to hint a sub-solve with: of those with at least ``k`` requests meeting their
    SLOs (a solution of the sub-solve then), the least total latency."""
    if k is None:
        return None
    fit = [ev for ev in found if ev.n_met >= k]
    return min(fit, key=lambda ev: ev.total_ms).batches if fit else None


def identical_requests(data: SloPriorityData) -> list[list[int]]:
    """Groups (of two or more) of requests with the same lengths and targets: their tables are
    the same, so swapping two of them changes no plan's n or t."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i in range(data.n):
        key = (data.input_tokens[i], data.output_tokens[i], data.ttft_slo_ms[i],
               data.tpot_slo_ms[i], data.e2e_slo_ms[i])
        groups.setdefault(key, []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def canonical(batches: Batches, groups: list[list[int]]) -> Batches:
    """The same plan with each group of identical requests relabelled in index order along it
    (the same n and t; the one the model's symmetry constraints admit)."""
    rename: dict[int, int] = {}
    for group in groups:
        members = set(group)
        rename.update(zip([i for b in batches for i in b if i in members], group, strict=True))
    return tuple(tuple(rename.get(i, i) for i in b) for b in batches)


def solve_exact(data: SloPriorityData, incumbent: Batches, time_limit_s: float,
                workers: int | None = None, progress: Progress = SILENT,
                method: str = "parametric", formulation: str = "intervals") -> ExactOutcome:
    """G* with proof, or the best plan found and a proven upper bound on G when time runs out.
    ``incumbent`` (e.g. SA's plan) gives the first G_inc and the solver's hints."""
    t_begin = time.perf_counter()
    deadline = t_begin + time_limit_s
    workers = workers or 2
    decimals, exact_clock = clock_decimals(data)
    if data.max_batch == 1:
        mod: _Model = _SingleModel(data, decimals)
    elif formulation == "intervals":
        mod = _IntervalModel(data, decimals)
    else:
        mod = _Model(data, decimals)
    best = evaluate(data, incumbent)
    g_inc = best.g_per_s
    solves: list[dict[str, object]] = []
    found = [best]  # every plan evaluated: the hints of later sub-solves
    n = data.n
    scale = mod.scale
    groups = identical_requests(data)
    forbidden: set[Batches] = set()  # from step 3 on: plans evaluated, out of the model
    excluding = False

    def run(kind: str, k: int | None, share: float = 1.0
            ) -> tuple[str, float | None, float | None]:
        """One sub-solve of at most ``share`` of the time left; returns (status, objective,
        bound) in model units and keeps any better plan."""
        nonlocal best, g_inc
        left = (deadline - time.perf_counter()) * share
        if left <= 0.01:
            solves.append({"kind": kind, "k": k, "status": "not run (time)"})
            return "not_run", None, None
        if excluding:  # every plan found so far is forbidden: no hint is feasible
            mod.model.clear_hints()
        else:
            mod.hint(_hint_for(found, k) or best.batches)
        solver = subsolver(left, workers)
        status = solve_stoppable(solver, mod.model)
        name = solver.status_name(status)
        obj = bnd = None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            obj, bnd = solver.objective_value, solver.best_objective_bound
            plan = mod.read(solver.value)
            ev = evaluate(data, plan)
            found.append(ev)
            if excluding:
                forbid(plan)
            if ev.g_per_s > g_inc:
                best, g_inc = ev, ev.g_per_s
                progress.incumbent(1000.0 / g_inc if g_inc > 0 else None, None, " ms")
        elif status == cp_model.UNKNOWN:
            bnd = solver.best_objective_bound
        solves.append({"kind": kind, "k": k, "status": name.lower(), "objective": obj,
                       "bound": bnd, "runtime_s": round(solver.wall_time, 4)})
        return name, obj, bnd

    def forbid(plan: Batches) -> None:
        plan = canonical(plan, groups)
        if plan not in forbidden:
            forbidden.add(plan)
            mod.exclude(plan)

    def forbid_evaluated() -> None:
        """From here on each sub-solve ranges over the plans not evaluated yet (identical
        requests in index order: a plan and its relabelling have the same n and t)."""
        nonlocal excluding
        excluding = True
        for group in groups:
            for i, j in itertools.pairwise(group):
                mod.model.add(mod.position(i) <= mod.position(j))
        for ev in found:
            forbid(ev.batches)

    # 1. the most requests that can meet their SLOs together
    k_relaxed = max_met_bound(data)
    if data.max_batch == 1:
        k_max = k_relaxed
        solves.append({"kind": "max met", "k": None, "status": "optimal (Moore-Hodgson)",
                       "objective": k_max})
    else:
        solves.append({"kind": "max met", "k": None, "status": "bound (Moore-Hodgson, "
                       "relaxed)", "bound": k_relaxed})
        progress.stage("CP-SAT: most requests meeting their SLOs")
        full = mod
        if monotone(data):
            mod = _Model(data, decimals, only_met=True)
        mod.set_domain(mod.count, 0, k_relaxed)
        mod.model.maximize(mod.count)
        status, obj, bnd = run("max met", None, share=MAX_MET_SHARE)
        mod.set_domain(mod.count, 0, n)
        mod = full
        if status == "OPTIMAL":
            k_max = round(obj or 0)
        elif bnd is not None:
            k_max = min(k_relaxed, math.floor(bnd + 1e-9))
        else:
            k_max = k_relaxed
    # 2. a lower bound on the total latency of any plan, T_min (a lower bound on every T_k)
    t_min_ms = max(total_latency_lower_bound(data), 1e-300)
    t_min_units = math.floor(t_min_ms * scale)
    mod.model.clear_objective()
    mod.model.minimize(mod.total)
    contributions: list[float] = []  # upper bounds on G of the plans not evaluated
    windows = 0  # sub-solves repeated because the clock's rounding kept the bound open
    again = False

    def rounding_window(g_bound: float) -> bool:
        """Whether to solve again after a proven optimum whose bound on G is above G_inc
        (the rounded clock, or a target rounded up): the plan it returned is forbidden now,
        so the next solve ranges over the rest."""
        nonlocal windows
        if g_bound <= g_inc * (1 + PROOF_TOLERANCE) or windows >= WINDOW_PLANS:
            return False
        windows += 1
        return True

    if method == "dinkelbach" and k_max >= 1 and best.n_met >= 1:
        # 3'. Dinkelbach: max n·T − N·t with G_inc = N / T; a plan of G > G_inc has a
        # positive value; when none does, G_inc is optimal
        forbid_evaluated()
        mod.set_domain(mod.count, 0, k_max)
        while True:
            count, t_units = best.n_met, math.ceil(best.total_ms * scale)
            g_before = g_inc
            progress.stage(f"CP-SAT: Dinkelbach step at G = {g_inc:.6g} requests/s")
            mod.model.clear_objective()
            mod.model.maximize(mod.count * t_units - count * mod.total)
            status, obj, bnd = run("rounding window" if again else "dinkelbach", count)
            if g_inc > g_before * (1 + PROOF_TOLERANCE):
                again = False
                continue
            if bnd is None:
                contributions.append(g_per_s(k_max, t_min_ms))
            else:  # every plan: n·T − N·t ≤ bnd, so n / t ≤ N / T + bnd / (T · T_min)
                per_unit = count / t_units + max(bnd, 0.0) / (t_units * max(t_min_units, 1))
                again = status == "OPTIMAL" and rounding_window(per_unit * scale * 1000.0)
                if again:
                    continue
                contributions.append(per_unit * scale * 1000.0)
            break
        k = 0
    else:
        k = k_max
        # more than one k to try: T_0 may prune them (at batch 1 the closed form is T_0)
        if data.max_batch > 1 and g_per_s(k - 1, t_min_ms) > g_inc:
            mod.set_domain(mod.count, 0, n)
            status, obj, bnd = run("min t", 0, share=MIN_T_SHARE)
            least = obj if status == "OPTIMAL" else bnd
            if least is not None:
                t_min_ms = max(t_min_ms, least / scale)
                t_min_units = max(t_min_units, math.floor(least))
        forbid_evaluated()
    # 3. for each k (from the top) that could beat the incumbent: T_k
    while k >= 1 and g_per_s(k, t_min_ms) > g_inc:
        progress.stage(f"CP-SAT: least total latency with at least {k} requests meeting "
                       "their SLOs" + (", the last plan forbidden (rounding window)" if again
                                       else ""))
        mod.set_domain(mod.count, k, n)
        t_hi = mod.total_hi
        if g_inc > 0:  # only plans of G > G_inc matter: t < k / G_inc
            t_hi = min(t_hi, math.floor(k * 1000.0 / g_inc * scale))
        mod.set_domain(mod.total, 0, t_hi)
        status, obj, bnd = run("rounding window" if again else "min t given k", k)
        again = status == "OPTIMAL" and rounding_window(g_per_s(k, (obj or 0) / scale))
        if again:
            continue
        if status == "OPTIMAL":
            contributions.append(g_per_s(k, (obj or 0) / scale))
        elif status == "INFEASIBLE":
            contributions.append(min(g_inc, g_per_s(k, t_min_ms)))  # T_k > k / G_inc
        elif status == "FEASIBLE" or (status == "UNKNOWN" and bnd is not None):
            contributions.append(g_per_s(k, max(bnd or 0.0, t_min_units) / scale))
        else:
            # not run or no bound: every k' ≤ k is bounded by k' / T_min only
            contributions.append(g_per_s(k, t_min_ms))
            break
        k -= 1
    mod.set_domain(mod.count, 0, n)
    mod.set_domain(mod.total, 0, mod.total_hi)
    bound = max([g_inc, *contributions])
    proven = bound <= g_inc * (1 + PROOF_TOLERANCE)
    return ExactOutcome(best.batches, best.n_met, best.total_ms, g_inc, bound, proven,
                        decimals, exact_clock, solves, len(forbidden), windows)
