"""The goodput ceiling: the largest arrival rate at which the attainment ceiling still allows an
attainment level, so that no schedule reaches the level at a higher rate.

``goodput_ceiling(make_instance, level, low, high)`` bisects over rates (geometric midpoints, as
the sweep's search does) on the instances ``make_instance(rate)`` gives, the same arrival draws
as a sweep's cells when it builds them the same way.

Why a bisection is sound here. A sweep's rate search (``rate_per_s`` of a generator or of a
trace's arrivals, or ``rate_scale``) draws the same gaps at every rate and divides them by the
rate: the instance at rate r' > r is the one at r with every arrival a_i multiplied by σ = r/r'
< 1 (compressed towards the first), lengths and targets unchanged (``check_scaling`` verifies
it on the probes, and the answer says whether it held). The bisection uses ``monotone_max`` of
the ceiling: the alone bound (no arrival in it) and the floor of the whole capacity LP, which
cannot grow when arrivals are compressed. Proof: fix how each request's routed work splits
between its prompt window [a_i, a_i + α_i) and its whole window [a_i, a_i + β_i); both start at
the arrival and their lengths do not depend on the rate, and the amounts fit iff Horn's
condition holds (for every interval [x, y], the amounts whose windows lie in it total at most
R·(y − x); the flow has no other constraint). Let them fail it in the spread instance
(arrivals a_i) on [x, y] with windows S, and let j have the earliest arrival in S and i the
latest window end. Compressed (arrivals σa_i), S lies in [σa_j, σa_i + δ_i], of length
σ(a_i − a_j) + δ_i ≤ (a_i − a_j) + δ_i ≤ y − x: the compressed instance fails too. So every
amount vector routable compressed is routable spread, and the LP's optimum does not grow with
the rate. Hence if the ceiling forbids the level at a probed rate, it forbids it at every
higher rate, and the goodput ceiling is the highest probed rate allowing the level (the true
threshold of the relaxation lies between it and the lowest probed rate forbidding it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from llmopt.data.instance import Instance
from llmopt.errors import OptionError
from llmopt.problems.slo_ceiling.ceiling import attainment_ceiling

LEVEL_TOLERANCE = 1e-6   # attainment is compared rounded to 6 decimals by the sweep


@dataclass(frozen=True)
class GoodputCeiling:
    """``rate``: the largest probed rate at which the ceiling allows ``level`` (None: not even
    at ``low``); ``forbidden_at``: the lowest probed rate at which it does not (None: it allows
    the level up to ``high``). ``scaled``: every probe was the same draws compressed (the
    bisection is then sound, module doc)."""

    rate: float | None
    forbidden_at: float | None
    level: float
    scaled: bool
    probes: tuple[tuple[float, int, int], ...] = field(default_factory=tuple)  # rate, max, n
    runtime_s: float = 0.0

    def sentence(self, unit: str = "requests/s") -> str:
        if self.rate is None:
            return (f"no schedule reaches attainment {self.level:g} at any rate from "
                    f"{self.forbidden_at:g} {unit}")
        if self.forbidden_at is None:
            return (f"the ceiling allows attainment {self.level:g} up to {self.rate:g} {unit} "
                    "(the top of the range)")
        return (f"no schedule reaches attainment {self.level:g} above {self.forbidden_at:g} "
                f"{unit} (the ceiling allows it at {self.rate:g})")


def allows(met_max: int, requests: int, level: float) -> bool:
    return requests == 0 or met_max / requests >= level - LEVEL_TOLERANCE


def check_scaling(base: Instance, base_rate: float, other: Instance, rate: float) -> bool:
    """Whether ``other`` (at ``rate``) is ``base`` (at ``base_rate``) with arrivals measured
    from the first multiplied by base_rate / rate, lengths and targets equal."""
    if base.num_requests != other.num_requests:
        return False
    if not (np.array_equal(base.input_tokens, other.input_tokens)
            and np.array_equal(base.output_tokens, other.output_tokens)):
        return False
    for f in ("ttft_slo_ms", "tpot_slo_ms", "e2e_slo_ms"):
        if not np.allclose(base.slo_targets(f), other.slo_targets(f), rtol=1e-12, atol=0,
                           equal_nan=True):
            return False
    a = base.arrival_ms - base.arrival_ms.min()
    b = other.arrival_ms - other.arrival_ms.min()
    return bool(np.allclose(a * (base_rate / rate), b, rtol=1e-9, atol=1e-9))


def goodput_ceiling(make_instance: Callable[[float], Instance], level: float, low: float,
                    high: float, steps: int = 12, rel_tol: float = 0.01,
                    time_limit_s: float = 60.0, memory: bool = True) -> GoodputCeiling:
    """The goodput ceiling of the module doc: bisection over [low, high] (at most ``steps``
    probes after the two ends, stopping when the bracket is within ``rel_tol``); each probe's
    ceiling gets ``time_limit_s``."""
    if not (0 < level <= 1):
        raise OptionError("must be in (0, 1]", field="level", value=level)
    if not (0 < low < high and math.isfinite(high)):
        raise OptionError("needs 0 < low < high", field="low/high", value=(low, high))
    t0 = time.perf_counter()
    probes: list[tuple[float, int, int]] = []
    base: tuple[Instance, float] | None = None
    scaled = True

    def ok(rate: float) -> bool:
        nonlocal base, scaled
        instance = make_instance(rate)
        if base is None:
            base = (instance, rate)
        else:
            scaled = scaled and check_scaling(base[0], base[1], instance, rate)
        ceiling = attainment_ceiling(instance, time_limit_s=time_limit_s, memory=memory,
                                     iterations=False)
        met = ceiling.monotone_max if ceiling.monotone_max is not None else ceiling.met_max
        probes.append((rate, met, ceiling.requests))
        return allows(met, ceiling.requests, level)

    if not ok(low):
        return GoodputCeiling(None, low, level, scaled, tuple(probes),
                              time.perf_counter() - t0)
    if ok(high):
        return GoodputCeiling(high, None, level, scaled, tuple(probes),
                              time.perf_counter() - t0)
    good, bad = low, high
    for _ in range(steps):
        if bad / good <= 1 + rel_tol:
            break
        middle = math.sqrt(good * bad)
        if ok(middle):
            good = middle
        else:
            bad = middle
    return GoodputCeiling(good, bad, level, scaled, tuple(probes), time.perf_counter() - t0)
