"""Exhaustive search, the paper's strawman (Huang et al. 2025, section 4.3): every priority order
and every batch split, the best G (eq 2) kept.

The paper enumerates the N! orders times the 2^(N−1) cuts of each into batches (O(N!·2^N)). An
order and a cut differ from another only by the order inside a batch, which changes no latency
(eq 11 takes the batch's longest request; eqs 4 and 8 do not depend on the order inside a
batch); so this search enumerates the same decisions without those repeats: every sequence of
disjoint batches of 1..max_batch requests covering all requests (the ordered set partitions),
depth first, with the start time, met count and latency sum carried down the tree. No pruning:
it is the reference the other solvers are checked against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import combinations

from llmopt.problems.slo_priority.model import Batches, SloPriorityData, g_per_s


@dataclass(frozen=True)
class ExhaustiveOutcome:
    batches: Batches | None
    n_met: int
    total_ms: float
    g_per_s: float
    leaves: int
    complete: bool        # False: the deadline stopped it, the best so far is returned


def search(data: SloPriorityData, deadline: float | None = None) -> ExhaustiveOutcome:
    """The best plan over every ordered set partition; ``deadline`` (perf_counter seconds)
    stops it early (checked every 4,096 leaves)."""
    n, B = data.n, data.max_batch
    exe, slack = data.exec_ms, data.slack_ms
    best: list = [-1.0, 0, 0.0, None]
    leaves = 0
    stopped = False
    stack: list[tuple[int, ...]] = []

    def visit(remaining: tuple[int, ...], start: float, met: int, total: float) -> None:
        nonlocal leaves, stopped
        if not remaining:
            leaves += 1
            g = g_per_s(met, total)
            if g > best[0]:
                best[:] = [g, met, total, tuple(stack)]
            if deadline is not None and leaves % 4096 == 0 and time.perf_counter() > deadline:
                stopped = True
            return
        for s in range(1, min(B, len(remaining)) + 1):
            for batch in combinations(remaining, s):
                longest, m, tot = 0.0, met, total
                for i in batch:
                    e = exe[i][s]
                    tot += start + e                      # eq 4 (wait = start, eq 11)
                    if e > longest:
                        longest = e
                    if start <= slack[i][s]:              # eq 7
                        m += 1
                rest = tuple(i for i in remaining if i not in batch)
                stack.append(batch)
                visit(rest, start + longest, m, tot)
                stack.pop()
                if stopped:
                    return

    visit(tuple(range(n)), 0.0, 0, 0.0)
    g, met, total, batches = best
    return ExhaustiveOutcome(batches, met, total, max(g, 0.0), leaves, not stopped)
