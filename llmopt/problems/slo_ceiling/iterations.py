"""The iteration relaxation: work and batches counted per time slot, an LP solved by HiGHS.

Where the capacity flow (``capacity``) charges each request a share of the bias, this LP counts
the batches themselves. Time slots t (between consecutive arrivals and deadlines, merged into at
most ``max_slots`` coarser slots: a request may use every slot its window meets, a relaxation),
and for a request i served to the fraction x_i ∈ [0, 1]:

- e_it, l_it ≥ 0: its prompt's own work (no bias) in the slots of [a_i, first_by_i) and its
  later tokens' in those of [a_i, finish_by_i), Σ_t e_it ≥ x_i·P_i, Σ_t l_it ≥ x_i·Q_i;
- f_it, k_it ≥ 0: its batches in slot t, prompt ones (at least ⌈I/C⌉ in its prompt window:
  Σ_t f_it ≥ x_i·⌈I/C⌉) and later-token ones (one per later token: Σ_t k_it ≥ x_i·(O − 1));
  each later token adds at least s_i = the least own work of one later token, so
  l_it ≥ s_i·k_it;
- n_t ≥ 0: batches in slot t (each counted by the share of its time in the slot), with
  f_it + k_it ≤ n_t (a request is in a batch at most once), bias·n_t + Σ_i (e_it + l_it) ≤
  R·|t| (R replicas, whose batches do not overlap on one replica), Σ_i (f_it + k_it) ≤ J·n_t
  (at most J running requests in a batch) and Σ_i (I_i + 1)·k_it ≤ M·n_t (a request holds at
  least I + 1 KVs after a later-token batch; with the KV rule only).

Every schedule, its batches split over the slots by time, gives a solution with x_i = 1 for
the requests meeting their SLOs, so max Σ x_i bounds their number. The bound is certified
from HiGHS's duals, not from its objective: for any y ≥ 0 on the rows A x ≤ b and bounds
0 ≤ x ≤ u, max c·x ≤ y·b + Σ_j u_j·max(0, c_j − (Aᵀy)_j) (weak duality), evaluated here in
floating point with a relative margin; so a solver's tolerance cannot make it invalid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmopt.problems.slo_ceiling.lp import certified_max, slot_edges
from llmopt.problems.slo_ceiling.requests import WINDOW, Obligations

MAX_SLOTS = 120


@dataclass(frozen=True)
class IterationBound:
    met_max: int
    lp_value: float        # the certified dual bound (≥ the LP optimum)
    slots: int
    variables: int
    status: str


def iteration_bound(ob: Obligations, time_limit_s: float = 10.0,
                    max_slots: int = MAX_SLOTS) -> IterationBound | None:
    """The certified LP bound of the module doc over the ``WINDOW`` requests (None: HiGHS did
    not finish or no certificate)."""
    bias_ms = ob.bias_ms
    chosen = np.flatnonzero(ob.kind == WINDOW)
    n = len(chosen)
    if n == 0:
        return IterationBound(0, 0.0, 0, 0, "empty")
    a, first_by, finish_by, has_finish, times = ob.windows(chosen)
    edges = slot_edges(times, max_slots)
    S = len(edges) - 1
    if S < 1:
        return None
    length = np.diff(edges)
    # slot ranges: slots meeting [a, end): from the slot holding a to the one holding end
    lo = np.clip(np.searchsorted(edges, a, side="right") - 1, 0, S - 1)
    mid = np.clip(np.searchsorted(edges, first_by, side="left"), lo + 1, S)
    hi = np.clip(np.searchsorted(edges, finish_by, side="left"), lo + 1, S)
    P = ob.own_prefill_ms[chosen]
    Q = np.where(has_finish, ob.own_later_ms[chosen], 0.0)
    K = np.where(has_finish, ob.later_tokens[chosen], 0.0)
    F = ob.prompt_batches[chosen].astype(float)
    step = ob.least_step_ms[chosen]
    kv = ob.inputs[chosen] + 1.0
    R, J, M = ob.replicas, ob.J, ob.M

    # columns: x (n), nslot (S), then per request e (prompt slots), f (prompt slots),
    # l (whole slots), k (whole slots)
    cols_upper = [np.ones(n)]
    n_upper = (R * length / bias_ms) if bias_ms > 0 else np.full(S, F.sum() + K.sum() + 1)
    cols_upper.append(np.minimum(n_upper, F.sum() + K.sum() + 1))
    x0, n0 = 0, n
    col = n + S
    rows: list[np.ndarray] = []
    cidx: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs: list[float] = []
    row = 0

    def add_row(c: np.ndarray, v: np.ndarray, b: float) -> None:
        nonlocal row
        rows.append(np.full(len(c), row))
        cidx.append(c)
        vals.append(v)
        rhs.append(b)
        row += 1

    slot_work: list[list[np.ndarray]] = [[] for _ in range(2)]   # (cols, slot) for work
    slot_batch: list[list[np.ndarray]] = [[] for _ in range(2)]  # (cols, slot) for batches
    slot_kv: list[np.ndarray] = []
    kv_vals: list[np.ndarray] = []
    kv_slots: list[np.ndarray] = []
    for i in range(n):
        ps = np.arange(lo[i], mid[i])
        ws = np.arange(lo[i], hi[i])
        e = col + np.arange(len(ps))
        f = e + len(ps)
        col = f[-1] + 1 if len(ps) else col
        cols_upper += [np.full(len(ps), P[i]), np.full(len(ps), F[i])]
        # Σ e ≥ x·P, Σ f ≥ x·F
        add_row(np.concatenate([[x0 + i], e]), np.concatenate([[P[i]], -np.ones(len(e))]), 0)
        add_row(np.concatenate([[x0 + i], f]), np.concatenate([[F[i]], -np.ones(len(f))]), 0)
        slot_work[0].append(e)
        slot_work[1].append(ps)
        if K[i] > 0:
            l_ = col + np.arange(len(ws))
            k = l_ + len(ws)
            col = k[-1] + 1
            cols_upper += [np.full(len(ws), Q[i]), np.full(len(ws), K[i])]
            add_row(np.concatenate([[x0 + i], l_]), np.concatenate([[Q[i]], -np.ones(len(ws))]),
                    0)
            add_row(np.concatenate([[x0 + i], k]), np.concatenate([[K[i]], -np.ones(len(ws))]),
                    0)
            for j in range(len(ws)):    # l ≥ step·k
                add_row(np.array([k[j], l_[j]]), np.array([step[i], -1.0]), 0)
            slot_work[0].append(l_)
            slot_work[1].append(ws)
            slot_batch[0].append(k)
            slot_batch[1].append(ws)
            slot_kv.append(k)
            kv_vals.append(np.full(len(ws), kv[i]))
            kv_slots.append(ws)
            # f + k ≤ n on the prompt slots, k ≤ n on the others
            for j, s in enumerate(ws):
                if s < mid[i]:
                    add_row(np.array([f[s - lo[i]], k[j], n0 + s]), np.array([1.0, 1.0, -1.0]),
                            0)
                else:
                    add_row(np.array([k[j], n0 + s]), np.array([1.0, -1.0]), 0)
        else:
            for j, s in enumerate(ps):
                add_row(np.array([f[j], n0 + s]), np.array([1.0, -1.0]), 0)
        slot_batch[0].append(f)
        slot_batch[1].append(ps)
    work_cols = np.concatenate(slot_work[0]) if slot_work[0] else np.array([], dtype=int)
    work_slot = np.concatenate(slot_work[1]) if slot_work[1] else np.array([], dtype=int)
    batch_cols = np.concatenate(slot_batch[0]) if slot_batch[0] else np.array([], dtype=int)
    batch_slot = np.concatenate(slot_batch[1]) if slot_batch[1] else np.array([], dtype=int)
    kv_cols = np.concatenate(slot_kv) if slot_kv else np.array([], dtype=int)
    kv_v = np.concatenate(kv_vals) if kv_vals else np.array([])
    kv_slot = np.concatenate(kv_slots) if kv_slots else np.array([], dtype=int)
    for s in range(S):
        wc = work_cols[work_slot == s]
        add_row(np.concatenate([[n0 + s], wc]), np.concatenate([[bias_ms], np.ones(len(wc))]),
                R * float(length[s]))
        bc = batch_cols[batch_slot == s]
        add_row(np.concatenate([[n0 + s], bc]), np.concatenate([[-float(J)], np.ones(len(bc))]),
                0)
        if M:
            on = kv_slot == s
            add_row(np.concatenate([[n0 + s], kv_cols[on]]),
                    np.concatenate([[-float(M)], kv_v[on]]), 0)
    upper = np.concatenate(cols_upper)
    cost = np.zeros(len(upper))
    cost[:n] = 1.0
    solved = certified_max(cost, upper, np.concatenate(rows), np.concatenate(cidx),
                           np.concatenate(vals), np.array(rhs, dtype=float), time_limit_s)
    if solved is None:
        return None
    best, status = solved
    return IterationBound(min(n, math.floor(best + 1e-9)), best, S, len(upper), status)
