"""Lower bounds on the optimal makespan of P||Cmax (identical machines, integer processing times).

The offline bin packing of Pang et al. 2025 (eqs 26–30) with loads in output tokens is P||Cmax:
``weights`` are the jobs' processing times, ``machines`` the identical machines (clients). Every
function here is pure: it takes the weights sorted in non-increasing order (an int64 array, see
:func:`sorted_weights`) and the number of machines, and returns a valid lower bound in the same
units. Each bound has a stable name (:data:`BOUNDS`), which solutions carry as their bound
certificate and which ``llmopt.validate.pcmax_bounds`` recomputes with separate code.

Two kinds:

- closed forms on the sorted jobs: ``ceil(sum/J)``, ``max``, ``pigeonhole`` (the
  Dell'Amico–Martello bounds generalised to every prefix of the sorted jobs);
- bin-packing dual bounds for the decision "do the jobs fit in ``machines`` bins of capacity C":
  a capacity C is *refuted* when a bin-packing lower bound needs more than ``machines`` bins,
  and then every capacity ≤ C is infeasible too, so C + 1 is a lower bound on the makespan
  (Dell'Amico & Martello 1995). ``mt_l2`` uses the bound L2 of Martello & Toth (1990), ``mt_l3``
  adds their reduction procedure, ``lifting`` applies ``mt_l2`` to the subproblems that the
  pigeonhole argument isolates (Haouari, Gharbi & Jemmali 2006).

The capacity search (:func:`search_capacity`) is a fixed galloping-then-bisection procedure, so
the value is a deterministic function of (weights, machines); it is valid whatever the shape of
the refutation test, because a refuted capacity proves every smaller one infeasible.

References
----------
- M. Dell'Amico, S. Martello (1995). Optimal scheduling of tasks on identical parallel
  processors. ORSA Journal on Computing 7(2):191–200.
- S. Martello, P. Toth (1990). Lower bounds and reduction procedures for the bin packing
  problem. Discrete Applied Mathematics 28(1):59–70; and *Knapsack Problems*, Wiley, ch. 8.
- M. Haouari, A. Gharbi, M. Jemmali (2006). Tight bounds for the identical parallel machine
  scheduling problem. International Transactions in Operational Research 13(6):529–548.
- M. Dell'Amico, M. Iori, S. Martello, M. Monaci (2008). Heuristic and exact algorithms for the
  identical parallel machine scheduling problem. INFORMS Journal on Computing 20(3):333–344.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

CHEAP = ("ceil(sum/J)", "max", "pigeonhole")
STRONG = ("mt_l2", "mt_l3", "lifting")
BOUNDS = (*CHEAP, *STRONG)
LIFTING_PREFIXES = 8  # prefixes lifted: the 8 with the largest pigeonhole value, and all n jobs


def sorted_weights(weights: Sequence[int] | np.ndarray) -> np.ndarray:
    """The weights as int64, sorted non-increasing (the input every bound here expects)."""
    return np.sort(np.asarray(weights, dtype=np.int64))[::-1]


def ceil_average(w: np.ndarray, machines: int) -> int:
    """ceil(Σ p / m): the average machine load, rounded up because loads are integers."""
    return -(-int(w.sum()) // machines)


def longest(w: np.ndarray, machines: int) -> int:
    """max p: the longest job runs on some machine."""
    return int(w[0]) if len(w) else 0


def pigeonhole_values(w: np.ndarray, machines: int) -> np.ndarray:
    """The pigeonhole bound of every prefix j = k·m + r (k ≥ 1, 1 ≤ r ≤ m) of the sorted jobs,
    indexed by j − m − 1. See :func:`pigeonhole`."""
    n, m = len(w), machines
    if n <= m:
        return np.zeros(0, dtype=np.int64)
    prefix = np.concatenate(([0], np.cumsum(w)))
    j = np.arange(m + 1, n + 1)
    k = (j - 1) // m
    r = j - k * m
    count = r * (k + 1)
    return -(-(prefix[j] - prefix[j - count]) // r)


def pigeonhole(w: np.ndarray, machines: int) -> int:
    """Generalised pigeonhole bound over every prefix of the sorted jobs.

    Of the j = k·m + r longest jobs (1 ≤ r ≤ m), the r machines holding the most of them hold at
    least r·(k + 1) together (if the r-th holds ≤ k, the other m − r hold ≤ (m − r)·k), so one of
    those r machines carries at least (sum of the r·(k + 1) shortest of the j jobs) / r. With
    r = 1 this is the bound of Dell'Amico & Martello (1995): p_{km+1} + … + p_{(k−1)m+1} ≥ …,
    i.e. the sum of the k + 1 shortest of the k·m + 1 longest jobs (p_m + p_{m+1} for k = 1).
    """
    values = pigeonhole_values(w, machines)
    return int(values.max()) if len(values) else 0


def basic(w: np.ndarray, machines: int) -> int:
    """max(ceil(sum/J), max): where every capacity search starts."""
    return max(ceil_average(w, machines), longest(w, machines))


# --------------------------------------------------------------------------- bin packing

def l2_bins(w: np.ndarray, capacity: int) -> int:
    """Martello & Toth's (1990) lower bound L2 on the number of bins of ``capacity`` that the
    items ``w`` (non-increasing) need; len(w) + 1 when an item exceeds the capacity.

    For α ∈ {0} ∪ {sizes ≤ C/2}: J1 = items > C − α (no item ≥ α fits beside them), J2 = items
    in (C/2, C − α], J3 = items in [α, C/2]; every J1 ∪ J2 item needs its own bin and J3 items
    fill at most the room the J2 bins leave, so
    L(α) = |J1| + |J2| + max(0, ceil((Σ J3 − (|J2|·C − Σ J2)) / C)), and L2 = max_α L(α).
    """
    n = len(w)
    if n == 0:
        return 0
    if int(w[0]) > capacity:
        return n + 1
    a = w[::-1]  # non-decreasing
    prefix = np.concatenate(([0], np.cumsum(a)))
    small = int(np.searchsorted(2 * a, capacity, side="right"))  # items with 2s ≤ C
    n_big = n - small
    sum_big = int(prefix[n] - prefix[small])
    alphas = np.concatenate(([0], np.unique(a[:small])))
    idx1 = np.searchsorted(a, capacity - alphas, side="right")
    n1 = n - idx1
    n2 = n_big - n1
    sum2 = sum_big - (prefix[n] - prefix[idx1])
    lo = np.searchsorted(a, alphas, side="left")
    sum3 = prefix[small] - prefix[lo]
    excess = sum3 - (n2 * capacity - sum2)
    extra = np.maximum(0, -(-excess // capacity))
    return int(n_big + extra.max())


def l3_bins(w: np.ndarray, capacity: int) -> int:
    """L2 strengthened by Martello & Toth's reduction (the ``L3`` idea, with the dominance
    rules that need no enumeration): items are taken longest first; an item j is given a bin of
    its own when no other item fits beside it, or put in a bin with k, the longest item that
    fits beside it, when p_j + p_k = C or no two items fit beside it (k then dominates every
    other companion). Each such bin is in some optimal packing, so the bins needed are at least
    (bins fixed) + L2(items left); the result is max(L2(all), that)."""
    n = len(w)
    if n == 0:
        return 0
    if int(w[0]) > capacity:
        return n + 1
    items = [int(x) for x in w]  # non-increasing
    alive = list(range(n))  # indices of the items left, increasing (so sizes non-increasing)
    neg = [-x for x in items]  # -size of each item in ``alive``, non-decreasing
    fixed = 0
    for j in range(n):
        pos = bisect.bisect_left(alive, j)
        if pos == len(alive) or alive[pos] != j:
            continue  # already in a fixed bin
        del alive[pos], neg[pos]
        room = capacity - items[j]
        if not alive or -neg[-1] > room:
            fixed += 1  # nothing fits beside j
            continue
        at = bisect.bisect_left(neg, -room)  # longest item left that fits beside j
        two_fit = len(alive) >= 2 and -neg[-1] - neg[-2] <= room
        if -neg[at] == room or not two_fit:
            del alive[at], neg[at]
            fixed += 1
            continue
        alive.insert(pos, j)
        neg.insert(pos, -items[j])
    left = np.array([items[i] for i in alive], dtype=np.int64)
    return max(l2_bins(w, capacity), fixed + l2_bins(left, capacity))


def search_capacity(refuted: Callable[[int], bool], start: int) -> int:
    """1 + the largest refuted capacity found by galloping up from ``start`` (a known lower
    bound) and then bisecting; ``start`` itself when it is not refuted.

    Galloping tests start, start + 1, start + 3, start + 7, … until a capacity is not refuted;
    bisection then narrows (last refuted, first not refuted) to adjacent values. A refuted C
    proves every capacity ≤ C infeasible, so the result is a valid bound whatever ``refuted``
    does between the tested points."""
    if not refuted(start):
        return start
    good, step = start, 1
    while refuted(good + step):
        good += step
        step *= 2
    bad = good + step
    while bad - good > 1:
        mid = (good + bad) // 2
        if refuted(mid):
            good = mid
        else:
            bad = mid
    return good + 1


def mt_l2(w: np.ndarray, machines: int) -> int:
    """Dell'Amico & Martello (1995): the makespan is at least C + 1 for every capacity C at
    which Martello & Toth's L2 needs more than m bins (:func:`l2_bins`, :func:`search_capacity`
    from max(ceil(sum/J), max))."""
    return search_capacity(lambda c: l2_bins(w, c) > machines, basic(w, machines))


def mt_l3(w: np.ndarray, machines: int) -> int:
    """As :func:`mt_l2` with the reduction-strengthened bin count :func:`l3_bins`."""
    return search_capacity(lambda c: l3_bins(w, c) > machines, basic(w, machines))


def lifting_prefixes(w: np.ndarray, machines: int) -> list[int]:
    """The prefix lengths j that :func:`lifting` lifts: the :data:`LIFTING_PREFIXES` with the
    largest pigeonhole value (ties: shorter prefix first), and j = n, in increasing order."""
    values = pigeonhole_values(w, machines)
    n = len(w)
    if not len(values):
        return []
    order = sorted(range(len(values)), key=lambda i: (-int(values[i]), i))
    chosen = {i + machines + 1 for i in order[:LIFTING_PREFIXES]} | {n}
    return sorted(chosen)


def lifting_subproblem(w: np.ndarray, machines: int, j: int) -> tuple[np.ndarray, int]:
    """For the j = k·m + r longest jobs: the r·(k + 1) shortest of them and r machines (the r
    machines holding most of the j jobs carry at least these, see :func:`pigeonhole`)."""
    k = (j - 1) // machines
    r = j - k * machines
    return w[j - r * (k + 1): j], r


def lifting(w: np.ndarray, machines: int) -> int:
    """Lifting (Haouari, Gharbi & Jemmali 2006): a lower bound of a subproblem that any schedule
    contains is a lower bound of the whole. The subproblems are those of the pigeonhole argument
    (the r·(k + 1) shortest of the k·m + r longest jobs on r machines, which the r fullest
    machines must carry), bounded with :func:`mt_l2`; prefixes: :func:`lifting_prefixes`."""
    best = 0
    for j in lifting_prefixes(w, machines):
        sub, r = lifting_subproblem(w, machines, j)
        best = max(best, mt_l2(sub, r))
    return best


FUNCTIONS: dict[str, Callable[[np.ndarray, int], int]] = {
    "ceil(sum/J)": ceil_average,
    "max": longest,
    "pigeonhole": pigeonhole,
    "mt_l2": mt_l2,
    "mt_l3": mt_l3,
    "lifting": lifting,
}


def best_bound(w: np.ndarray, machines: int, names: Sequence[str] = BOUNDS,
               stop_at: int | None = None) -> tuple[int, str, dict[str, int]]:
    """Evaluate the named bounds in order; returns (best value, the first name reaching it, every
    value computed). Stops early once a value reaches ``stop_at`` (an incumbent's makespan: no
    bound can exceed it, so nothing stronger is needed)."""
    values: dict[str, int] = {}
    for name in names:
        values[name] = FUNCTIONS[name](w, machines)
        if stop_at is not None and values[name] >= stop_at:
            break
    best = max(values.values())
    return best, next(k for k, v in values.items() if v == best), values
