"""A brute-force enumerator of PD-competition stage sequences, independent of llmopt's models.

On the decode axis (one token per decode round for every running request), a schedule is a
sequence of events: a prefill stage that starts a set of waiting requests on free clients, or
decoding up to the next time a running request finishes. Stage boundaries elsewhere never help
(moving a stage earlier to the last finish before it delays nothing), so enumerating these two
moves covers every schedule worth having. Cost under the stage model: the level time of every
prefill stage plus T_d per decode round up to the last finish.
"""

from __future__ import annotations

import math
from functools import cache
from itertools import combinations


def optimal_total(inp, out, clients, cap, stage_cost, per_round):
    n = len(inp)

    @cache
    def best(position, running, remaining):
        """Least cost from here: running = sorted tuple of decode ends."""
        if not remaining:
            return per_round * max(running, default=position)
        result = math.inf
        free = clients - len(running)
        for size in range(1, min(free, len(remaining)) + 1):
            for group in combinations(remaining, size):
                tokens = sum(inp[i] for i in group)
                if tokens > cap:
                    continue
                ends = tuple(sorted(running + tuple(position + out[i] for i in group)))
                rest = tuple(i for i in remaining if i not in group)
                result = min(result, stage_cost(tokens) + best(position, ends, rest))
        if running:
            nxt = running[0]
            result = min(result, best(nxt, tuple(e for e in running if e > nxt), remaining))
        return result

    return best(0, (), tuple(range(n)))


def stage_model_total(inp, out, clients, levels, cap, t_round):
    """Optimum under the original MIP's stage model (level times, T_d per round)."""
    return optimal_total(inp, out, clients, cap,
                         lambda tokens: next(ms for c, ms in levels if tokens <= c), t_round)


def replay_model_total(inp, out, clients, cap, prefill, decode):
    """Optimum under the replay engine's model (prefill/decode are (overhead, per-unit))."""
    return decode[1] * sum(out) + optimal_total(
        inp, out, clients, cap, lambda tokens: prefill[0] + prefill[1] * tokens, decode[0])
