"""PD-competition schedules enumerated and built greedily, independently of llmopt's models.

On the decode axis (one token per decode round for every running request), a schedule is a
sequence of events: a prefill stage that starts a set of waiting requests on free clients, or
decoding up to the next time a running request finishes. Stage boundaries elsewhere never help
(moving a stage earlier to the last finish before it delays nothing and keeps the requests in
flight the same), so enumerating these two moves covers every schedule worth having.

Cost of a schedule: the time of every prefill stage (``stage_cost(tokens)``) plus
``per_round`` per decode round up to the last finish (plus a constant the caller adds).
Memory: a running request reserves input + output KV tokens until it finishes; a stage may
start a group only if the reserved total stays within ``kv`` (None: unlimited).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations


class BudgetExceeded(Exception):
    """The enumeration visited more states than it was allowed."""


def optimal_total(inp: Sequence[int], out: Sequence[int], clients: int, cap: int,
                  stage_cost: Callable[[int], float], per_round: float, kv: int | None = None,
                  max_states: int | None = None) -> float:
    """The least cost over every schedule (math.inf when no schedule fits); raises
    BudgetExceeded after ``max_states`` distinct states."""
    n = len(inp)
    size = [a + b for a, b in zip(inp, out, strict=True)]
    memory = math.inf if kv is None else kv
    memo: dict[tuple, float] = {}

    def best(position: int, running: tuple, remaining: tuple) -> float:
        """Least cost from here: running = sorted tuple of (decode end, KV reserved)."""
        key = (position, running, remaining)
        if key in memo:
            return memo[key]
        if max_states is not None and len(memo) >= max_states:
            raise BudgetExceeded
        if not remaining:
            result = per_round * max((e for e, _ in running), default=position)
            memo[key] = result
            return result
        result = math.inf
        free = clients - len(running)
        reserved = sum(r for _, r in running)
        for group_size in range(1, min(free, len(remaining)) + 1):
            for group in combinations(remaining, group_size):
                tokens = sum(inp[i] for i in group)
                if tokens > cap or reserved + sum(size[i] for i in group) > memory:
                    continue
                ends = tuple(sorted(running + tuple((position + out[i], size[i])
                                                    for i in group)))
                rest = tuple(i for i in remaining if i not in group)
                result = min(result, stage_cost(tokens) + best(position, ends, rest))
        if running:
            nxt = running[0][0]
            result = min(result, best(nxt, tuple(r for r in running if r[0] > nxt), remaining))
        memo[key] = result
        return result

    return best(0, (), tuple(range(n)))


def greedy_total(inp: Sequence[int], out: Sequence[int], clients: int, cap: int,
                 stage_cost: Callable[[int], float], per_round: float, kv: int | None,
                 order: Sequence[int]) -> float | None:
    """A schedule built greedily: whenever possible, one prefill stage takes the waiting
    requests in ``order`` that fit the free clients, the stage capacity and the memory; else
    decode to the next finish. Its cost, or None when some request can never start."""
    size = [a + b for a, b in zip(inp, out, strict=True)]
    memory = math.inf if kv is None else kv
    waiting = list(order)
    running: list[tuple[int, int]] = []  # (decode end, KV reserved)
    position, cost = 0, 0.0
    while waiting:
        group: list[int] = []
        tokens = 0
        reserved = sum(r for _, r in running)
        for i in waiting:
            if (len(running) + len(group) < clients and tokens + inp[i] <= cap
                    and reserved + size[i] <= memory):
                group.append(i)
                tokens += inp[i]
                reserved += size[i]
        if group:
            cost += stage_cost(tokens)
            running += [(position + out[i], size[i]) for i in group]
            waiting = [i for i in waiting if i not in group]
            continue
        if not running:
            return None
        position = min(e for e, _ in running)
        running = [r for r in running if r[0] > position]
    end = max((e for e, _ in running), default=position)
    return cost + per_round * end
