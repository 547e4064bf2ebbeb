"""A schedule for the attainment bound (``llmopt.problems.infermax.attainment``) by list
scheduling over priority orders: a fast rollout builds the batches from an order of the requests
and a few knobs, and simulated annealing over orders and knobs keeps the schedule meeting the
most SLOs.

Why. The model over a dozen requests has N ≈ 50 batches, and CP-SAT often finds no schedule
meeting every SLO within seconds even where one exists (seen: none in 150 s with 2 workers on
instance 2 of bench/attainment_bound.py, where one exists); the replay policies each follow one
fixed rule. A rollout of 12 requests takes about a millisecond, so a few seconds try thousands
of schedules. It is a heuristic for the schedule, not a bound: what it finds is replayed and
counted by the caller (a rollout never counts as met a request its replay misses: tested).

Rollout (``rollout``, ``Knobs``). The clock, the batch times (⌊cost / div⌋ per batch, cost in
fine units) and the thresholds are the model's (``attainment_data.Data``). At each batch, of the
requests that have arrived:

- a request whose obligations are complete (its first token, when it has no finish obligation)
  or that can no longer meet them (alone from now on it would be late) is dropped: its KVs are
  evicted and it is served after the search's batches (``attainment._extend``);
- every decoding request decodes (in the order, within C, M and J), except a ``lazy`` one with
  time to spare when the batch prefills;
- then prompts take chunks, in the order, up to ``budget`` tokens and ``prefills`` chunks per
  batch and a request's ``caps``, within C, M (what every request holds plus the batch's new
  KVs) and J; a prompt ``hold`` waits until a given later arrival; with ``guard``, a chunk
  after the batch's first shrinks so that the batch still ends by the deadline of every
  request it completes;
- the batch starts when the previous one ends or, if later, when its last request arrives (a
  plan's rule: a hold waits only when a request arriving then shares the batch), and lasts its
  InferMax time.

It never evicts a request it keeps, so it never refills.

Search (``search_plan``). Every start order (earliest first-token deadline, earliest final
deadline, arrival, shortest prompt) with every budget, chunk count and guard; then rounds of
simulated annealing from the best, each with its own random seed, on met·worth − lateness, over
moves that swap or move requests in the order, change a knob, cap a request's chunks, make a
decoder lazy, or hold prompts (one, or every request whose first-token window holds a later
arrival, until it: a gathering).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from llmopt.errors import InternalError
from llmopt.problems.infermax.attainment_data import Data, Plan

BUDGETS = (512, 256, 128, 64, 32)   # prefill tokens per batch, at most (C caps them too)
PREFILLS = (1, 2, 3, 1000)          # prefill chunks per batch, at most
ROUND_S = 0.75                      # one round of annealing, at most (each from the start)


@dataclass(frozen=True)
class Knobs:
    """A rollout's choices: the priority order of the requests (first: served first), the
    prefill tokens and the prefill chunks a batch takes at most."""

    order: tuple[int, ...]
    budget: int
    prefills: int
    hold: tuple[tuple[int, int], ...] = ()   # (request, clock): its prompt starts no sooner
    caps: tuple[tuple[int, int], ...] = ()   # (request, tokens): its chunks are no larger
    lazy: frozenset[int] = frozenset()       # requests whose decodes wait while they can
    guard: bool = False                      # chunks keep the batch within its deadlines


@dataclass(frozen=True)
class Outcome:
    """A rollout's result: how many of its requests meet their obligations, how late the others
    are in total (clock units, at the moment each is dropped or finishes), and its batches."""

    late: int
    plan: Plan
    which: frozenset[int] = frozenset()     # the requests meeting theirs

    @property
    def met(self) -> int:
        return len(self.which)

    def key(self) -> tuple[int, int]:
        return (self.met, -self.late)


def rollout(data: Data, chosen: list[int], knobs: Knobs) -> Outcome:
    """The batches ``knobs`` build for ``chosen`` (see the module doc)."""
    if not chosen:
        return Outcome(0, [])
    run = _Run(data, knobs, chosen)
    step = data.min_batch()
    live = set(chosen)
    rank = {i: r for r, i in enumerate(knobs.order)}
    t = min(data.T[i] for i in chosen)   # the time of the decision
    plan: Plan = []
    late = 0
    evict: list[str] = []
    while live:
        arrived = [i for i in live if data.T[i] <= t]
        for i in arrived:
            over = _overdue(data, i, max(run.ended, data.T[i]), run.S[i], run.m[i],
                            run.first.get(i))
            if over is None:
                continue
            late += over
            live.discard(i)
            if run.m[i]:
                evict.append(data.ids[i])
                run.m[i] = 0
        ready = sorted((i for i in arrived if i in live and (
            run.release[i] <= t or run.m[i] or run.S[i] > data.I[i])), key=rank.__getitem__)
        if not ready:
            if live:   # nothing may start before the next arrival or release
                t = min(run.release[i] for i in live)
            continue
        decode, prefill, cost = run.batch(ready, t, set())
        skip = run.lazy(ready, t, 2 * step)
        if skip and prefill:   # lazy decoders wait only for a batch that prefills
            decode, prefill, cost = run.batch(ready, t, skip)
        if not decode and not prefill:
            # memory is held by prompts that cannot go on: the lowest in the order gives way
            holding = [i for i in ready if run.m[i]]
            if not holding:
                raise InternalError("the list scheduling's rollout formed an empty batch with "
                                    "no request holding KVs")
            i = max(holding, key=rank.__getitem__)
            live.discard(i)
            late += step
            evict.append(data.ids[i])
            run.m[i] = 0
            continue
        t = run.advance(decode, prefill, cost)
        live -= run.finish.keys()
        plan.append({"evict": evict, "prefill": {data.ids[i]: c for i, c in prefill.items()},
                     "decode": [data.ids[i] for i in decode]})
        evict = []
    if evict:
        plan.append({"evict": evict, "prefill": {}, "decode": []})
    which = set()
    for i in chosen:
        miss = _miss(data, i, run.first.get(i), run.finish.get(i))
        if miss == 0:
            which.add(i)
        elif miss is not None:
            late += miss
    return Outcome(late, plan, frozenset(which))


class _Run:
    """A rollout's state: per request its tokens S (prompt and generated), its cached KVs m,
    the ends of the batches of its first and last tokens, when its prompt may start; and the
    end of the last batch."""

    def __init__(self, data: Data, knobs: Knobs, chosen: list[int]) -> None:
        self.data, self.knobs = data, knobs
        self.S = {i: int(data.I[i]) for i in chosen}
        self.m = dict.fromkeys(chosen, 0)
        self.first: dict[int, int] = {}
        self.finish: dict[int, int] = {}
        self.release = {i: data.T[i] for i in chosen}
        self.release.update(knobs.hold)
        self.cap = dict(knobs.caps)
        self.ended = min(data.T[i] for i in chosen)

    def batch(self, ready: list[int], t: int, skip: set[int]
              ) -> tuple[list[int], dict[int, int], int]:
        """The next batch (decodes, prefill chunks, cost in fine units) of the ``ready``
        requests in the order: every decode but those of ``skip``, then prompt chunks within
        the knobs, C, M (what every request holds plus the batch's new KVs) and J; with
        ``guard``, a chunk after the batch's first shrinks so that the batch still ends by the
        deadline of every request it completes (first token, or last)."""
        data, S, m = self.data, self.S, self.m
        C, M, J = data.C, data.M, data.J
        held = sum(m.values())
        holders = sum(1 for v in m.values() if v)
        tokens, cost = 0, data.coef["bias_ms"]
        start = self.ended
        due: int | None = None     # the earliest deadline of what the batch completes
        decode: list[int] = []
        prefill: dict[int, int] = {}
        for i in ready:
            if i not in skip and S[i] > data.I[i] and S[i] - m[i] == 1 and tokens < C \
                    and held < M:
                decode.append(i)
                tokens += 1
                held += 1
                cost += data.decode_cost(m[i])
                start = max(start, data.T[i])
                if S[i] + 1 == data.I[i] + data.O[i]:
                    due = _earliest(due, _finish_deadlines(data, i, self.first[i]))
        budget = self.knobs.budget
        for i in ready:
            if len(prefill) >= self.knobs.prefills or tokens >= C or budget <= 0:
                break
            if S[i] > data.I[i] or (m[i] == 0 and holders >= J) or self.release[i] > t:
                continue
            c = min(S[i] - m[i], C - tokens, budget, M - held, self.cap.get(i, C))
            at = max(start, data.T[i])
            if self.knobs.guard and (prefill or decode):
                while c >= 1:
                    own = _earliest(due, self._completes(i, c))
                    if own is None or at + (cost + data.chunk_cost(c, m[i])) // data.div \
                            <= own:
                        break
                    c -= max(1, c // 8)
            if c < 1:
                continue
            prefill[i] = c
            tokens += c
            budget -= c
            held += c
            holders += m[i] == 0
            cost += data.chunk_cost(c, m[i])
            start = at
            if c == S[i] - m[i]:
                due = _earliest(due, self._completes(i, c))
        return decode, prefill, cost

    def _completes(self, i: int, c: int) -> list[int]:
        """The deadlines a chunk of c tokens of request i's prompt would have to meet: its
        first token's, and its E2E target's when that token is its last."""
        data = self.data
        if c < self.S[i] - self.m[i]:
            return []
        ttft = data.ttft[i]
        out = [data.T[i] + ttft] if ttft is not None else []
        e2e = data.e2e[i]
        return out + ([data.T[i] + e2e] if e2e is not None and data.O[i] == 1 else [])

    def lazy(self, ready: list[int], t: int, step: int) -> set[int]:
        """The decoding requests of the knobs' ``lazy`` that may skip this batch: those whose
        remaining decodes, at ``step`` each, still end by their deadline a batch later."""
        data, S, m = self.data, self.S, self.m
        out = set()
        for i in self.knobs.lazy & set(ready):
            if S[i] == data.I[i] or S[i] - m[i] != 1:
                continue
            left = int(data.I[i] + data.O[i]) - S[i]
            ends = _finish_deadlines(data, i, self.first[i])
            if ends and t + (left + 1) * step <= min(ends):
                out.add(i)
        return out

    def advance(self, decode: list[int], prefill: dict[int, int], cost: int) -> int:
        """Run the batch; the end of it. A plan's batch starts when the previous one ends or
        its last request arrives: a hold waits only when a request arriving then is in it."""
        data, S, m = self.data, self.S, self.m
        self.ended = max([self.ended, *(data.T[i] for i in (*decode, *prefill))]) \
            + cost // data.div
        for i in decode:
            m[i] += 1
            S[i] += 1
        for i, c in prefill.items():
            m[i] += c
            if m[i] == S[i]:
                S[i] += 1
        for i in (*decode, *prefill):
            if S[i] == data.I[i] + 1 and i not in self.first:
                self.first[i] = self.ended
            if S[i] == data.I[i] + data.O[i]:
                self.finish[i] = self.ended
                m[i] = 0
        return self.ended


def _earliest(due: int | None, deadlines: list[int]) -> int | None:
    return min([*deadlines, *([] if due is None else [due])], default=None)


def _finish_deadlines(data: Data, i: int, first: int) -> list[int]:
    """The latest ends (clock) of request i's last token: its E2E target, its TPOT target's
    from a first token at ``first``."""
    e2e, tpot = data.e2e[i], data.tpot[i]
    return ([data.T[i] + e2e] if e2e is not None else []) + (
        [first + tpot] if tpot is not None else [])


def _miss(data: Data, i: int, first: int | None, finish: int | None) -> int | None:
    """How late request i is at its worst obligation (0: met), None when it did not reach
    them (dropped: counted when dropped)."""
    worst = 0
    ttft = data.ttft[i]
    if data.needs_first(i):
        if first is None:
            return None
        if ttft is not None:
            worst = max(worst, first - data.T[i] - ttft)
    if data.needs_finish(i):
        if finish is None:
            return None
        worst = max([worst, *(finish - d for d in _finish_deadlines(
            data, i, finish if first is None else first))])
    return worst


def _overdue(data: Data, i: int, t: int, S: int, m: int, first: int | None) -> int | None:
    """None while request i is kept when its next batch starts at t at the earliest; else how
    late it will be at the least (0 when its obligations are complete): its uncached prompt
    alone in ⌈rem / C⌉ batches, then a batch of at least bias + per_token per later token."""
    if first is not None and not data.needs_finish(i):
        return 0
    ttft = data.ttft[i]
    if first is None:
        rem = S - m
        chunks = -(-rem // data.C)
        start = t + (chunks * data.coef["bias_ms"] + data.chunk_cost(rem, m)) // data.div
        if ttft is not None and start - data.T[i] > ttft:
            return start - data.T[i] - ttft
        left = int(data.O[i]) - 1
    else:
        start, left = t, int(data.I[i] + data.O[i]) - S
    if not data.needs_finish(i):
        return None
    finish = start + left * data.min_batch()
    over = max([0, *(finish - d for d in _finish_deadlines(
        data, i, start if first is None else first))])
    return over if over > 0 else None


def _start_orders(data: Data, chosen: list[int]) -> list[tuple[int, ...]]:
    """Orders to start from: earliest first-token deadline, earliest final deadline, arrival,
    shortest prompt (ties by arrival)."""
    def first_deadline(i: int) -> int:
        ttft = data.ttft[i]
        return data.T[i] + ttft if ttft is not None else (data.deadline(i) or 0)

    keys: list[Callable[[int], int]] = [first_deadline, lambda i: data.deadline(i) or 0,
                                        lambda i: data.T[i], lambda i: int(data.I[i])]
    def ranked(key: Callable[[int], int]) -> tuple[int, ...]:
        return tuple(sorted(chosen, key=lambda i: (key(i), data.T[i], i)))

    return list(dict.fromkeys(ranked(key) for key in keys))


def _neighbour(data: Data, knobs: Knobs, rng: random.Random) -> Knobs:
    """A move: another budget or chunk count, a swap or a move in the order, or a request's
    prompt held until a later arrival within its first-token window (or released again)."""
    move = rng.random()
    order = list(knobs.order)
    if move < 0.1:
        budget = rng.choice(BUDGETS) if rng.random() < 0.5 else rng.randint(1, data.C)
        return replace(knobs, budget=min(budget, data.C))
    if move < 0.17:
        return replace(knobs, prefills=rng.choice(PREFILLS))
    if move < 0.2:
        return replace(knobs, guard=not knobs.guard)
    if move < 0.3:
        i = rng.choice(order)
        caps = dict(knobs.caps)
        if i in caps and rng.random() < 0.3:
            caps.pop(i)
        else:
            caps[i] = rng.randint(1, int(data.I[i]))
        return replace(knobs, caps=tuple(sorted(caps.items())))
    if move < 0.4:
        i = rng.choice(order)
        return replace(knobs, lazy=knobs.lazy ^ {i})
    if move < 0.55:
        return replace(knobs, hold=_hold_move(data, knobs, rng))
    a, b = rng.sample(range(len(order)), 2) if len(order) > 1 else (0, 0)
    if move < 0.75:
        order[a], order[b] = order[b], order[a]
    else:
        order.insert(b, order.pop(a))
    return replace(knobs, order=tuple(order))


def _hold_move(data: Data, knobs: Knobs, rng: random.Random) -> tuple[tuple[int, int], ...]:
    """The holds with one request's prompt held until a later arrival within its first-token
    window (or released again), or, half the time, a gathering: every request arriving before
    some request j, with j's arrival in its first-token window, held until j arrives (or all
    those holds released again)."""
    hold = dict(knobs.hold)

    def window(i: int) -> int:
        ttft = data.ttft[i]
        return data.T[i] + (ttft if ttft is not None else 0)

    if rng.random() < 0.5:
        j = rng.choice(knobs.order)
        gather = [i for i in knobs.order if data.T[i] < data.T[j] <= window(i)]
        if gather and all(hold.get(i) == data.T[j] for i in gather):
            for i in gather:
                hold.pop(i)
        else:
            hold.update(dict.fromkeys(gather, data.T[j]))
    else:
        i = rng.choice(knobs.order)
        later = [data.T[j] for j in knobs.order if data.T[i] < data.T[j] <= window(i)]
        if i in hold or not later:
            hold.pop(i, None)
        else:
            hold[i] = rng.choice(later)
    return tuple(sorted(hold.items()))


def search_plan(data: Data, chosen: list[int], time_limit_s: float, enough: int | None = None,
                seed: int = 0) -> Outcome:
    """The best rollout found within ``time_limit_s``: the start orders with every budget,
    chunk count and guard (the first rollout always runs, the others while time is left), then
    rounds of simulated annealing (``_anneal``, each with its own random seed) from the best of
    those; it stops early once ``enough`` requests (default: all) are met. On an inexact clock
    the rollouts read the targets without the model's rounding slack (``Data.slack``), so that
    what they count as met is met when replayed but for a few clock units of rounding."""
    if not chosen:
        return Outcome(0, [])
    strict = _without_slack(data)
    until = time.perf_counter() + time_limit_s
    goal = len(chosen) if enough is None else enough
    grid = [Knobs(order, min(budget, data.C), prefills, guard=guard)
            for order in _start_orders(strict, chosen) for budget in BUDGETS
            for prefills in PREFILLS for guard in (False, True)]
    best = (grid[0], rollout(strict, chosen, grid[0]))
    for knobs in grid[1:]:
        if best[1].met >= goal or time.perf_counter() >= until:
            break
        out = rollout(strict, chosen, knobs)
        if out.key() > best[1].key():
            best = (knobs, out)
    start = best
    round_ = 0
    while best[1].met < goal and time.perf_counter() < until:
        stop = min(until, time.perf_counter() + ROUND_S)
        found = _anneal(strict, chosen, start, stop, goal, random.Random(seed + round_))
        if found[1].key() > best[1].key():
            best = found
        round_ += 1
    return best[1]


def _without_slack(data: Data) -> Data:
    """``data`` with every threshold less the rounding slack the model adds to it."""
    if not data.slack:
        return data

    def less(values: list[int | None]) -> list[int | None]:
        return [None if v is None else v - data.slack for v in values]

    return replace(data, ttft=less(data.ttft), tpot=less(data.tpot), e2e=less(data.e2e),
                   slack=0)


def _anneal(data: Data, chosen: list[int], start: tuple[Knobs, Outcome], until: float,
            goal: int, rng: random.Random) -> tuple[Knobs, Outcome]:
    """Simulated annealing on met·worth − late (clock units) from ``start`` until ``until``:
    a move worse by d is kept with probability exp(−d / heat), the heat falling from a
    batch's time a thousandfold."""
    batch = data.min_batch()
    worth = 10 * batch
    best = current = start
    began = time.perf_counter()

    def score(out: Outcome) -> int:
        return out.met * worth - out.late

    while best[1].met < goal and time.perf_counter() < until:
        knobs = _neighbour(data, current[0], rng)
        out = rollout(data, chosen, knobs)
        spent = (time.perf_counter() - began) / max(until - began, 1e-9)
        heat = batch * 1000.0 ** -spent
        d = score(out) - score(current[1])
        if d >= 0 or rng.random() < math.exp(d / heat):
            current = (knobs, out)
            if out.key() > best[1].key():
                best = current
    return best


__all__ = ["Knobs", "Outcome", "rollout", "search_plan"]
