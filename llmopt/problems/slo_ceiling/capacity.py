"""The capacity relaxation: the work of the requests meeting their SLOs fits in their windows.

Relaxation. Each request i with a deadline (``requests.WINDOW``) must, to meet its SLO, add
p_i (its prompt's least work, bias charges included) to batches between its arrival a_i and
``first_by`` and q_i (its later tokens') between a_i and ``finish_by`` (``requests`` module doc).
Spread each batch's time over its participants (each gets its own work plus its bias charge,
together at most the batch's time) and then evenly over the batch's span: on R replicas, whose
batches do not overlap on one replica, the work placed in any time interval is at most R times
its length. Dropping the order of a request's pieces and allowing preemption anywhere, the
fraction x_i ∈ [0, 1] of request i "served" satisfies the flow model below; the number of
requests meeting their SLOs is at most max Σ x_i, and so at most its floor.

Flow model (time in ticks of ``unit_ms``; arrivals rounded down, deadlines up, works down:
each rounding only relaxes). Leaves: the elementary intervals between consecutive breakpoints
(arrivals and deadlines), each of capacity R·length to the sink. Request i gets supply y_i ≤
p_i + q_i from the source, may send any of it to the leaves of [a_i, first_by_i) and at most
q_i to those of [first_by_i, finish_by_i) (so whenever y_i = p_i + q_i, at least p_i lies
before first_by_i). A segment tree over the leaves keeps the arcs at O(log leaves) per
request. Maximize Σ y_i / (p_i + q_i).

Exactness of the solve. The supply vectors y a capacitated single-sink network can route form
a polymatroid (its rank is the max flow from a set of sources, a min cut: submodular), and so
do they within the box y_i ≤ w_i = p_i + q_i. A linear objective with positive weights is
maximized over a polymatroid by the greedy vertex in decreasing weight order (Edmonds), here
in increasing w_i; for strictly ordered weights c_1 > … > c_n > 0, c·y = Σ_k (c_k − c_{k+1})·
y(first k) and every y(first k) is at most the rank of the first k, with equality for every k
only at the greedy vertex. So a minimum-cost flow with integer costs −c_i that follow the
order of the weights 1/w_i (one level per distinct w) returns the greedy vertex, which is also
optimal for the weights 1/w_i: the LP optimum, exactly, in integers (OR-Tools' min-cost flow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.graph.python import min_cost_flow

from llmopt.errors import InternalError
from llmopt.problems.slo_ceiling.requests import WINDOW, Obligations

MAX_TICKS = 10 ** 9        # horizon and total work in ticks stay below this (int64 costs)


@dataclass(frozen=True)
class CapacityPart:
    """One independent part (a maximal run of overlapping windows): its requests and the most
    of them the flow allows (the floor of the LP optimum)."""

    start_ms: float
    end_ms: float
    requests: int
    met_max: int
    lp_value: float


def _unit_ms(horizon_ms: float, work_ms: float) -> float:
    """The finest power-of-ten tick (at most 1e-6 ms) keeping the horizon and the total work
    within MAX_TICKS."""
    unit = 1e-6
    while max(horizon_ms, work_ms) / unit > MAX_TICKS:
        unit *= 10
    return unit


def parts(first: np.ndarray, last: np.ndarray) -> list[np.ndarray]:
    """Indices grouped into maximal runs of overlapping windows [first, last) (sorted by
    start): no window crosses from one run to the next, so the runs' flows are independent."""
    order = np.argsort(first, kind="stable")
    out: list[np.ndarray] = []
    current: list[int] = []
    reach = -math.inf
    for i in order:
        if current and first[i] >= reach:
            out.append(np.array(current))
            current, reach = [], -math.inf
        current.append(i)
        reach = max(reach, last[i])
    if current:
        out.append(np.array(current))
    return out


def _covers(lo: int, hi: int, size: int) -> list[int]:
    """Segment-tree nodes (1-based heap numbering over ``size`` leaves) covering leaves
    [lo, hi)."""
    nodes = []
    lo += size
    hi += size
    while lo < hi:
        if lo & 1:
            nodes.append(lo)
            lo += 1
        if hi & 1:
            hi -= 1
            nodes.append(hi)
        lo //= 2
        hi //= 2
    return nodes


