"""Simulated-annealing priority mapping: Algorithm 1 of Huang et al. 2025 (section 4.3).

A solution is a priority sequence J_prio and batch sizes b_0..b_{M−1} (eq 10). As in the paper:

- two starting solutions, both with every batch at the maximum size: the input order, and the
  order of increasing predicted E2E latency (line 3; the prediction is eq 17 at the maximum
  batch size, no waiting). If the latter meets every SLO the search stops there (lines 6–10);
  else it starts from the one of higher G (lines 12–15);
- at each temperature ``iters`` moves (lines 17–40), each one of three drawn uniformly (line 20):
  0 squeeze a random request into the previous batch (if it is not in the first batch and the
  previous batch is not full), 1 delay it into the next batch (if that is not full; from the
  last batch, into a new one), 2 swap two random requests of the sequence. A move that does not
  apply to the drawn request changes nothing;
- acceptance (lines 32–38): a better G always; a worse one with the Metropolis probability
  exp((G_new − G)/T), G in requests/s (``acceptance="metropolis"``, the default). Line 36 as
  printed (accept when exp(−(G_new − G)/T) < rand) never accepts a worse solution, since the
  left side is ≥ 1 then: ``acceptance="literal"`` does that (a strict hill climb);
- T starts at T0 and is multiplied by tau after each temperature until T < T_thres (lines
  41–43). The defaults are the paper's (section 5.1): T0 = 500, T_thres = 20, iter = 100,
  tau = 0.95, i.e. 63 temperatures, 6,300 moves.

Two things differ from the pseudo-code, both stated in the result: the counter k of line 18 is
reset at each temperature (as printed, "until k == iter" holds only once), and the best
solution seen is returned (Algorithm 1 returns the last accepted one, which can be worse than
the best with Metropolis acceptance).

Evaluation is incremental: the prefix of batches before the first one a move changes keeps its
start time, met count and latency sum (cached per batch), so a move costs the batches from
there on, each through the per-request tables of ``model`` (eqs 4, 8, 11, 14–17).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from dataclasses import dataclass

from llmopt.problems.slo_priority.model import (
    Batches,
    SloPriorityData,
    batches_from,
    evaluate,
    g_per_s,
    max_size_cut,
)

T0, T_THRES, ITERS, TAU = 500.0, 20.0, 100, 0.95
ACCEPTANCE = ("metropolis", "literal")


@dataclass(frozen=True)
class SaOutcome:
    batches: Batches
    n_met: int
    total_ms: float
    g_per_s: float
    start: str            # "latency-ordered" or "input order"
    early_stop: bool      # the latency-ordered start met every SLO (lines 6–10)
    moves: int
    accepted: int


class _State:
    """Order + sizes with per-batch prefix caches: for batch k its start, the met count and the
    latency sum of the batches before it, and its first position in the order."""

    def __init__(self, data: SloPriorityData, order: list[int], sizes: list[int]) -> None:
        self.exec_by_size = [[row[b] for row in data.exec_ms] for b in range(data.max_batch + 1)]
        self.slack_by_size = [[row[b] for row in data.slack_ms]
                              for b in range(data.max_batch + 1)]
        self.order, self.sizes = order, sizes
        self.pstart: list[float] = [0.0]
        self.pmet: list[int] = [0]
        self.ptotal: list[float] = [0.0]
        self.offset: list[int] = [0]
        met, total, record = self.run(order, sizes, 0)
        self.accept(order, sizes, 0, met, total, record)

    def run(self, order: list[int], sizes: list[int], a: int
            ) -> tuple[int, float, tuple[list[float], list[int], list[float], list[int]]]:
        """Eqs 4, 11 and 7 over batches a.. of (order, sizes), from the cached prefix."""
        ex_all, sl_all = self.exec_by_size, self.slack_by_size
        start, met, total, pos = self.pstart[a], self.pmet[a], self.ptotal[a], self.offset[a]
        ps: list[float] = []
        pm: list[int] = []
        pt: list[float] = []
        off: list[int] = []
        for k in range(a, len(sizes)):
            s = sizes[k]
            ps.append(start)
            pm.append(met)
            pt.append(total)
            off.append(pos)
            ex, sl = ex_all[s], sl_all[s]
            longest = 0.0
            for i in order[pos:pos + s]:
                e = ex[i]
                total += start + e
                if e > longest:
                    longest = e
                if start <= sl[i]:
                    met += 1
            start += longest
            pos += s
        return met, total, (ps, pm, pt, off)

    def accept(self, order: list[int], sizes: list[int], a: int, met: int, total: float,
               record: tuple[list[float], list[int], list[float], list[int]]) -> None:
        self.order, self.sizes = order, sizes
        self.pstart[a:], self.pmet[a:], self.ptotal[a:], self.offset[a:] = record
        self.n_met, self.total = met, total

    def batch_at(self, pos: int) -> int:
        """Batch index of sequence position ``pos``."""
        return bisect_right(self.offset, pos) - 1


def latency_order(data: SloPriorityData) -> list[int]:
    """Line 3: requests by increasing predicted E2E (eq 17 at the maximum batch size)."""
    B = data.max_batch
    return sorted(range(data.n), key=lambda i: (data.exec_ms[i][B], i))


def anneal(data: SloPriorityData, *, seed: int = 0, t0: float = T0, t_thres: float = T_THRES,
           iters: int = ITERS, tau: float = TAU, acceptance: str = "metropolis",
           reset_counter: bool = True) -> SaOutcome:
    """Algorithm 1 (see the module doc). Deterministic for a seed. ``reset_counter=False``
    keeps line 18's k across temperatures and ends the inner loop at k ≥ iter: ``iters``
    moves at T0, then one per temperature (162 moves with the defaults)."""
    if acceptance not in ACCEPTANCE:
        raise ValueError(f"acceptance must be one of {ACCEPTANCE}")
    n, B = data.n, data.max_batch
    rnd = random.Random(seed).random
    sizes0 = max_size_cut(n, B)
    by_latency = _State(data, latency_order(data), list(sizes0))
    if by_latency.n_met == n:                                          # lines 6–10
        ev = evaluate(data, batches_from(by_latency.order, by_latency.sizes))
        return SaOutcome(ev.batches, ev.n_met, ev.total_ms, ev.g_per_s, "latency-ordered",
                         True, 0, 0)
    as_given = _State(data, list(range(n)), list(sizes0))
    st, start = by_latency, "latency-ordered"
    if g_per_s(by_latency.n_met, by_latency.total) < g_per_s(as_given.n_met, as_given.total):
        st, start = as_given, "input order"                            # lines 12–15
    f = g_per_s(st.n_met, st.total)
    best = (f, st.n_met, st.total, list(st.order), list(st.sizes))
    moves = accepted = 0
    metropolis = acceptance == "metropolis"
    temp = t0
    while True:
        for _ in range(iters if reset_counter or moves == 0 else 1):   # lines 17–40
            moves += 1
            op = int(rnd() * 3)                                        # line 20
            order, sizes = st.order, st.sizes
            p = int(rnd() * n)
            k = st.batch_at(p)
            if op == 0:                                                # squeezeLastIter
                if k == 0 or sizes[k - 1] >= B:
                    continue
                new_order = order[:]
                new_order.insert(st.offset[k], new_order.pop(p))
                new_sizes = sizes[:]
                new_sizes[k - 1] += 1
                new_sizes[k] -= 1
                if new_sizes[k] == 0:
                    del new_sizes[k]
                a = k - 1
            elif op == 1:                                              # delayNextIter
                last = k == len(sizes) - 1
                if (last and sizes[k] == 1) or (not last and sizes[k + 1] >= B):
                    continue
                new_order = order[:]
                end = st.offset[k] + sizes[k]          # first position of batch k + 1
                new_order.insert(end - 1, new_order.pop(p))
                new_sizes = sizes[:]
                new_sizes[k] -= 1
                if last:
                    new_sizes.append(1)
                else:
                    new_sizes[k + 1] += 1
                if new_sizes[k] == 0:
                    del new_sizes[k]
                a = k
            else:                                                      # randSwapping
                q = int(rnd() * n)
                kq = st.batch_at(q)
                if kq == k:
                    continue                   # same batch: the same solution
                new_order = order[:]
                new_order[p], new_order[q] = new_order[q], new_order[p]
                new_sizes = sizes
                a = min(k, kq)
            met, total, record = st.run(new_order, new_sizes, a)
            f_new = 0.0 if met == 0 else met / (total / 1000.0)               # eq 2
            if f_new > f or (metropolis and rnd() < math.exp((f_new - f) / temp)):
                st.accept(new_order, list(new_sizes), a, met, total, record)
                f = f_new
                accepted += 1
                if f > best[0]:
                    best = (f, met, total, list(new_order), list(new_sizes))
        temp *= tau                                                     # line 41
        if temp < t_thres:                                              # line 43
            break
    plan = batches_from(best[3], best[4])
    ev = evaluate(data, plan)  # the canonical sums (the incremental ones differ by rounding)
    return SaOutcome(plan, ev.n_met, ev.total_ms, ev.g_per_s, start, False, moves, accepted)
