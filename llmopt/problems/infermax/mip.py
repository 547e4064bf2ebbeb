"""The InferMax CSP (Kim et al. 2025, section 5) as a Pyomo MIP for HiGHS.

Same variables and constraints as the CP-SAT model in ``infermax_csp`` (see its docstring for
the list), written with big-M indicator constraints. Products are linearised exactly:

- the sequence length is kept in thermometer form, y_ijk = [S_ij ≥ I_i + k], so that a convex
  function of it (S² for the offline prefill attention of a pass) is linear in y;
- online, the chunk size is expanded in binary, c = Σ_b 2^b x_b, so c² = Σ_bb' 2^(b+b') x_b x_b'
  and m·c = Σ_b 2^b (x_b · m): products of two binaries or of a binary and a bounded integer.

The redundant constraints are those of the CP-SAT model. Among them is the generation cap,
where a later token in batch j is g_ij − (y_ij1 − y_i,j−1,1). Symmetry is broken by finishing
order only.

Every cost coefficient is non-negative and the objective is minimised, so each product only
needs its lower envelope (z ≥ x + x' − 1, w ≥ m − K(1 − x)): at an optimum the cost terms sit
on them, which makes the linearisation exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyomo.environ as pyo

from llmopt.problems.infermax.data import CSPData, plan_from_values, trajectories


def build(data: CSPData, N: int) -> pyo.ConcreteModel:
    n = data.n
    offline = not (data.T > 0).any()
    R = range(n)
    J = range(1, N + 1)
    J0 = range(N + 1)
    Ii = [int(x) for x in data.I]
    Oi = [int(x) for x in data.O]
    K = [Ii[i] + Oi[i] - 1 for i in R]          # most KVs a request ever holds
    cmax = [min(data.C, K[i]) for i in R]
    p = data.profile
    m = pyo.ConcreteModel("infermax_csp")
    m.R, m.J, m.J0 = pyo.Set(initialize=R), pyo.Set(initialize=J), pyo.Set(initialize=J0)
    m.y = pyo.Var([(i, j, k) for i in R for j in J for k in range(1, Oi[i] + 1)],
                  domain=pyo.Binary)                                   # S_ij ≥ I_i + k
    m.mem = pyo.Var(R, J0, domain=pyo.NonNegativeIntegers, bounds=lambda _, i, j: (0, K[i]))
    m.c = pyo.Var(R, J, domain=pyo.NonNegativeIntegers, bounds=lambda _, i, j: (0, cmax[i]))
    m.e = pyo.Var(R, J, domain=pyo.Binary)
    m.g = pyo.Var(R, J, domain=pyo.Binary)
    m.pos = pyo.Var(R, J, domain=pyo.Binary)
    m.rem1 = pyo.Var(R, J, domain=pyo.Binary)
    m.dec = pyo.Var(R, J, domain=pyo.Binary)
    m.occ = pyo.Var(R, J, domain=pyo.NonNegativeReals, bounds=lambda _, i, j: (0, K[i]))
    m.freed = pyo.Var(R, J, domain=pyo.NonNegativeReals, bounds=lambda _, i, j: (0, K[i]))
    m.kvr = pyo.Var(R, J, domain=pyo.NonNegativeReals)
    m.units = pyo.Var(R, J, domain=pyo.NonNegativeReals)
    m.ptok = pyo.Var(R, J, domain=pyo.NonNegativeReals)
    m.ne = pyo.Var(J, domain=pyo.Binary)
    m.start = pyo.Var(J, domain=pyo.NonNegativeReals)
    m.end = pyo.Var(J0, domain=pyo.NonNegativeReals)
    m.cons = pyo.ConstraintList()
    add = m.cons.add

    def S(i: int, j: int):
        """S_ij from its thermometer digits (S_i0 = I_i)."""
        if j == 0:
            return Ii[i]
        return Ii[i] + sum(m.y[i, j, k] for k in range(1, Oi[i] + 1))

    def done(i: int, j: int):
        return 0 if j == 0 else m.y[i, j, Oi[i]]

    add(m.end[0] == 0)
    for i in R:
        add(m.mem[i, 0] == 0)
        for j in J:
            for k in range(1, Oi[i]):
                add(m.y[i, j, k + 1] <= m.y[i, j, k])
            rem = S(i, j - 1) - m.mem[i, j - 1]
            c, e, g = m.c[i, j], m.e[i, j], m.g[i, j]
            big = K[i] + 1
            add(S(i, j) == S(i, j - 1) + g)                             # sequence length
            # (2) tokens to process; nothing once done or while evicted
            add(c <= rem)
            add(c <= cmax[i] * (1 - e))
            add(c <= cmax[i] * (1 - done(i, j - 1)))
            # (3) a token is generated exactly when everything available is processed
            add(c >= rem - big * (1 - g))
            add(c <= rem - 1 + big * g)
            # (1) memory
            add(m.occ[i, j] >= m.mem[i, j - 1] + c - K[i] * e)
            add(m.occ[i, j] <= m.mem[i, j - 1] + c)
            add(m.occ[i, j] <= K[i] * (1 - e))
            add(m.mem[i, j - 1] >= e)
            add(m.freed[i, j] <= m.mem[i, j - 1])
            add(m.freed[i, j] <= K[i] * e)
            add(m.freed[i, j] >= m.mem[i, j - 1] - K[i] * (1 - e))
            add(m.mem[i, j] <= m.occ[i, j])
            add(m.mem[i, j] >= m.occ[i, j] - K[i] * done(i, j))
            add(m.mem[i, j] <= K[i] * (1 - done(i, j)))
            # phases: decode = g with one token left after the first generated token
            add(c <= cmax[i] * m.pos[i, j])
            add(c >= m.pos[i, j])
            add(rem <= 1 + big * (1 - m.rem1[i, j]))
            add(rem >= 2 - m.rem1[i, j])
            gen = m.y[i, j - 1, 1] if j > 1 and Oi[i] >= 1 else 0       # S_i,j−1 ≥ I_i + 1
            add(m.dec[i, j] <= g)
            add(m.dec[i, j] <= m.rem1[i, j])
            add(m.dec[i, j] <= gen)
            add(m.dec[i, j] >= g + m.rem1[i, j] + gen - 2)
            pre = m.pos[i, j] - m.dec[i, j]
            # cost terms (lower envelopes; see the module docstring)
            add(m.kvr[i, j] >= m.mem[i, j - 1] - K[i] * (1 - m.dec[i, j]))
            add(m.ptok[i, j] >= c - cmax[i] * (1 - pre))
            sq_max = cmax[i] ** 2 + 2 * cmax[i] * K[i] + (Ii[i] + Oi[i]) ** 2
            if offline:
                # a pass of length L costs L² in all, charged to its last chunk (the one that
                # generates): L = S_i,j−1, whose square is linear in the thermometer digits
                sq = Ii[i] ** 2 + sum(((Ii[i] + k) ** 2 - (Ii[i] + k - 1) ** 2)
                                      * (m.y[i, j - 1, k] if j > 1 else 0)
                                      for k in range(1, Oi[i] + 1))
                add(m.units[i, j] >= sq - sq_max * (2 - pre - g))
            else:
                add(m.units[i, j] >= _chunk_units(m, i, j, cmax[i], K[i])
                    - sq_max * (1 - pre))
        add(done(i, N) == 1)                                            # termination
        # redundant, as in the CP-SAT model
        add(sum(m.c[i, j] for j in J) == K[i] + sum(m.freed[i, j] for j in J))
        add(sum(m.occ[i, j] for j in J) >= Oi[i] * Ii[i] + Oi[i] * (Oi[i] - 1) // 2)
    cap = data.generation_weight_cap() if data.generation_cap_applies() else None
    for j in J:
        tok = sum(m.c[i, j] for i in R)
        add(tok <= data.C * m.ne[j])                                    # (4)
        if cap is not None:  # the generation cap, as in the CP-SAT model
            first = [m.y[i, j, 1] - (m.y[i, j - 1, 1] if j > 1 else 0) for i in R]
            add(sum(2 * m.g[i, j] - first[i] for i in R) <= cap * m.ne[j])
        add(tok >= m.ne[j])
        add(sum(m.occ[i, j] for i in R) <= data.M * m.ne[j])            # (4)
        add(sum(m.ptok[i, j] for i in R) <= data.P)                     # prefill budget
        if j < N:
            add(m.ne[j + 1] <= m.ne[j])
        cost = (p.bias_ms * m.ne[j] + p.per_token_ms * tok
                + p.decode_kv_ms * sum(m.kvr[i, j] for i in R)
                + p.prefill_attention_ms * sum(m.units[i, j] for i in R)
                + p.per_prefill_request_ms * sum(m.pos[i, j] - m.dec[i, j] for i in R))
        add(m.start[j] >= m.end[j - 1])
        if offline:
            add(m.start[j] == m.end[j - 1])
        add(m.end[j] == m.start[j] + cost)
        for i in R:
            if data.T[i] > 0:                   # no tokens in a batch before the arrival
                add(m.start[j] >= float(data.T[i]) * m.pos[i, j])
    for a, b in data.interchangeable_pairs():                        # symmetry
        for j in J:
            add(done(b, j) <= done(a, j))
    m.obj = pyo.Objective(expr=m.end[N], sense=pyo.minimize)
    return m


def _chunk_units(m: pyo.ConcreteModel, i: int, j: int, cmax: int, K: int):
    """c² + 2·m·c of request i's chunk in batch j, from the binary digits of c."""
    bits = max(1, int(cmax).bit_length())
    if not hasattr(m, "x"):
        m.x = pyo.Var(pyo.Any, domain=pyo.Binary, dense=False)
        m.xx = pyo.Var(pyo.Any, domain=pyo.NonNegativeReals, dense=False)
        m.xm = pyo.Var(pyo.Any, domain=pyo.NonNegativeReals, dense=False)
    x = [m.x[i, j, b] for b in range(bits)]
    m.cons.add(m.c[i, j] == sum(2 ** b * x[b] for b in range(bits)))
    square = []
    for b in range(bits):
        square.append(4 ** b * x[b])                                    # x² = x
        for b2 in range(b + 1, bits):
            z = m.xx[i, j, b, b2]
            m.cons.add(z >= x[b] + x[b2] - 1)
            square.append(2 * 2 ** (b + b2) * z)
    cross = []
    for b in range(bits):
        w = m.xm[i, j, b]
        m.cons.add(w >= m.mem[i, j - 1] - K * (1 - x[b]))
        cross.append(2 ** b * w)
    return sum(square) + 2 * sum(cross)