def flow_value(release: np.ndarray, early_end: np.ndarray, late_end: np.ndarray,
               p: np.ndarray, q: np.ndarray, replicas: int) -> float:
    """max Σ y_i / (p_i + q_i) of the module doc, in ticks (integers; every w_i > 0)."""
    n = len(release)
    points = np.unique(np.concatenate([release, early_end, late_end]))
    leaves = len(points) - 1
    size = 1
    while size < max(leaves, 1):
        size *= 2
    lo = np.searchsorted(points, release)
    mid = np.searchsorted(points, early_end)
    hi = np.searchsorted(points, late_end)
    w = p + q
    total = int(w.sum())
    big = total + 1
    # nodes: 0 source, 1 sink, 2 + heap index (1 .. 2·size − 1) the tree, then requests, aux
    tree = 2
    req0 = tree + 2 * size
    aux0 = req0 + n
    tails: list[int] = []
    heads: list[int] = []
    caps: list[int] = []
    costs: list[int] = []

    def arc(t: int, h: int, cap: int, cost: int = 0) -> None:
        tails.append(t)
        heads.append(h)
        caps.append(cap)
        costs.append(cost)

    for v in range(1, size):
        arc(tree + v, tree + 2 * v, big)
        arc(tree + v, tree + 2 * v + 1, big)
    lengths = np.diff(points) * replicas
    for k in range(leaves):
        arc(tree + size + k, 1, int(lengths[k]))
    # costs: one level per distinct w, the smallest w the most negative
    levels = np.unique(w)
    level = np.searchsorted(levels, w)
    for i in range(n):
        arc(0, req0 + i, int(w[i]), -int(len(levels) - level[i]))
        for v in _covers(int(lo[i]), int(mid[i]), size):
            arc(req0 + i, tree + v, big)
        if q[i] > 0 and hi[i] > mid[i]:
            arc(req0 + i, aux0 + i, int(q[i]))
            for v in _covers(int(mid[i]), int(hi[i]), size):
                arc(aux0 + i, tree + v, big)
    arc(0, 1, total)   # the unserved supply
    solver: Any = min_cost_flow.SimpleMinCostFlow()   # its stubs mistype numpy arrays
    solver.add_arcs_with_capacity_and_unit_cost(np.array(tails, dtype=np.int64),
                                                np.array(heads, dtype=np.int64),
                                                np.array(caps, dtype=np.int64),
                                                np.array(costs, dtype=np.int64))
    supplies = np.zeros(aux0 + n, dtype=np.int64)
    supplies[0], supplies[1] = total, -total
    solver.set_nodes_supplies(np.arange(aux0 + n, dtype=np.int64), supplies)
    status = solver.solve()
    if status != solver.OPTIMAL:
        raise InternalError(f"the capacity relaxation's min-cost flow ended with status "
                            f"{status}")
    tail_arr = np.array(tails)
    head_arr = np.array(heads)
    source_arcs = np.flatnonzero((tail_arr == 0) & (head_arr >= req0))
    y = solver.flows(source_arcs)
    return float(np.sum(y / w[head_arr[source_arcs] - req0]))


def capacity_bound(ob: Obligations, chosen: np.ndarray | None = None,
                   stop=None, prompts_only: bool = False
                   ) -> tuple[int, list[CapacityPart], float]:
    """The most requests among ``chosen`` (default: every ``WINDOW`` request) whose work fits
    (module doc), as the sum over independent parts; also the parts and the tick (ms). With
    ``prompts_only``, the prompts' work alone in their first-token windows (a bound on the
    requests meeting their TTFT: the flow counts a request whose later work alone is routed
    as partly served, which this one does not). With ``stop`` (a callable), parts not solved
    before it returns True count all their requests (their ``lp_value`` is NaN)."""
    if chosen is None:
        chosen = np.flatnonzero(ob.kind == WINDOW)
    if len(chosen) == 0:
        return 0, [], 1.0
    a = ob.arrival_ms[chosen]
    first_by = ob.first_by_ms[chosen]
    finish_by = np.where(np.isinf(ob.finish_by_ms[chosen]) | prompts_only, first_by,
                         ob.finish_by_ms[chosen])
    origin = float(a.min())
    unit = _unit_ms(float(finish_by.max() - origin),
                    float((ob.prefill_ms[chosen] + ob.later_ms[chosen]).sum()))
    release = np.floor((a - origin) / unit).astype(np.int64)
    early = np.floor((first_by - origin) / unit).astype(np.int64) + 1
    late = np.maximum(np.floor((finish_by - origin) / unit).astype(np.int64) + 1, early)
    p = np.floor(ob.prefill_ms[chosen] / unit).astype(np.int64)
    q = np.floor(ob.later_ms[chosen] / unit).astype(np.int64) * (not prompts_only)
    total, out = 0, []
    for part in parts(release, late):
        w = p[part] + q[part]
        free = int(np.count_nonzero(w == 0))   # no work to place: unconstrained
        busy = part[w > 0]
        if stop is not None and stop():
            value, met = math.nan, len(part)     # not solved: every request counts
        else:
            value = free + (flow_value(release[busy], early[busy], late[busy], p[busy],
                                       q[busy], ob.replicas) if len(busy) else 0.0)
            met = min(len(part), math.floor(value + 1e-6))
        total += met
        out.append(CapacityPart(origin + float(release[part].min()) * unit,
                                origin + float(late[part].max()) * unit, len(part), met,
                                value))
    return total, out, unit
