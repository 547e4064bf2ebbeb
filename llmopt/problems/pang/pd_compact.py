"""A compact exact formulation of the PD-competition problem (same optimum as eqs 1–25).

Three facts about eqs 1–25 shrink the model:

1. *Greedy decoding dominates.* Given when each request is prefilled and how long each decode
   stage lasts, letting every client decode its request at full speed (w as large as possible)
   never delays anything, so the shares w and the activity flags d can go: a request prefilled
   in bin k occupies the interval [B_k, B_k + N^d_i) of the decode axis (B_k = rounds before bin
   k, one token per round; see ``pd_plan``).
2. *Clients are identical.* Requests on one client must not overlap on the decode axis (eqs 9–12,
   16), and intervals can be given to J identical clients without overlap exactly when at most J
   overlap at any point (interval graphs are perfect). So the client variables x go, replaced by
   one cumulative constraint of capacity J; clients are dealt afterwards by interval colouring.
   This also removes all client symmetry.
3. *Stage times are sums.* Total time = Σ_k T^p(bin k) + T_d · D_end (eqs 1–8), so the stage start
   times t^{s,p}, t^{s,d} go as well.

CP-SAT model: bin_i ∈ {0..K−1} with one-hot b_ik; B_0 = 0 ≤ B_1 ≤ … ≤ B_{K−1}; s_i = B[bin_i]
(element); intervals [s_i, s_i + N^d_i) under a cumulative of capacity J; D_end ≥ s_i + N^d_i;
per bin Σ_i N^p_i b_ik ≤ N^cap_L (eq 6) and one level y_kl (eqs 5, 7); used bins first.
Objective: T_d · D_end + Σ_k Σ_l T^p_l y_kl (stage model) or the replay model's weights.
Memory (``llmopt.problems.pang.kv``): with a KV capacity M, a second cumulative keeps the KV
tokens reserved by requests in flight (N^p_i + N^d_i each, on [s_i, s_i + N^d_i)) within M.

HiGHS model (same variables linearised): s_i = B_k when b_ik via ±M rows with M the largest
useful decode position; the cumulative becomes, for every bin k, Σ_i a_ik ≤ J where a_ik ≥
started_ik − f_ik and f_ik = 1 only if request i ended by B_k; the memory rule is, for every
bin k, Σ_i (N^p_i + N^d_i) a_ik ≤ M (the reserved total only falls between prefill stages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo
from ortools.sat.python import cp_model

from llmopt.backends.common import Footprint
from llmopt.problems.pang.pd_plan import PDProblem, Plan, earliest_plan


@dataclass(frozen=True)
class Weights:
    """Objective in integer units: ``scale`` units per ms (exact when ``exact``)."""

    scale: int
    per_round: int
    stage_costs: tuple[int, ...]   # per level (stage model) or (0, overhead) (replay model)
    exact: bool

    @classmethod
    def of(cls, problem: PDProblem, model: str) -> Weights:
        values = [problem.round_weight_ms(model)]
        if model == "stage":
            values += [ms for _, ms in problem.levels]
        else:
            values += [0.0, problem.profile.prefill.overhead_ms]
        for scale in (1, 10, 100, 1000, 10_000, 100_000, 1_000_000):
            if all(abs(v * scale - round(v * scale)) < 1e-6 for v in values):
                exact = True
                break
        else:
            exact = False
        ints = [round(v * scale) for v in values]
        return cls(scale, ints[0], tuple(ints[1:]), exact)


def decode_horizon(problem: PDProblem, upper_ms: float, model: str) -> int:
    """Largest decode position a solution better than ``upper_ms`` can reach."""
    fixed = problem.objective_offset_ms(model)
    min_stages = math.ceil(problem.inp.sum() / problem.cap)
    least_prefill = min_stages * (problem.profile.prefill.overhead_ms if model == "replay"
                                  else min(ms for cap, ms in problem.levels if cap > 0))
    # in the replay model the per-token prefill cost is already in ``fixed``
    return max(int((upper_ms - fixed - least_prefill) / problem.round_weight_ms(model)) + 1,
               int(problem.out.max()))


# memory (MB) and building time (s) per (request, bin) pair, building and loading into the
# solver (gsm8k-llama65b: HiGHS 75 µs and 4 KB per pair to build the Pyomo model, about twice
# that to load and presolve; CP-SAT 10 µs and 1 KB to build)
FOOTPRINT = {"highs": Footprint(0.012, 250e-6, base_mb=300),
             "cpsat": Footprint(0.004, 30e-6, base_mb=300)}  # base: the process before the model


def build_cpsat(problem: PDProblem, bins: int, model: str = "stage", *,
                horizon: int | None = None, hint: Plan | None = None, kv: bool = True,
                fixed_bins: dict[int, int] | None = None, min_decode_end: int = 0):
    """The compact model in CP-SAT. ``fixed_bins`` pins requests to bins (for LNS)."""
    n, K = problem.n, bins
    W = Weights.of(problem, model)
    H = horizon if horizon is not None else int(problem.out.sum()) + 1
    md = cp_model.CpModel()
    b = [[md.new_bool_var(f"b_{i}_{k}") for k in range(K)] for i in range(n)]
    bin_of = [md.new_int_var(0, K - 1, f"bin_{i}") for i in range(n)]
    B = [md.new_int_var(0, H, f"B_{k}") for k in range(K)]
    md.add(B[0] == 0)
    for k in range(K - 1):
        md.add(B[k] <= B[k + 1])
    starts, intervals = [], []
    d_end = md.new_int_var(max(int(problem.out.max()), min_decode_end), H + int(problem.out.max()),
                         "D_end")
    for i in range(n):
        md.add_exactly_one(b[i])
        md.add(bin_of[i] == sum(k * b[i][k] for k in range(K)))
        s = md.new_int_var(0, H, f"s_{i}")
        md.add_element(bin_of[i], B, s)
        e = md.new_int_var(0, H + int(problem.out[i]), f"e_{i}")
        intervals.append(md.new_interval_var(s, int(problem.out[i]), e, f"run_{i}"))
        md.add(d_end >= e)
        starts.append(s)
    md.add_cumulative(intervals, [1] * n, problem.clients)
    if kv and problem.kv_capacity is not None:
        md.add_cumulative(intervals, [int(v) for v in problem.footprint], problem.kv_capacity)
    used = [md.new_bool_var(f"used_{k}") for k in range(K)]
    stage_cost = []
    for k in range(K):
        tokens = sum(int(problem.inp[i]) * b[i][k] for i in range(n))
        md.add(tokens <= problem.cap)                                           # eq 6
        for i in range(n):
            md.add_implication(b[i][k], used[k])
        md.add(sum(b[i][k] for i in range(n)) >= 1).only_enforce_if(used[k])
        if k + 1 < K:
            md.add_implication(used[k + 1], used[k])
            md.add(B[k + 1] == B[k]).only_enforce_if(used[k + 1].negated())
        if model == "stage":
            y = [md.new_bool_var(f"y_{k}_{lv}") for lv in range(len(problem.levels))]
            md.add_exactly_one(y)                                                 # eq 7
            md.add(tokens <= sum(cap * y[lv] for lv, (cap, _) in enumerate(problem.levels)))
            md.add(y[0] == used[k].negated())
            stage_cost.append(sum(c * y[lv] for lv, c in enumerate(W.stage_costs)))  # eq 5
        else:
            stage_cost.append(W.stage_costs[1] * used[k])
    md.minimize(W.per_round * d_end + sum(stage_cost))
    if fixed_bins:
        for i, k in fixed_bins.items():
            md.add(bin_of[i] == k)
    if hint is not None:
        _hint(md, problem, hint, b, bin_of, B, starts, d_end, used, K)
    return md, {"b": b, "bin": bin_of, "B": B, "s": starts, "D_end": d_end, "weights": W}


def _hint(md, problem: PDProblem, plan: Plan, b, bin_of, B, starts, d_end, used, K) -> None:
    hb = plan.bin_of(problem.n)
    starts_h = [*plan.starts] + [plan.decode_end(problem)] * (K - len(plan.starts))
    for i in range(problem.n):
        md.add_hint(bin_of[i], int(hb[i]))
        for k in range(K):
            md.add_hint(b[i][k], int(hb[i] == k))
        md.add_hint(starts[i], int(starts_h[hb[i]]))
    last_used = max(k for k, members in enumerate(plan.bins) if members)
    for k in range(K):
        md.add_hint(B[k], int(starts_h[k] if k <= last_used else starts_h[last_used]))
        md.add_hint(used[k], int(k < len(plan.bins) and bool(plan.bins[k])))
    md.add_hint(d_end, plan.decode_end(problem))


def plan_from_bins(problem: PDProblem, bin_of: np.ndarray, source: str) -> Plan:
    """Plan from a bin per request: bins in order, clients by interval colouring, decode
    positions as early as the clients allow (never later than the model's)."""
    K = int(bin_of.max()) + 1
    members = [np.flatnonzero(bin_of == k).tolist() for k in range(K)]
    members = [m for m in members if m]
    return earliest_plan(problem, members, None, source=source)


def build_highs(problem: PDProblem, bins: int, model: str = "stage", *,
                horizon: int | None = None) -> pyo.ConcreteModel:
    """The compact model as a MIP for HiGHS (see the module docstring)."""
    n = problem.n
    I, Ks, L = range(n), range(bins), range(len(problem.levels))
    H = horizon if horizon is not None else int(problem.out.sum()) + 1
    M = H + int(problem.out.max()) + 1
    Np, Nd = [int(v) for v in problem.inp], [int(v) for v in problem.out]
    m = pyo.ConcreteModel(name="pd_competition_compact")
    m.b = pyo.Var(I, Ks, domain=pyo.Binary)
    m.B = pyo.Var(Ks, bounds=(0, H))
    m.s = pyo.Var(I, bounds=(0, H))
    m.f = pyo.Var(I, Ks, domain=pyo.Binary)          # request i has ended by B_k
    m.a = pyo.Var(I, Ks, bounds=(0, 1))              # request i occupies a client at B_k
    m.d_end = pyo.Var(bounds=(0, H + max(Nd)))
    m.used = pyo.Var(Ks, domain=pyo.Binary)
    m.one = pyo.Constraint(I, rule=lambda m, i: sum(m.b[i, k] for k in Ks) == 1)
    m.first = pyo.Constraint(expr=m.B[0] == 0)
    m.order = pyo.Constraint(Ks, rule=lambda m, k: pyo.Constraint.Skip if k == 0
                             else m.B[k - 1] <= m.B[k])
    m.s_lo = pyo.Constraint(I, Ks, rule=lambda m, i, k: m.s[i] >= m.B[k] - M * (1 - m.b[i, k]))
    m.s_hi = pyo.Constraint(I, Ks, rule=lambda m, i, k: m.s[i] <= m.B[k] + M * (1 - m.b[i, k]))
    m.end = pyo.Constraint(I, rule=lambda m, i: m.d_end >= m.s[i] + Nd[i])
    m.ended = pyo.Constraint(I, Ks, rule=lambda m, i, k:
                             m.B[k] >= m.s[i] + Nd[i] - M * (1 - m.f[i, k]))
    m.occupy = pyo.Constraint(I, Ks, rule=lambda m, i, k:
                              m.a[i, k] >= sum(m.b[i, kk] for kk in range(k + 1)) - m.f[i, k])
    m.clients = pyo.Constraint(Ks, rule=lambda m, k: sum(m.a[i, k] for i in I) <= problem.clients)
    if problem.kv_capacity is not None:
        size = [int(v) for v in problem.footprint]
        m.kv = pyo.Constraint(Ks, rule=lambda m, k: sum(size[i] * m.a[i, k] for i in I)
                              <= problem.kv_capacity)
    m.cap = pyo.Constraint(Ks, rule=lambda m, k: sum(Np[i] * m.b[i, k] for i in I)
                           <= problem.cap * m.used[k])
    m.used_first = pyo.Constraint(Ks, rule=lambda m, k: pyo.Constraint.Skip if k == 0
                                  else m.used[k] <= m.used[k - 1])
    weight = problem.round_weight_ms(model)
    if model == "stage":
        m.y = pyo.Var(Ks, L, domain=pyo.Binary)
        m.one_level = pyo.Constraint(Ks, rule=lambda m, k: sum(m.y[k, lv] for lv in L) == 1)
        m.level_cap = pyo.Constraint(Ks, rule=lambda m, k: sum(Np[i] * m.b[i, k] for i in I)
                                     <= sum(problem.levels[lv][0] * m.y[k, lv] for lv in L))
        cost = sum(problem.levels[lv][1] * m.y[k, lv] for k in Ks for lv in L)
    else:
        cost = problem.profile.prefill.overhead_ms * sum(m.used[k] for k in Ks)
    m.obj = pyo.Objective(expr=weight * m.d_end + cost + problem.objective_offset_ms(model))
    return m


def highs_bins(m: pyo.ConcreteModel, problem: PDProblem, bins: int, value) -> np.ndarray:
    return np.array([max(range(bins), key=lambda k: value(m.b[i, k]))
                     for i in range(problem.n)], dtype=np.int64)
