"""Arc-flow decision for P||Cmax at a target makespan (Valério de Carvalho 1999), by HiGHS.

"Do the jobs fit on m machines with makespan ≤ T?" is bin packing with m bins of capacity T.
In the arc-flow model a bin is a path from node 0 to node T of the graph whose nodes are partial
loads: an *item arc* (u, u + s) places a job of size s, a *loss arc* (u, T) closes the bin.
Item arcs are generated sizes longest first, each size only from loads reachable with sizes at
least as long (Valério de Carvalho's ordering, which keeps one path per multiset of sizes up to
the order), so the graph has at most (number of distinct sizes) × (T + 1) item arcs::

    find  x_a ∈ ℤ≥0 (flow on arc a)
    s.t.  Σ_{a out of 0} x_a ≤ m                          bins used
          Σ_{a into u} x_a = Σ_{a out of u} x_a           every load 0 < u < T
          Σ_{item arcs of size s} x_a ≥ d_s               jobs of size s
    min   Σ_{a out of 0} x_a

Its LP relaxation equals the Gilmore–Gomory bound, the strongest of the usual bin-packing
bounds, so a T below the optimum is usually refuted at the root; an integer solution is a
packing (a path decomposition of the flow). HiGHS proves infeasibility or finds the packing;
the answer "infeasible" is HiGHS's proof (named ``arc-flow`` in the bound certificate).

References
----------
- J. M. Valério de Carvalho (1999). Exact solution of bin-packing problems using column
  generation and branch-and-bound. Annals of Operations Research 86:629–659.
- M. Mrad, N. Souayah (2018). An arc-flow model for the makespan minimization problem on
  identical parallel machines. IEEE Access 6:5300–5307.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from llmopt.backends.highspy_run import run_interruptible

MAX_ARCS = 100_000  # above, the model is not built (bin completion alone decides)


def build_seconds(arcs: int) -> float:
    """Rough time to build the model in Python (about 1 s per 300,000 arcs on the benchmark
    machine, with a margin): a decision is not started with less time left than this."""
    return 0.2 + arcs / 250_000


@dataclass
class ArcFlowDecision:
    """``status``: "feasible" (with ``assign``, machine per job), "infeasible" (HiGHS proved
    the arc-flow model infeasible), "unknown" (time limit), "too large" (not built)."""

    status: str
    assign: np.ndarray | None
    arcs: int


def arc_count(weights: Sequence[int] | np.ndarray, capacity: int) -> int:
    """Number of arcs :func:`fits` would build (item arcs + loss arcs), without building them."""
    tails, _heads, _sizes, nodes = _item_arcs(weights, capacity, count_only=True)
    return len(tails) + int(nodes[1:capacity].sum())  # item arcs + a loss arc per load 0 < u < T


def _item_arcs(weights: Sequence[int] | np.ndarray, capacity: int, count_only: bool = False
               ) -> tuple[list[int], list[int], list[int], np.ndarray]:
    sizes = sorted({int(x) for x in weights}, reverse=True)
    reach = np.zeros(capacity + 1, dtype=bool)
    reach[0] = True
    tails: list[int] = []
    heads: list[int] = []
    kinds: list[int] = []
    for k, s in enumerate(sizes):
        # loads u ≤ T − s reachable with sizes ≥ s, in increasing order; chains of s included
        for u in range(capacity - s + 1):
            if reach[u]:
                reach[u + s] = True
                tails.append(u)
                if not count_only:
                    heads.append(u + s)
                    kinds.append(k)
        if len(tails) > MAX_ARCS:
            break
    return tails, heads, kinds, reach


def fits(weights: Sequence[int] | np.ndarray, machines: int, capacity: int,
         deadline: float, relax: bool = False) -> ArcFlowDecision:
    """Whether the jobs fit on ``machines`` machines with makespan ≤ ``capacity`` (arc-flow MIP
    by HiGHS until ``deadline``, a perf_counter time). With ``relax``, only the LP relaxation is
    solved: "infeasible" then refutes the capacity, anything else answers "unknown"."""
    w = [int(x) for x in weights]
    if not w:
        return ArcFlowDecision("feasible", np.zeros(0, dtype=np.int64), 0)
    if max(w) > capacity or sum(w) > machines * capacity:
        return ArcFlowDecision("infeasible", None, 0)
    sizes = sorted(set(w), reverse=True)
    demand = [w.count(s) for s in sizes]
    tails, heads, kinds, reach = _item_arcs(w, capacity)
    if len(tails) > MAX_ARCS:
        return ArcFlowDecision("too large", None, len(tails))
    loss_tails = [u for u in range(capacity) if reach[u] and u > 0]
    tails = [*tails, *loss_tails]
    heads = [*heads, *([capacity] * len(loss_tails))]
    kinds = [*kinds, *([-1] * len(loss_tails))]
    n_arcs = len(tails)
    internal = [u for u in range(1, capacity) if reach[u]]
    row_of_node = {u: len(sizes) + 1 + i for i, u in enumerate(internal)}
    bins_row = len(sizes)
    n_rows = len(sizes) + 1 + len(internal)

    starts, index, value = [0], [], []
    for t, h, k in zip(tails, heads, kinds, strict=True):
        entries = []
        if k >= 0:
            entries.append((k, 1.0))
        if t == 0:
            entries.append((bins_row, 1.0))
        else:
            entries.append((row_of_node[t], -1.0))
        if h != capacity:
            entries.append((row_of_node[h], 1.0))
        entries.sort()
        index += [r for r, _ in entries]
        value += [v for _, v in entries]
        starts.append(len(index))

    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = n_arcs
    lp.num_row_ = n_rows
    lp.col_cost_ = np.array([1.0 if t == 0 else 0.0 for t in tails])
    lp.col_lower_ = np.zeros(n_arcs)
    lp.col_upper_ = np.full(n_arcs, float(machines))
    lp.row_lower_ = np.array([*map(float, demand), 0.0, *([0.0] * len(internal))])
    lp.row_upper_ = np.array([*([inf] * len(sizes)), float(machines), *([0.0] * len(internal))])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value)
    if not relax:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n_arcs

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", max(deadline - time.perf_counter(), 0.01))
    h.passModel(lp)
    run_interruptible(h)
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return ArcFlowDecision("infeasible", None, n_arcs)
    if status != highspy.HighsModelStatus.kOptimal or relax:
        return ArcFlowDecision("unknown", None, n_arcs)
    flow = np.rint(np.asarray(h.getSolution().col_value)).astype(np.int64)
    bins = _decompose(tails, heads, kinds, flow, capacity)
    return ArcFlowDecision("feasible", _assign(w, sizes, bins, machines, capacity), n_arcs)


def _decompose(tails: list[int], heads: list[int], kinds: list[int], flow: np.ndarray,
               capacity: int) -> list[list[int]]:
    """Paths 0 → T of the integer flow, each a list of size indices (one bin each)."""
    out: dict[int, list[int]] = {}
    for a, t in enumerate(tails):
        if flow[a] > 0:
            out.setdefault(t, []).append(a)
    left = flow.copy()
    bins = []
    while any(left[a] > 0 for a in out.get(0, [])):
        node, items = 0, []
        while node != capacity:
            a = next(a for a in out[node] if left[a] > 0)
            left[a] -= 1
            if kinds[a] >= 0:
                items.append(kinds[a])
            node = heads[a]
        bins.append(items)
    return bins


def _assign(w: list[int], sizes: list[int], bins: list[list[int]], machines: int,
            capacity: int) -> np.ndarray:
    """Machine per job from the bins (sizes covered more often than there are jobs of that size
    are simply left out); checked: every job placed, every load ≤ capacity."""
    pool: dict[int, list[int]] = {}
    for i, x in enumerate(w):
        pool.setdefault(x, []).append(i)
    assign = np.full(len(w), -1, dtype=np.int64)
    for b, items in enumerate(bins):
        for k in items:
            jobs = pool[sizes[k]]
            if jobs:
                assign[jobs.pop()] = b
    loads = np.bincount(assign[assign >= 0], weights=np.asarray(w)[assign >= 0],
                        minlength=machines)
    if (assign < 0).any() or len(bins) > machines or loads.max() > capacity:
        raise RuntimeError("arc-flow solution does not decompose into a packing (a bug)")
    return assign


def lp_bound(weights: Sequence[int] | np.ndarray, machines: int, lower: int, upper: int,
             deadline: float) -> int:
    """Raise ``lower`` with the arc-flow LP relaxation: bisection on [lower, upper) for the
    smallest capacity the LP does not refute (an LP-infeasible capacity C proves every capacity
    ≤ C infeasible, so the result is a valid bound whatever happens between tested points).
    ``upper`` must be a feasible makespan; stops early at the deadline with what it proved."""
    good, bad = lower - 1, upper  # good: largest refuted so far (or below lower); bad: feasible
    need = build_seconds(arc_count(weights, upper))
    while bad - good > 1 and deadline - time.perf_counter() > need:
        mid = (good + bad) // 2
        if arc_count(weights, mid) > MAX_ARCS:
            break
        if fits(weights, machines, mid, deadline, relax=True).status == "infeasible":
            good = mid
        else:
            bad = mid
    return max(lower, good + 1)
