"""Linear programs of the SLO ceiling: time slots, and a maximum certified by weak duality.

HiGHS solves ``max c·x, A x ≤ b, 0 ≤ x ≤ u`` (every variable bounded above); the bound returned
is not HiGHS's objective but y·b + Σ_j u_j·max(0, c_j − (Aᵀy)_j) for y ≥ 0 taken from its row
duals (both sign conventions tried, the smaller kept), plus a relative margin for the floating
point sums: weak duality makes it at least the LP's optimum for any y ≥ 0, so a solver's
tolerances can loosen the bound but never make it invalid.
"""

from __future__ import annotations

import math

import highspy
import numpy as np

CERTIFICATE_MARGIN = 1e-7   # relative, on the dual bound's terms


def slot_edges(edges: np.ndarray, max_slots: int) -> np.ndarray:
    """At most ``max_slots`` + 1 slot edges from the sorted ``edges``, keeping the first and
    last (merged slots: a window meeting a slot may use all of it, a relaxation)."""
    if len(edges) <= max_slots + 1:
        return edges
    pick = np.unique(np.round(np.linspace(0, len(edges) - 1, max_slots + 1)).astype(int))
    return edges[pick]


def certified_max(cost: np.ndarray, upper: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                  vals: np.ndarray, rhs: np.ndarray, time_limit_s: float
                  ) -> tuple[float, str] | None:
    """(the certified bound on max cost·x, HiGHS's status) of the LP in coordinate form
    (``rows``, ``cols``, ``vals``; rows ≤ ``rhs``; 0 ≤ x ≤ ``upper``); None when HiGHS does
    not reach its optimum within the time limit."""
    ncols = len(cost)
    order = np.lexsort((rows, cols))
    r, c, v = rows[order], cols[order].astype(np.int64), vals[order].astype(float)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncols, len(rhs)
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(ncols)
    lp.col_upper_ = upper
    lp.row_lower_ = np.full(len(rhs), -highspy.kHighsInf)
    lp.row_upper_ = rhs
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.searchsorted(c, np.arange(ncols + 1))
    lp.a_matrix_.index_ = r
    lp.a_matrix_.value_ = v
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(time_limit_s, 0.01)))
    h.setOptionValue("threads", 1)
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    status = h.modelStatusToString(h.getModelStatus())
    duals = np.asarray(h.getSolution().row_dual)
    best = math.inf
    for y in (np.maximum(duals, 0.0), np.maximum(-duals, 0.0)):
        aty = np.bincount(c, weights=v * y[r], minlength=ncols)
        reduced = np.maximum(0.0, cost - aty)
        bound = float(y @ rhs + upper @ reduced)
        terms = float(np.abs(y) @ np.abs(rhs) + upper @ (np.abs(cost) + np.abs(aty)))
        best = min(best, bound + CERTIFICATE_MARGIN * terms)
    return (best, status) if math.isfinite(best) else None
