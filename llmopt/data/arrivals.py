"""Arrival processes, all seeded: offline (every request at 0 ms), Poisson at a rate, and Gamma
renewal arrivals with a coefficient of variation (cv > 1: burstier than Poisson; cv = 1 is
Poisson). The first request arrives at 0 ms; later gaps are drawn independently.

A Gamma gap of mean μ = 1000 / rate ms and coefficient of variation cv has shape 1 / cv² and
scale μ · cv² (mean shape · scale = μ, variance shape · scale² = (cv · μ)²).
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from llmopt.data.ranges import MAX_RATE_PER_S


class Arrivals(BaseModel):
    """How requests arrive (``requests.generate.arrival`` or ``requests.arrival`` of a trace,
    which then replaces the trace's timestamps)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    process: Literal["offline", "poisson", "gamma"] = "offline"
    rate_per_s: Annotated[float, Field(gt=0, le=MAX_RATE_PER_S)] | None = None
    cv: Annotated[float, Field(gt=0, le=100)] = 1.0
    seed: Annotated[StrictInt, Field(ge=0)] | None = None  # traces: default 0; generators: theirs

    def needs_rate(self) -> bool:
        return self.process != "offline"


def arrival_times(arrivals: Arrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times in ms (non-decreasing, the first at 0). The rate must be set for
    the random processes (the caller reports a missing one)."""
    if arrivals.process == "offline" or n == 0:
        return np.zeros(n)
    assert arrivals.rate_per_s is not None
    mean_gap = 1000.0 / arrivals.rate_per_s
    if arrivals.process == "poisson":
        gaps = rng.exponential(mean_gap, n)
    else:
        shape = 1.0 / arrivals.cv ** 2
        gaps = rng.gamma(shape, mean_gap / shape, n)
    return np.concatenate([[0.0], np.cumsum(gaps[1:])])


def count_within(arrival_ms: np.ndarray, duration_s: float) -> int:
    """How many of the (sorted) arrivals come before ``duration_s`` seconds."""
    return int(np.searchsorted(arrival_ms, duration_s * 1000.0, side="left"))
