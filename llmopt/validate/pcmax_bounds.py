"""Independent recomputation of the named P||Cmax lower bounds, for the validator.

A binpacking solution names the closed-form bound that gives its reported bound
(``data["lower_bound"] = {"name", "tokens"}``). This module recomputes that bound from the
instance's integer loads with code written separately from ``llmopt.problems.pang.pcmax_bounds``
(plain Python loops, nothing imported from there), so a bug in the solver's bounds shows up as a
disagreement. It is deliberately simple and slower (quadratic where the solver's code is not).

The definitions are those of ``pcmax_bounds`` (see its docstring for the references):

- ``ceil(sum/J)``: ceil(Σp / m); ``max``: the longest job;
- ``pigeonhole``: for every prefix j = k·m + r (k ≥ 1, 1 ≤ r ≤ m) of the jobs sorted
  non-increasing, ceil(sum of the r·(k + 1) shortest of those j jobs / r);
- ``mt_l2`` / ``mt_l3``: a capacity C is refuted when Martello & Toth's L2 (for ``mt_l3``: L2
  after their reduction) needs more than m bins; starting from max(ceil(sum/J), max), gallop
  (start, start + 1, start + 3, …) while refuted, then bisect between the last refuted and the
  first not refuted; the bound is 1 + the last refuted capacity (or the start);
- ``lifting``: the largest ``mt_l2`` over the subproblems (the r·(k + 1) shortest of the
  j = k·m + r longest jobs, on r machines) for the 8 prefixes with the largest pigeonhole value
  (ties: shorter first) and the prefix of all jobs.

``recompute_bound`` returns None for names that are not closed forms (``complete search``,
``highs``, ``cpsat``): those are proofs by search, checked by nothing but their own solver.
"""

from __future__ import annotations


def recompute_bound(name: str, weights: list[int], machines: int) -> int | None:
    """The value of the bound ``name`` for jobs ``weights`` on ``machines`` machines, or None
    when ``name`` is not a closed-form bound this module knows."""
    p = sorted((int(x) for x in weights), reverse=True)
    if not p or machines < 1:
        return None
    if name == "ceil(sum/J)":
        return _ceil_div(sum(p), machines)
    if name == "max":
        return p[0]
    if name == "pigeonhole":
        values = _pigeonhole_by_prefix(p, machines)
        return max(values.values()) if values else 0
    if name == "mt_l2":
        return _capacity_bound(p, machines, _l2)
    if name == "mt_l3":
        return _capacity_bound(p, machines, _l3)
    if name == "lifting":
        return _lifting(p, machines)
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _split(j: int, machines: int) -> tuple[int, int]:
    """j = k·m + r with 1 ≤ r ≤ m."""
    k = (j - 1) // machines
    return k, j - k * machines


def _pigeonhole_by_prefix(p: list[int], machines: int) -> dict[int, int]:
    out = {}
    for j in range(machines + 1, len(p) + 1):
        k, r = _split(j, machines)
        shortest = p[:j][j - r * (k + 1):]
        out[j] = _ceil_div(sum(shortest), r)
    return out


def _l2(items: list[int], capacity: int) -> int:
    """Martello–Toth L2 bins, by direct set construction for every α."""
    if not items:
        return 0
    if max(items) > capacity:
        return len(items) + 1
    alphas = {0} | {x for x in items if 2 * x <= capacity}
    best = 0
    for alpha in alphas:
        j1 = [x for x in items if x > capacity - alpha]
        j2 = [x for x in items if capacity - alpha >= x and 2 * x > capacity]
        j3 = [x for x in items if 2 * x <= capacity and x >= alpha]
        free = len(j2) * capacity - sum(j2)
        extra = max(0, _ceil_div(sum(j3) - free, capacity))
        best = max(best, len(j1) + len(j2) + extra)
    return best


def _l3(items: list[int], capacity: int) -> int:
    """L2 after the reduction: longest first, a job gets its own bin when nothing fits beside
    it, or a bin with the longest job that fits beside it when that fills the bin exactly or no
    two jobs fit beside it; max(L2(all), bins so fixed + L2(jobs left))."""
    if not items:
        return 0
    if max(items) > capacity:
        return len(items) + 1
    size = sorted(items, reverse=True)
    alive = [True] * len(size)
    fixed = 0
    for j in range(len(size)):
        if not alive[j]:
            continue
        room = capacity - size[j]
        others = [i for i in range(len(size)) if alive[i] and i != j]
        fitting = [i for i in others if size[i] <= room]
        if not fitting:
            alive[j] = False
            fixed += 1
            continue
        k = fitting[0]  # lowest index: the longest job that fits beside j
        smallest_two = others[-2:]
        two_fit = len(others) >= 2 and sum(size[i] for i in smallest_two) <= room
        if size[k] == room or not two_fit:
            alive[j] = alive[k] = False
            fixed += 1
    left = [size[i] for i in range(len(size)) if alive[i]]
    return max(_l2(items, capacity), fixed + _l2(left, capacity))


def _capacity_bound(p: list[int], machines: int, bins) -> int:
    start = max(_ceil_div(sum(p), machines), p[0])

    def refuted(c: int) -> bool:
        return bins(p, c) > machines

    if not refuted(start):
        return start
    last_refuted, step = start, 1
    while refuted(last_refuted + step):
        last_refuted += step
        step *= 2
    first_ok = last_refuted + step
    while first_ok - last_refuted > 1:
        mid = (last_refuted + first_ok) // 2
        if refuted(mid):
            last_refuted = mid
        else:
            first_ok = mid
    return last_refuted + 1


def _lifting(p: list[int], machines: int) -> int:
    by_prefix = _pigeonhole_by_prefix(p, machines)
    if not by_prefix:
        return 0
    ranked = sorted(by_prefix, key=lambda j: (-by_prefix[j], j))[:8]
    best = 0
    for j in sorted(set(ranked) | {len(p)}):
        k, r = _split(j, machines)
        sub = p[:j][j - r * (k + 1):]
        best = max(best, _capacity_bound(sub, r, _l2))
    return best
