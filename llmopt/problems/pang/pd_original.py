"""The original PD-competition MIP of Pang et al. 2025, eqs 1–25, as a Pyomo model.

Sets: requests I, clients J, bins K (each a prefill stage then a decode stage), prefill levels L
(level 0 holds 0 tokens in 0 ms, so an empty prefill stage costs nothing). Variables as in
Table II: p (prefill assignment), d (decode-stage activity), w (share of the decode done in a
stage), x (client of a request), y (level of a prefill stage), t^{s,p}, t^{s,d} (stage starts),
n^p, n^d (stage lengths), t_max.

Conventions fixed here (docs/formulations.md has the reasoning):

- T_d is the decode time per token of one client at the full batch J (t_round), so eq 8 reads,
  for every client j, n^d_k ≥ T_d Σ_i N^d_i w_ijk: a decode stage lasts as long as the longest
  client's work in it. (Summing over j as well would make a stage as long as all clients' work
  together, contradicting parallel clients.)
- Eq 13 as printed, Σ_k d_ijk ≤ K, holds for every d. Its evident intent ties decode activity to
  the client of the request: Σ_k d_ijk ≤ K·x_ij. Likewise the model never links w to d; we add
  w_ijk ≤ d_ijk so that a client decodes a request only in stages where it is marked active.
  ``literal=True`` keeps eq 13 as printed and omits the w–d link.
- Eq 11 is read for k1 > k2 (no decode stage before the request's prefill stage); eq 9 for every
  k (a request decodes in the stage of its own bin).
- The big-M of eqs 10–11 is the smallest that deactivates each row: k2 − k1 in eq 10 (when
  only one end is active the sum already holds 1), 1 in eq 11 (d is binary).
- With ``cuts`` (the default) three families of symmetric copies are cut off, which leaves the
  optimum unchanged: request i may only use clients 0..i (clients are interchangeable), bin 0
  is used, and empty bins come last (an empty bin's decode stage can merge into the one before
  it). Valid inequalities that follow from the model are added: a bin that prefills a request is
  not at level 0, at least as many bins are used as any client has requests (and at least
  ceil(ΣN^p/N^cap_L)), and the decode stages last at least T_d times the bin-packing optimum in
  tokens. ``cuts=False`` solves eqs 1–25 bare.
- Memory (llmopt's addition, ``problems.pang.kv``): with a KV capacity M, the requests active in a
  bin's decode stage reserve at most M, Σ_ij (N^p_i + N^d_i) d_ijk ≤ M for every k. A request in
  flight during prefill stage k is active in decode stage k (eqs 9–10), and the reserved total
  only falls until the next prefill stage, so this is the memory rule exactly.
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
from pyomo.common.collections import ComponentMap

from llmopt.backends.common import Footprint
from llmopt.problems.pang.pd_plan import PDProblem, Plan, earliest_plan

# measured on hard-100x20 (K = 38: 3.3M variables and constraints, 76 s and 3 GB with HiGHS)
BYTES_PER_ELEMENT = 950
SECONDS_PER_ELEMENT = 20e-6
FOOTPRINT = Footprint(BYTES_PER_ELEMENT / 2**20, SECONDS_PER_ELEMENT)


def estimated_size(problem: PDProblem, bins: int) -> int:
    """Variables and constraints of the model with ``bins`` stages: about 3·n·J·K variables and
    n·J·(K² + 2K) constraints (eqs 1–25)."""
    nj = problem.n * problem.clients
    return 3 * nj * bins + nj * (bins * bins + 2 * bins)


def build(problem: PDProblem, bins: int, literal: bool = False, cuts: bool = True,
          decode_lb: int = 0) -> pyo.ConcreteModel:
    I, J, K = range(problem.n), range(problem.clients), range(bins)
    L = range(len(problem.levels))
    Np = [int(v) for v in problem.inp]
    Nd = [int(v) for v in problem.out]
    cap = [c for c, _ in problem.levels]
    Tp = [t for _, t in problem.levels]
    Td = problem.t_round

    m = pyo.ConcreteModel(name="pang_pd_competition_eq1_25")
    m.p = pyo.Var(I, J, K, domain=pyo.Binary)                          # (21)
    m.d = pyo.Var(I, J, K, domain=pyo.Binary)                          # (22)
    m.w = pyo.Var(I, J, K, bounds=(0, 1))                              # (23)
    m.x = pyo.Var(I, J, domain=pyo.Binary)                             # (19)
    m.y = pyo.Var(K, L, domain=pyo.Binary)                             # (20)
    m.tsp = pyo.Var(K, domain=pyo.NonNegativeReals)                    # (24)
    m.np_ = pyo.Var(K, domain=pyo.NonNegativeReals)                    # (24)
    m.tsd = pyo.Var(K, domain=pyo.NonNegativeReals)                    # (25)
    m.nd = pyo.Var(K, domain=pyo.NonNegativeReals)                     # (25)
    m.tmax = pyo.Var(domain=pyo.NonNegativeReals)

    m.obj = pyo.Objective(expr=m.tmax, sense=pyo.minimize)             # (1)
    m.c2 = pyo.Constraint(K, rule=lambda m, k: m.tmax >= m.tsd[k] + m.nd[k])
    m.c3 = pyo.Constraint(K, rule=lambda m, k: pyo.Constraint.Skip if k == 0
                          else m.tsp[k] - (m.tsd[k - 1] + m.nd[k - 1]) >= 0)
    m.c4 = pyo.Constraint(K, rule=lambda m, k: m.tsd[k] - (m.tsp[k] + m.np_[k]) >= 0)
    m.c5 = pyo.Constraint(K, rule=lambda m, k: m.np_[k] >= sum(Tp[l] * m.y[k, l] for l in L))
    m.c6 = pyo.Constraint(K, rule=lambda m, k: sum(Np[i] * m.p[i, j, k] for i in I for j in J)
                          <= sum(cap[l] * m.y[k, l] for l in L))
    m.c7 = pyo.Constraint(K, rule=lambda m, k: sum(m.y[k, l] for l in L) == 1)
    m.c8 = pyo.Constraint(J, K, rule=lambda m, j, k:
                          m.nd[k] >= Td * sum(Nd[i] * m.w[i, j, k] for i in I))
    m.c9 = pyo.Constraint(I, J, K, rule=lambda m, i, j, k: m.d[i, j, k] - m.p[i, j, k] >= 0)
    m.c10 = pyo.Constraint(
        [(i, j, k1, k2) for i in I for j in J for k1 in K for k2 in K if k1 < k2],
        rule=lambda m, i, j, k1, k2: (k2 - k1) * (2 - m.d[i, j, k1] - m.d[i, j, k2])
        + sum(m.d[i, j, k] for k in range(k1, k2 + 1)) >= k2 - k1 + 1)
    m.c11 = pyo.Constraint(
        [(i, j, k1, k2) for i in I for j in J for k1 in K for k2 in K if k1 > k2],
        rule=lambda m, i, j, k1, k2: 1 * (m.p[i, j, k1] - 1) + m.d[i, j, k2] <= 0)
    m.c12 = pyo.Constraint(J, K, rule=lambda m, j, k: sum(m.d[i, j, k] for i in I) <= 1)
    if literal:
        m.c13 = pyo.Constraint(I, J, rule=lambda m, i, j: sum(m.d[i, j, k] for k in K) <= bins)
    else:
        m.c13 = pyo.Constraint(I, J, rule=lambda m, i, j:
                               sum(m.d[i, j, k] for k in K) <= bins * m.x[i, j])
        m.w_le_d = pyo.Constraint(I, J, K, rule=lambda m, i, j, k: m.w[i, j, k] <= m.d[i, j, k])
    m.c14 = pyo.Constraint(I, J, rule=lambda m, i, j: sum(m.w[i, j, k] for k in K) == m.x[i, j])
    m.c15 = pyo.Constraint(I, rule=lambda m, i: sum(m.w[i, j, k] for j in J for k in K) == 1)
    m.c16 = pyo.Constraint(J, K, rule=lambda m, j, k: sum(m.p[i, j, k] for i in I) <= 1)
    m.c17 = pyo.Constraint(I, J, rule=lambda m, i, j: sum(m.p[i, j, k] for k in K) == m.x[i, j])
    m.c18 = pyo.Constraint(I, rule=lambda m, i: sum(m.x[i, j] for j in J) == 1)
    if problem.kv_capacity is not None:
        size = [int(v) for v in problem.footprint]
        m.kv = pyo.Constraint(K, rule=lambda m, k: sum(size[i] * m.d[i, j, k] for i in I
                                                       for j in J) <= problem.kv_capacity)
    if cuts:
        # Symmetric copies removed (the optimum is unchanged): clients are interchangeable, so
        # request i may use clients 0..i; an empty bin can merge into the decode stage before
        # it, so empty bins come last and bin 0 is used.
        m.cut_clients = pyo.Constraint([(i, j) for i in I for j in J if j > i],
                                       rule=lambda m, i, j: m.x[i, j] == 0)
        m.cut_empty_last = pyo.Constraint(K, rule=lambda m, k: pyo.Constraint.Skip
                                          if k == 0 else m.y[k - 1, 0] <= m.y[k, 0])
        m.cut_first_used = pyo.Constraint(expr=m.y[0, 0] == 0)
        # Valid inequalities: a request decodes only on its own client (eq 13 disaggregated);
        # a bin that prefills a request is not at level 0; each client
        # prefills one request per bin, so there are at least as many used bins as requests on
        # any client; a bin holds at most N^cap_L prompt tokens; and the decode stages together
        # last at least T_d times the bin-packing optimum ``decode_lb`` (each client decodes its
        # requests one after another).
        least_bins = max(-(-problem.n // problem.clients), -(-sum(Np) // problem.cap))
        m.cut_bins = pyo.Constraint(expr=sum(1 - m.y[k, 0] for k in K) >= least_bins)
        m.cut_client_bins = pyo.Constraint(J, rule=lambda m, j: sum(1 - m.y[k, 0] for k in K)
                                           >= sum(m.x[i, j] for i in I))
        m.cut_used = pyo.Constraint(J, K, rule=lambda m, j, k:
                                    sum(m.p[i, j, k] for i in I) <= 1 - m.y[k, 0])
        if not literal:
            m.cut_d_x = pyo.Constraint(I, J, K, rule=lambda m, i, j, k: m.d[i, j, k] <= m.x[i, j])

        m.cut_decode = pyo.Constraint(expr=sum(m.nd[k] for k in K) >= Td * decode_lb)
    return m


def warm_start(m: pyo.ConcreteModel, problem: PDProblem, plan: Plan) -> ComponentMap:
    """Variable values of the model that reproduce ``plan`` with greedy decoding: request i is
    active (d = 1) from its own bin to the first bin whose decode stage reaches its end."""
    n, bins = problem.n, len(plan.bins)
    plan = _canonical_clients(plan, n)
    start = plan.start_of(n)
    end = start + problem.out
    bin_of = plan.bin_of(n)
    stage_end = [*plan.starts[1:], plan.decode_end(problem)]
    values = ComponentMap()
    for i in range(n):
        j, b = int(plan.client[i]), int(bin_of[i])
        last = next(k for k in range(b, bins) if stage_end[k] >= end[i])
        for jj in range(problem.clients):
            values[m.x[i, jj]] = float(jj == j)
            for k in range(bins):
                mine = jj == j
                done = max(0, min(end[i], stage_end[k]) - max(start[i], plan.starts[k]))
                values[m.p[i, jj, k]] = float(mine and k == b)
                values[m.d[i, jj, k]] = float(mine and b <= k <= last)
                values[m.w[i, jj, k]] = done / int(problem.out[i]) if mine else 0.0
    t = 0.0
    for k in range(bins):
        tokens = int(problem.inp[plan.bins[k]].sum())
        level = next(lv for lv, (cap, _) in enumerate(problem.levels) if tokens <= cap)
        for lv in range(len(problem.levels)):
            values[m.y[k, lv]] = float(lv == level)
        n_p = problem.levels[level][1]
        n_d = (stage_end[k] - plan.starts[k]) * problem.t_round
        values[m.tsp[k]], values[m.np_[k]] = t, n_p
        values[m.tsd[k]], values[m.nd[k]] = t + n_p, n_d
        t += n_p + n_d
    values[m.tmax] = t
    return values


def _canonical_clients(plan: Plan, n: int) -> Plan:
    """Relabel clients in order of their lowest request index, so that request i uses a client
    in 0..i (the client cut of ``build``)."""
    relabel: dict[int, int] = {}
    for i in range(n):
        relabel.setdefault(int(plan.client[i]), len(relabel))
    client = np.array([relabel[int(c)] for c in plan.client], dtype=np.int64)
    return Plan(plan.bins, plan.starts, client, plan.source)


def extract_plan(m: pyo.ConcreteModel, problem: PDProblem, bins: int, value) -> Plan:
    """Bins and clients from the prefill assignment p; decode positions recomputed greedily
    (never later than the model's, by the dominance of greedy decoding)."""
    members: list[list[int]] = [[] for _ in range(bins)]
    client = [0] * problem.n
    for i in range(problem.n):
        j, k = max(((j, k) for j in range(problem.clients) for k in range(bins)),
                   key=lambda jk: value(m.p[i, jk[0], jk[1]]))
        members[k].append(i)
        client[i] = j
    return earliest_plan(problem, members, np.array(client), source="original MIP")
