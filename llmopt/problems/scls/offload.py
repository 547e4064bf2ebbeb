"""Balanced-load offloading and the adaptive schedule interval of SCLS (Cheng et al. 2024,
sections 4.5–4.6), and the exact makespan assignment of the same batches for comparison.

Max-min offloading (eq 11): the batches of a period go out one by one, the one of longest
estimated serving time first, each to the worker of least load, whose load then grows by the
batch's T_serve(N, L_i, S)::

    T_load(w) ← T_load(w) + T_serve(N, L_i, S)                                        (11)

and when a worker finishes a batch its load drops by that batch's estimate (section 4.5, so that
estimation errors do not accumulate). After each offloading the interval to the next period is::

    T ← max(λ · min_w T_load(w), Γ)                                                   (12)

with Γ > 0 the minimal interval and 0 < λ < 1.

From empty workers max-min is LPT, so its makespan is within 4/3 − 1/(3m) of the optimum
(Graham 1969); :func:`compare_with_exact` measures the real gap on a period's batches with
llmopt's P||Cmax solver (:mod:`llmopt.problems.pang.binpacking`, eqs 26–30 of Pang et al.: the
same problem, batches for requests and workers for clients), on integer loads of
``unit_ms`` each.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmopt.errors import OptionError
from llmopt.problems.pang import pcmax_bounds
from llmopt.problems.pang.binpacking import BinPacking, reproducible_assignment
from llmopt.problems.scls.partition import Pool, dp_batches

DEFAULT_GAMMA_MS = 6000.0   # Γ for huggingface-transformers workers (section 5.1); 3 s for DS
DEFAULT_LAMBDA = 0.5        # λ (section 5.1)


def check_interval_parameters(gamma_ms: object, lam: object) -> tuple[float, float]:
    """Γ > 0 (ms) and 0 < λ < 1 (eq 12), finite; a user error otherwise."""
    for name, value in (("gamma_ms", gamma_ms), ("lambda", lam)):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise OptionError("must be a finite number", field=name, value=value,
                              has_value=True)
    assert isinstance(gamma_ms, int | float) and isinstance(lam, int | float)
    if gamma_ms <= 0:
        raise OptionError("the minimal interval Γ must be positive (eq 12)", field="gamma_ms",
                          value=gamma_ms)
    if not 0 < lam < 1:
        raise OptionError("λ must lie strictly between 0 and 1 (eq 12)", field="lambda",
                          value=lam)
    return float(gamma_ms), float(lam)


def adaptive_interval_ms(loads: Sequence[float], lam: float = DEFAULT_LAMBDA,
                         gamma_ms: float = DEFAULT_GAMMA_MS) -> float:
    """Eq 12: T = max(λ · min_w T_load(w), Γ)."""
    gamma_ms, lam = check_interval_parameters(gamma_ms, lam)
    return max(lam * min(loads), gamma_ms)


def max_min_assignment(serve_ms: Sequence[float], workers: int,
                       loads: Sequence[float] | None = None) -> tuple[list[int], list[float]]:
    """Eq 11 for one period: the worker of each batch (in the order given) and the loads
    after. Batches go longest first (ties: the earlier given); each to the least-loaded worker
    (ties: the lowest index)."""
    if workers < 1:
        raise OptionError("at least one worker is needed", field="workers", value=workers)
    current = [0.0] * workers if loads is None else [float(v) for v in loads]
    heap = [(load, w) for w, load in enumerate(current)]
    heapq.heapify(heap)
    assign = [0] * len(serve_ms)
    for b in sorted(range(len(serve_ms)), key=lambda k: (-serve_ms[k], k)):
        load, w = heapq.heappop(heap)
        assign[b] = w
        current[w] = load + serve_ms[b]                      # eq 11
        heapq.heappush(heap, (current[w], w))
    return assign, current


class MaxMinOffloader:
    """The offloader of section 4.5 with its per-worker loads (ms): :meth:`offload` adds each
    batch's estimate (eq 11), :meth:`served` subtracts it when the worker finishes the batch,
    and :meth:`interval_ms` gives the next schedule interval (eq 12)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise OptionError("at least one worker is needed", field="workers", value=workers)
        self.loads = [0.0] * workers

    def offload(self, serve_ms: Sequence[float]) -> list[int]:
        """Eq 11: the worker of each batch (in the order given); the loads are updated."""
        assign, self.loads = max_min_assignment(serve_ms, len(self.loads), self.loads)
        return assign

    def served(self, worker: int, serve_ms: float) -> None:
        """The worker finished a batch estimated at ``serve_ms``: its load drops by that
        (never below 0, against rounding)."""
        self.loads[worker] = max(self.loads[worker] - serve_ms, 0.0)

    def interval_ms(self, lam: float = DEFAULT_LAMBDA,
                    gamma_ms: float = DEFAULT_GAMMA_MS) -> float:
        """Eq 12 from the current loads."""
        return adaptive_interval_ms(self.loads, lam, gamma_ms)


