"""Grid plans: a constructive heuristic for the PD-competition problem that trades prefill stages
against the rounds clients wait for them.

Prefill stages are placed on a grid of the decode axis, every G rounds. A request that is not
the last on its client then occupies its length rounded up to a multiple of G (it waits for the
next grid stage); the last request on each client ends at its true length. So the decode axis
needed by client j is Σ_i R_i − max_i (R_i − N^d_i) over its requests, with R_i = G·ceil(N^d_i/G),
and the plan is an assignment of requests to clients minimising the largest such load (a bin
packing with one item per bin left unrounded), found by LPT plus moves and swaps. Stages at the
same grid point are split by the prefill capacity and the KV capacity; the plan is finally
timed as early as the clients and the KV memory allow (``earliest_plan``). The best G under the
time model wins.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from llmopt.problems.pang.pd_plan import PDProblem, Plan, earliest_plan


def effective_loads(R: np.ndarray, waste: np.ndarray, assign: np.ndarray, bins: int
                    ) -> np.ndarray:
    total = np.bincount(assign, weights=R, minlength=bins)
    top = np.zeros(bins)
    np.maximum.at(top, assign, waste)
    return (total - top).astype(np.int64)


def assign_requests(lengths: np.ndarray, G: int, clients: int, deadline: float) -> np.ndarray:
    """Clients for requests minimising max_j (Σ R − max waste) by LPT and local search."""
    R = -(-lengths // G) * G
    waste = R - lengths
    n = len(lengths)
    assign = np.empty(n, dtype=np.int64)
    heap = [(0, j) for j in range(clients)]
    for i in np.argsort(-R, kind="stable"):
        load, j = heapq.heappop(heap)
        assign[i] = j
        heapq.heappush(heap, (load + int(R[i]), j))
    _local_search(R, waste, assign, clients, deadline)
    return assign


def _local_search(R: np.ndarray, waste: np.ndarray, assign: np.ndarray, clients: int,
                  deadline: float) -> None:
    """Best move or swap out of a most-loaded client while it lowers the larger of the two
    effective loads below the current maximum (evaluated in O(1) per candidate from each
    client's sum and two largest wastes)."""
    n = len(R)
    idx = np.arange(n)
    while time.perf_counter() < deadline:
        total = np.bincount(assign, weights=R, minlength=clients).astype(np.int64)
        order = np.lexsort((-waste, assign))           # by client, waste descending
        first = np.searchsorted(assign[order], np.arange(clients))
        count = np.bincount(assign, minlength=clients)
        w1 = np.where(count > 0, waste[order[np.minimum(first, n - 1)]], 0)
        w1_item = np.where(count > 0, order[np.minimum(first, n - 1)], -1)
        w2 = np.where(count > 1, waste[order[np.minimum(first + 1, n - 1)]], 0)
        eff = total - w1
        top = int(eff.max())
        a = int(np.argmax(eff))
        mine = idx[assign == a]
        others = idx[assign != a]
        best_val, best = top, None
        for i in mine:
            wa_rest = w2[a] if w1_item[a] == i else w1[a]
            # move i to any other client b
            b = np.arange(clients)
            new_b = total + R[i] - np.maximum(w1, waste[i])
            new_a = total[a] - R[i] - (wa_rest if count[a] > 1 else 0)
            val = np.maximum(new_a, new_b)
            val[a] = top
            jb = int(np.argmin(val))
            if val[jb] < best_val:
                best_val, best = int(val[jb]), ("move", int(i), int(b[jb]))
            if not len(others):
                continue
            # swap i with k on its client
            bk = assign[others]
            wb_rest = np.where(w1_item[bk] == others, w2[bk], w1[bk])
            na = total[a] - R[i] + R[others] - np.maximum(wa_rest, waste[others])
            nb = total[bk] - R[others] + R[i] - np.maximum(wb_rest, waste[i])
            val = np.maximum(na, nb)
            r = int(np.argmin(val))
            if val[r] < best_val:
                best_val, best = int(val[r]), ("swap", int(i), int(others[r]))
        if best is None:
            return
        kind, i, x = best
        if kind == "move":
            assign[i] = x
        else:
            assign[i], assign[x] = assign[x], a


def grid_plan(problem: PDProblem, G: int, deadline: float) -> Plan:
    """The grid plan of spacing ``G`` (see the module docstring)."""
    lengths = problem.out.astype(np.int64)
    assign = assign_requests(lengths, G, problem.clients, deadline)
    R = -(-lengths // G) * G
    waste = R - lengths
    start = np.zeros(problem.n, dtype=np.int64)
    for j in range(problem.clients):
        mine = np.flatnonzero(assign == j)
        if not len(mine):
            continue
        last = mine[np.argmax(waste[mine])]
        order = [*(i for i in mine[np.argsort(-R[mine], kind="stable")] if i != last), last]
        position = 0
        for i in order:
            start[i] = position
            position += int(R[i])
    memory = problem.kv_capacity if problem.kv_capacity is not None else np.inf
    bins: list[list[int]] = []
    for t in np.unique(start):
        group = list(np.flatnonzero(start == t))
        group.sort(key=lambda i: -int(problem.inp[i]))
        current: list[int] = []
        tokens = reserved = 0
        for i in group:
            if (tokens + int(problem.inp[i]) > problem.cap
                    or reserved + int(problem.footprint[i]) > memory):
                bins.append(current)
                current, tokens, reserved = [], 0, 0
            current.append(int(i))
            tokens += int(problem.inp[i])
            reserved += int(problem.footprint[i])
        bins.append(current)
    plan = earliest_plan(problem, bins, assign, source=f"grid G={G}")
    return plan


def best_grid_plan(problem: PDProblem, model: str, time_limit_s: float = 20.0,
                   spacings: tuple[int, ...] | None = None) -> tuple[float, Plan] | None:
    """The best grid plan over a range of spacings (total under ``model``, plan)."""
    spacings = spacings or tuple(sorted({max(1, int(g)) for g in np.geomspace(
        4, max(8, int(problem.out.max()) // 4), 14)}))
    deadline = time.perf_counter() + time_limit_s
    best: tuple[float, Plan] | None = None
    for k, G in enumerate(spacings):
        share = max((deadline - time.perf_counter()) / (len(spacings) - k), 0.05)
        plan = grid_plan(problem, G, time.perf_counter() + share)
        total = plan.total_ms(problem, model)
        if best is None or total < best[0]:
            best = (total, plan)
        if time.perf_counter() > deadline:
            break
    return best
