"""Moore and Hodgson's rule for the most jobs on time on one machine (1||ΣU_j): J. M. Moore,
"An n job, one machine sequencing algorithm for minimizing the number of late jobs",
Management Science 15(1), 1968, with Hodgson's simplification given there. Used by a bound
(``problems.slo_priority.exact.max_met_bound``) and by a policy (``least-slack-defer``)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def moore_hodgson(jobs: Sequence[tuple[float, float]], start: float = 0.0,
                  rel_tol: float = 0.0) -> list[int]:
    """The indices of ``jobs`` ((due date, processing time) pairs) the rule leaves late: taken
    by due date from ``start``, each adds its time, and whenever the sum passes the due date of
    the one just added (by more than ``rel_tol``·max(1, due)), the longest taken so far is
    dropped. The others meet their due dates in that order, and no order of the jobs on one
    machine meets more."""
    taken: list[tuple[float, int]] = []   # a max-heap of (−time, index)
    clock = start
    dropped = []
    for k in sorted(range(len(jobs)), key=lambda k: jobs[k][0]):
        due, time = jobs[k]
        heapq.heappush(taken, (-time, k))
        clock += time
        if clock > due + rel_tol * max(1.0, due):
            longest, j = heapq.heappop(taken)
            clock += longest
            dropped.append(j)
    return dropped