@dataclass(frozen=True)
class MakespanComparison:
    """Max-min against the best assignment of the same batches to empty workers, on integer
    loads of ``unit_ms``: makespans in ms; ``optimum_ms`` is None when not proven, and then
    ``lower_bound_ms`` (always a proven bound) is what the gap is measured against."""

    batches: int
    workers: int
    unit_ms: float
    maxmin_ms: float
    best_ms: float          # the best assignment found (optimal when ``proven``)
    lower_bound_ms: float
    proven: bool

    @property
    def optimum_ms(self) -> float | None:
        return self.best_ms if self.proven else None

    @property
    def gap(self) -> float:
        """(max-min − optimum) / optimum, or against the lower bound when not proven (an
        upper bound on the true gap)."""
        ref = self.best_ms if self.proven else self.lower_bound_ms
        return (self.maxmin_ms - ref) / ref if ref > 0 else 0.0


def compare_with_exact(serve_ms: Sequence[float], workers: int, unit_ms: float = 1.0
                       ) -> MakespanComparison:
    """Max-min (eq 11, from empty workers) against the exact P||Cmax assignment of the same
    batches by :func:`llmopt.problems.pang.binpacking.reproducible_assignment` (LPT, local
    moves, bin completion within a fixed budget of steps: the same answer on every machine)."""
    if workers < 1:
        raise OptionError("at least one worker is needed", field="workers", value=workers)
    weights = np.array([max(round(t / unit_ms), 0) for t in serve_ms], dtype=np.int64)
    bp = BinPacking(tuple(f"b{k}" for k in range(len(weights))), weights, workers, unit_ms)
    greedy, _ = max_min_assignment([float(w) for w in weights], workers)
    maxmin = int(bp.loads(np.array(greedy, dtype=np.int64)).max()) if len(weights) else 0
    if not len(weights):
        return MakespanComparison(0, workers, unit_ms, 0.0, 0.0, 0.0, True)
    assign, proven = reproducible_assignment(bp)
    best = int(bp.loads(assign).max())
    lower, _, _ = pcmax_bounds.best_bound(pcmax_bounds.sorted_weights(weights), workers,
                                          pcmax_bounds.BOUNDS, stop_at=best)
    lower = best if proven else min(lower, best)
    return MakespanComparison(len(weights), workers, unit_ms, maxmin * unit_ms, best * unit_ms,
                              lower * unit_ms, proven)


@dataclass(frozen=True)
class PeriodPlan:
    """One scheduling period of SCLS (Fig. 7): the pool's batches (pool indices, by Algorithm
    1), the worker of each (eq 11), their estimated serving times (eq 1, ms), the workers' loads
    after offloading, and the interval to the next period (eq 12, ms)."""

    batches: list[list[int]]
    workers: list[int]
    serve_ms: list[float]
    loads_ms: list[float]
    next_interval_ms: float


def plan_period(pool: Pool, offloader: MaxMinOffloader, lam: float = DEFAULT_LAMBDA,
                gamma_ms: float = DEFAULT_GAMMA_MS) -> PeriodPlan:
    """The decisions of one period: batch the pool (Algorithm 1), offload the batches longest
    first to the least-loaded workers (eq 11, updating ``offloader``'s loads), and set the next
    interval from the loads (eq 12). Serving the batches, and :meth:`MaxMinOffloader.served`
    when each ends, is the caller's."""
    gamma_ms, lam = check_interval_parameters(gamma_ms, lam)
    batches = dp_batches(pool)
    times = [pool.batch_ms(b) for b in batches]
    workers = offloader.offload(times)
    return PeriodPlan(batches, workers, times, list(offloader.loads),
                      offloader.interval_ms(lam, gamma_ms))


__all__ = ["DEFAULT_GAMMA_MS", "DEFAULT_LAMBDA", "MakespanComparison", "MaxMinOffloader",
           "PeriodPlan", "adaptive_interval_ms", "check_interval_parameters",
           "compare_with_exact", "max_min_assignment", "plan_period"]
