"""A complete method for P||Cmax at a target makespan: bin completion.

"Do the jobs fit on ``machines`` machines with makespan ≤ T?" is bin packing with ``machines``
bins of capacity T. :func:`fits` decides it by bin completion (Korf 2002, 2003; Schreiber & Korf
2013): bins are filled one at a time, each starting with the longest job left (identical
machines are interchangeable, so this loses no packing), and a bin is completed by a subset of
the jobs left, tried fullest first. Rules that keep the search small without losing a packing:

- waste budget: the total idle capacity is machines·T − Σp; a bin may leave at most what is
  still unspent, so with T at the lower bound only near-full completions are tried;
- maximal completions only: a completion beside which some job left would still fit is
  dominated by the completion with that job (Martello & Toth 1990) and is skipped;
- equal jobs are interchangeable: subsets differing only in which of equal jobs they take are
  generated once;
- bounds: a node is cut when its jobs left need more bins than remain by Martello & Toth's L2,
  or when their pigeonhole bound on the bins left (:func:`pcmax_bounds.pigeonhole`) exceeds T;
- nogoods: a set of jobs left (with its number of bins) that failed once is not searched again.

The search is exhaustive unless the deadline or the completion limit of a node cuts it, so
"infeasible" is a proof that no schedule has makespan ≤ T; a cut search answers "unknown".
:func:`minimize` runs it for T = lower bound, lower bound + 1, … below an incumbent.

References
----------
- R. E. Korf (2002). A new algorithm for optimal bin packing. AAAI-02, 731–736.
- R. E. Korf (2003). An improved algorithm for optimal bin packing. IJCAI-03, 1252–1258.
- E. L. Schreiber, R. E. Korf (2013). Improved bin completion for optimal bin packing and
  number partitioning. IJCAI-13, 651–658.
- S. Martello, P. Toth (1990). Lower bounds and reduction procedures for the bin packing
  problem. Discrete Applied Mathematics 28(1):59–70.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmopt.problems.pang.pcmax_bounds import l2_bins, pigeonhole

MAX_COMPLETIONS = 5000  # completions generated per bin; beyond, the node is not exhausted
MAX_NOGOODS = 200_000


@dataclass
class Decision:
    """Outcome of :func:`fits`: ``status`` is "feasible" (with ``assign``, machine per job),
    "infeasible" (proven) or "unknown" (deadline or a cut node)."""

    status: str
    assign: np.ndarray | None
    nodes: int
    steps: int = 0  # completion-generation steps spent (what ``max_steps`` budgets)


class _Deadline(Exception):
    pass


def fits(weights: Sequence[int] | np.ndarray, machines: int, capacity: int,
         deadline: float, max_steps: int | None = None) -> Decision:
    """Whether the jobs ``weights`` fit on ``machines`` machines with makespan ≤ ``capacity``
    (bin completion, see the module docstring); ``deadline`` is a perf_counter time, and
    ``max_steps`` a budget of search steps that, unlike the deadline, cuts the search at the
    same point on every machine (for answers that must not depend on its load)."""
    w = [int(x) for x in weights]
    order = sorted(range(len(w)), key=lambda i: -w[i])
    sizes = [w[i] for i in order]
    if not sizes:
        return Decision("feasible", np.zeros(0, dtype=np.int64), 0)
    if sizes[0] > capacity or sum(sizes) > machines * capacity:
        return Decision("infeasible", None, 0)
    search = _BinCompletion(sizes, machines, capacity, deadline, max_steps)
    try:
        bins = search.run()
    except _Deadline:
        return Decision("unknown", None, search.nodes, search.steps)
    if bins is None:
        return Decision("infeasible" if search.exhaustive else "unknown", None, search.nodes,
                        search.steps)
    # bins hold sizes; give each size back the original jobs of that size
    pool: dict[int, list[int]] = {}
    for i in order:
        pool.setdefault(w[i], []).append(i)
    assign = np.empty(len(w), dtype=np.int64)
    for b, contents in enumerate(bins):
        for s in contents:
            assign[pool[s].pop()] = b
    return Decision("feasible", assign, search.nodes, search.steps)


class _BinCompletion:
    def __init__(self, sizes: list[int], machines: int, capacity: int, deadline: float,
                 max_steps: int | None = None):
        self.capacity = capacity
        self.machines = machines
        self.sizes = sizes
        self.deadline = deadline
        self.max_steps = max_steps if max_steps is not None else float("inf")
        self.nodes = 0
        self.steps = 0  # completion-generation steps, for the deadline check
        self.exhaustive = True
        self.nogoods: set[tuple[int, tuple[int, ...]]] = set()

    def run(self) -> list[list[int]] | None:
        return self._pack(tuple(self.sizes), self.machines)

    def _pack(self, rest: tuple[int, ...], bins_left: int) -> list[list[int]] | None:
        """Pack ``rest`` (non-increasing) into ``bins_left`` bins, or None."""
        if not rest:
            return []
        if bins_left == 0:
            return None
        self.nodes += 1
        if time.perf_counter() > self.deadline or self.steps > self.max_steps:
            raise _Deadline
        key = (bins_left, rest)
        if key in self.nogoods:
            return None
        total = sum(rest)
        slack = bins_left * self.capacity - total
        if slack < 0 or rest[0] > self.capacity:
            return None
        if bins_left == 1:
            return [list(rest)]
        arr = np.asarray(rest, dtype=np.int64)
        if (pigeonhole(arr, bins_left) > self.capacity
                or l2_bins(arr, self.capacity) > bins_left):
            self._fail(key)
            return None
        for chosen in self._completions(rest, slack):
            left = _remove(rest, chosen)
            packed = self._pack(left, bins_left - 1)
            if packed is not None:
                return [[rest[i] for i in chosen], *packed]
        if self.exhaustive:  # a cut completion list proves nothing
            self._fail(key)
        return None

    def _fail(self, key: tuple[int, tuple[int, ...]]) -> None:
        if len(self.nogoods) < MAX_NOGOODS:
            self.nogoods.add(key)

    def _completions(self, rest: tuple[int, ...], slack: int) -> list[list[int]]:
        """Index sets of ``rest`` holding rest[0], with room left ≤ ``slack`` and no job left
        out that would still fit (maximal), one per multiset of sizes, fullest first."""
        cap = self.capacity - rest[0]
        n = len(rest)
        suffix = [0] * (n + 1)
        for i in range(n - 1, 0, -1):
            suffix[i] = suffix[i + 1] + rest[i]
        found: list[tuple[int, list[int]]] = []
        chosen: list[int] = []
        smallest_out = [self.capacity + 1]  # smallest size left out so far (stack)

        def extend(i: int, room: int) -> None:
            self.steps += 1
            if self.steps % 1024 == 0 and (time.perf_counter() > self.deadline
                                           or self.steps > self.max_steps):
                raise _Deadline
            if len(found) >= MAX_COMPLETIONS:
                self.exhaustive = False
                return
            # the bin must end with room ≤ slack and below every job left out (maximal)
            target = min(slack, smallest_out[-1] - 1)
            if suffix[i] < room - target:
                return  # even taking every job left cannot fill the bin that far
            if i == n or rest[-1] > room:
                # nothing more fits (the jobs from i on that are not taken exceed the room)
                if room <= target:
                    found.append((room, chosen.copy()))
                return
            if rest[i] > room:
                extend(_skip_larger(rest, i, room), room)
                return
            chosen.append(i)  # take rest[i]
            extend(i + 1, room - rest[i])
            chosen.pop()
            j = i  # or leave out every job of this size (equal jobs are interchangeable)
            while j < n and rest[j] == rest[i]:
                j += 1
            smallest_out.append(min(smallest_out[-1], rest[i]))
            extend(j, room)
            smallest_out.pop()

        chosen.append(0)
        extend(1, cap)
        found.sort(key=lambda item: item[0])
        return [c for _, c in found]


def _skip_larger(rest: tuple[int, ...], i: int, room: int) -> int:
    """First index ≥ i whose job fits in ``room`` (jobs are non-increasing), by bisection."""
    lo, hi = i, len(rest)
    while lo < hi:
        mid = (lo + hi) // 2
        if rest[mid] > room:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _remove(rest: tuple[int, ...], chosen: list[int]) -> tuple[int, ...]:
    out = set(chosen)
    return tuple(x for k, x in enumerate(rest) if k not in out)


def minimize(weights: Sequence[int] | np.ndarray, machines: int, lower: int, upper: int,
             deadline: float) -> tuple[np.ndarray | None, int, int]:
    """Decide T = lower, lower + 1, … < upper with :func:`fits` until a packing is found, the
    incumbent ``upper`` is proven optimal, or the deadline passes. Returns (assignment found or
    None, best proven lower bound, nodes searched). With no assignment, a returned bound equal
    to ``upper`` proves the incumbent optimal."""
    nodes = 0
    t = lower
    while t < upper:
        decision = fits(weights, machines, t, deadline)
        nodes += decision.nodes
        if decision.status == "feasible":
            return decision.assign, t, nodes
        if decision.status == "unknown":
            return None, t, nodes
        t += 1
    return None, t, nodes
