"""Brute-force optimum of the InferMax scheduling problem (offline, tiny instances), and a serial
schedule that exists whenever every request fits the memory alone.

Written from section 3 of Kim et al. 2025, independently of the CSP: a shortest path over
states (per request: sequence length S, cached KVs m) where each batch chooses, per request,
to idle, to be evicted (m → 0) or to process c ≥ 1 of its S − m uncached tokens. The batch time
is the cost model charged chunk by chunk (c² + 2mc of prefill attention per chunk); a batch
must fit C tokens, P prefill/refill tokens and M KVs (the KVs held by requests not evicted,
including the chunk just processed).
"""

from __future__ import annotations

import heapq
import itertools


def batch_time(profile, work: list[tuple[int, int, bool]]) -> float:
    """``work``: (chunk c, cached m before it, is_decode) per request processing tokens."""
    if not work:
        return 0.0
    t = profile.bias_ms + profile.per_token_ms * sum(c for c, _, _ in work)
    for c, m, decode in work:
        if decode:
            t += profile.decode_kv_ms * m
        else:
            t += profile.prefill_attention_ms * (c * c + 2 * m * c)
            t += profile.per_prefill_request_ms
    return t


class BudgetExceeded(Exception):
    """The search settled more states than it was allowed."""


def optimum(profile, requests: list[tuple[int, int]], M: int, C: int, P: int,
            max_states: int | None = None) -> float:
    """Least total latency (end of the last batch) of ``requests`` = [(I, O), ...]; raises
    ValueError when no schedule fits M, BudgetExceeded after ``max_states`` settled states."""
    start = tuple((i, 0) for i, _ in requests)
    goal = tuple((i + o, 0) for i, o in requests)
    best = {start: 0.0}
    heap = [(0.0, start)]
    settled = 0
    while heap:
        cost, state = heapq.heappop(heap)
        if state == goal:
            return cost
        if cost > best.get(state, float("inf")):
            continue
        settled += 1
        if max_states is not None and settled > max_states:
            raise BudgetExceeded
        options = []
        for (S, m), (I, O) in zip(state, requests, strict=True):
            if S == I + O:
                options.append([("idle", 0)])
                continue
            opts = [("idle", 0)] + [("run", c) for c in range(1, S - m + 1)]
            if m > 0:
                opts.append(("evict", 0))
            options.append(opts)
        for choice in itertools.product(*options):
            if all(a == "idle" for a, _ in choice):
                continue
            tokens = prefill = held = 0
            work, nxt = [], []
            for (a, c), (S, m), (I, O) in zip(choice, state, requests, strict=True):
                if a == "evict":
                    nxt.append((S, 0))
                    continue
                held += m + c
                if a == "idle":
                    nxt.append((S, m))
                    continue
                decode = c == 1 and S - m == 1 and S >= I + 1
                tokens += c
                prefill += 0 if decode else c
                work.append((c, m, decode))
                if c == S - m:                      # everything cached: a token is generated
                    S2 = S + 1
                    nxt.append((S2, 0) if S2 == I + O else (S2, m + c))
                else:
                    nxt.append((S, m + c))
            if not work or tokens > C or prefill > P or held > M:
                continue
            state2 = tuple(nxt)
            cost2 = cost + batch_time(profile, work)
            if cost2 < best.get(state2, float("inf")) - 1e-12:
                best[state2] = cost2
                heapq.heappush(heap, (cost2, state2))
    raise ValueError("no schedule fits M")


def serial_total(profile, requests: list[tuple[int, int, float]], M: int, C: int,
                 P: int) -> float | None:
    """End of a schedule that runs the requests ((I, O, arrival)) one at a time in arrival
    order: the prompt in chunks of at most min(C, P) tokens, then O − 1 decodes; None when a
    request alone exceeds M (it holds I + O − 1 KVs at the end)."""
    t = 0.0
    step = min(C, P)
    for I, O, arrival in sorted(requests, key=lambda r: r[2]):
        if I + O - 1 > M or step < 1:
            return None
        t = max(t, arrival)
        m = 0
        while m < I:
            c = min(step, I - m)
            t += batch_time(profile, [(c, m, False)])
            m += c
        for _ in range(O - 1):
            t += batch_time(profile, [(1, m, True)])
            m += 1
    return t