def warm_start(m: pyo.ConcreteModel, data: CSPData, plan: list[dict[str, Any]],
               N: int) -> pyo.ComponentMap:
    """Values of every variable of ``m`` for the batch ``plan`` (padded with empty batches),
    completed so that the start is feasible; HiGHS takes it as its first incumbent."""
    empty: dict[str, Any] = {"evict": [], "prefill": {}, "decode": []}
    tr = trajectories(data, plan + [empty] * (N - len(plan)))
    S, mem, c, g, e = tr["S"], tr["m"], tr["c"], tr["g"], tr["e"]
    offline = not (data.T > 0).any()
    p = data.profile
    start = pyo.ComponentMap()
    end = 0.0
    start[m.end[0]] = 0.0
    for j in range(1, N + 1):
        batch_cost = 0.0
        tok = 0
        for i in range(data.n):
            Ii, Oi = int(data.I[i]), int(data.O[i])
            K = Ii + Oi - 1
            for k in range(1, Oi + 1):
                start[m.y[i, j, k]] = float(S[i, j] >= Ii + k)
            rem = S[i, j - 1] - mem[i, j - 1]
            cij = int(c[i, j])
            dec = bool(g[i, j] and rem == 1 and S[i, j - 1] >= Ii + 1)
            pos = cij > 0
            pre = pos and not dec
            occ = 0 if e[i, j] else mem[i, j - 1] + cij
            values = pyo.ComponentMap([
                (m.mem[i, j], mem[i, j]), (m.c[i, j], cij), (m.e[i, j], e[i, j]),
                (m.g[i, j], g[i, j]), (m.pos[i, j], pos), (m.rem1[i, j], rem == 1),
                (m.dec[i, j], dec), (m.occ[i, j], occ),
                (m.freed[i, j], mem[i, j - 1] if e[i, j] else 0),
                (m.kvr[i, j], mem[i, j - 1] if dec else 0),
                (m.ptok[i, j], cij if pre else 0)])
            if offline:
                units = int(S[i, j - 1]) ** 2 if pre and g[i, j] else 0
            else:
                units = cij * cij + 2 * int(mem[i, j - 1]) * cij if pre else 0
                bits = max(1, min(data.C, K).bit_length())
                xs = [(cij >> b) & 1 for b in range(bits)]
                for b in range(bits):
                    values[m.x[i, j, b]] = xs[b]
                    values[m.xm[i, j, b]] = xs[b] * int(mem[i, j - 1])
                    for b2 in range(b + 1, bits):
                        values[m.xx[i, j, b, b2]] = xs[b] * xs[b2]
            values[m.units[i, j]] = units
            for v, x in values.items():
                start[v] = float(x)
            tok += cij
            batch_cost += (p.per_token_ms * cij + p.decode_kv_ms * values[m.kvr[i, j]]
                           + p.prefill_attention_ms * units + p.per_prefill_request_ms * pre)
        ne = tok > 0
        batch_cost += p.bias_ms * ne
        begin = end
        if ne:
            arrivals = [float(data.T[i]) for i in range(data.n) if c[i, j] > 0]
            begin = max([end, *arrivals])
        start[m.ne[j]] = float(ne)
        start[m.start[j]] = begin
        end = begin + batch_cost
        start[m.end[j]] = end
    for i in range(data.n):
        start[m.mem[i, 0]] = 0.0
    return start


def plan_from_model(m: pyo.ConcreteModel, data: CSPData, N: int,
                    value) -> list[dict[str, Any]]:
    """The batch plan of the MIP's incumbent (``value(var)`` reads it)."""
    grid = np.empty((3, data.n, N))
    for i in range(data.n):
        for j in range(1, N + 1):
            grid[:, i, j - 1] = (value(m.c[i, j]), value(m.e[i, j]), value(m.dec[i, j]))
    grid = np.rint(grid).astype(np.int64)
    return plan_from_values(data, grid[0], grid[1], grid[2].astype(bool))
