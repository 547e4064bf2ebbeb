"""The joint capacity LP: each request's prompt and later work served in the same proportion.

The capacity flow (``capacity``) lets a request be credited for its later work alone; the
prompts-only flow ignores later work. Here request i served to the fraction x_i ∈ [0, 1] places
x_i·P_i (prompt work with its bias charge, ``requests``) in the slots of [a_i, first_by_i) and
x_i·Q_i (later tokens') in those of [a_i, finish_by_i), the slots (between consecutive
arrivals and deadlines, merged into at most ``max_slots``: a window meeting a slot may use all
of it) holding at most R·length each. A schedule gives a solution with x_i = 1 for the requests
meeting their SLOs (the argument of ``capacity``), so max Σ x_i, certified by weak duality
(``lp``) and floored, bounds their number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmopt.problems.slo_ceiling.lp import certified_max, slot_edges
from llmopt.problems.slo_ceiling.requests import WINDOW, Obligations

MAX_SLOTS = 150


@dataclass(frozen=True)
class JointBound:
    met_max: int
    lp_value: float
    slots: int
    variables: int


def joint_bound(ob: Obligations, time_limit_s: float = 10.0,
                max_slots: int = MAX_SLOTS) -> JointBound | None:
    """The certified bound of the module doc over the ``WINDOW`` requests (None: HiGHS did not
    finish in time)."""
    chosen = np.flatnonzero(ob.kind == WINDOW)
    n = len(chosen)
    if n == 0:
        return JointBound(0, 0.0, 0, 0)
    a, first_by, finish_by, has_finish, times = ob.windows(chosen)
    edges = slot_edges(times, max_slots)
    S = len(edges) - 1
    if S < 1:
        return None
    lo = np.clip(np.searchsorted(edges, a, side="right") - 1, 0, S - 1)
    mid = np.clip(np.searchsorted(edges, first_by, side="left"), lo + 1, S)
    hi = np.maximum(np.clip(np.searchsorted(edges, finish_by, side="left"), lo + 1, S), mid)
    P = ob.prefill_ms[chosen]
    Q = np.where(has_finish, ob.later_ms[chosen], 0.0)
    e_count = mid - lo
    l_count = np.where(Q > 0, hi - lo, 0)
    ncols = n + int(e_count.sum()) + int(l_count.sum())
    upper = np.concatenate([np.ones(n), np.repeat(P, e_count), np.repeat(Q, l_count)])
    # rows 0..n−1: x·P − Σe ≤ 0; n..2n−1: x·Q − Σl ≤ 0; 2n..2n+S−1: Σ (e + l) in slot ≤ R·|t|
    e_req = np.repeat(np.arange(n), e_count)
    e_slot = np.concatenate([np.arange(lo[i], mid[i]) for i in range(n)])
    l_req = np.repeat(np.arange(n), l_count)
    l_slot = (np.concatenate([np.arange(lo[i], hi[i]) for i in range(n) if l_count[i]])
              if l_count.sum() else np.array([], dtype=int))
    e_cols = np.arange(n, n + int(e_count.sum()))
    l_cols = np.arange(n + int(e_count.sum()), ncols)
    with_q = np.flatnonzero(Q > 0)
    rows = np.concatenate([np.arange(n), e_req, n + with_q, n + l_req, 2 * n + e_slot,
                           2 * n + l_slot])
    cols = np.concatenate([np.arange(n), e_cols, with_q, l_cols, e_cols, l_cols])
    vals = np.concatenate([P, -np.ones(len(e_cols)), Q[with_q], -np.ones(len(l_cols)),
                           np.ones(len(e_cols)), np.ones(len(l_cols))])
    rhs = np.concatenate([np.zeros(2 * n), ob.replicas * np.diff(edges)])
    cost = np.zeros(ncols)
    cost[:n] = 1.0
    solved = certified_max(cost, upper, rows, cols, vals, rhs, time_limit_s)
    if solved is None:
        return None
    return JointBound(min(n, math.floor(solved[0] + 1e-9)), solved[0], S, ncols)
