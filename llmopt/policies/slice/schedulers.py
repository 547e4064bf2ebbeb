"""SCLS and its baselines as configurations of the slice-level cluster simulation
(:mod:`llmopt.sim.slices`): Cheng et al. 2024, sections 5.1 (SLS) and 5.4 (the Fig. 15 ladder
SLS → SO → PM → AB → LB → SCLS, each adding one feature).

``sls``   Sequence-level scheduling: requests dealt round-robin to the instances at arrival, each
          instance serves its queue FCFS in static batches of a fixed size (16 for HF workers,
          section 5.1) generated to completion: the iteration limit is the maximal generation
          length (1024, section 5.1), so S = 1024 here.
``so``    Slice-only: SLS with the iteration limit cut to the slice length S = 128; unfinished
          requests are re-sent round-robin (the arrivals' turn counter continues).
``pm``    Padding-mitigating: a central pool fetched every Γ (fixed), batched by "an incomplete
          batching algorithm" with the batch size limited to 16 — the paper does not print the
          algorithm; our choice is Algorithm 1's DP with that size limit (eq 10 over groups of at
          most 16) — and batches offloaded round-robin (in the DP's order, longest first).
``ab``    Adaptive batching: PM without the size limit (Algorithm 1 as printed).
``lb``    Load balancing: AB with max-min offloading (eq 11, with the load decrement).
``scls``  SCLS: LB with the adaptive interval of eq 12 (λ = 0.5, Γ = 6 s for HF, section 5.1).

Choices the paper leaves open, ours: a routed instance that falls idle starts a batch with the
requests it has (it does not wait to fill the fixed size); the first period starts at the first
arrival; with an empty pool the adaptive interval is recomputed from the current loads. ILS
(DeepSpeed-FastGen, continuous batching with split-fuse behind round-robin) is not here: llmopt
has it as the ``sarathi`` policy behind the ``round-robin`` router, which runs on an
``infermax``-family profile (per-iteration costs of mixed batches) and cannot be timed by the
``scls`` profile's padded-batch eqs 1–4; a comparison across the two cost models would not be
fair (the design note's one-cost-model rule), so ILS is left out of the ladder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from llmopt.data.cost.scls import DEFAULT_SLICE_LENGTH, SclsProfile, check_slice_length
from llmopt.data.instance import Instance
from llmopt.errors import OptionError
from llmopt.policies.slice.strategies import (
    AdaptiveInterval,
    DpBatcher,
    FcfsBatcher,
    FixedInterval,
    MaxMinOffloading,
    RoundRobinFcfs,
    RoundRobinOffloading,
    check_each_fits,
)
from llmopt.problems.scls.offload import (
    DEFAULT_GAMMA_MS,
    DEFAULT_LAMBDA,
    MaxMinOffloader,
    check_interval_parameters,
)
from llmopt.sim.slices import Dispatch, SliceReplay, SliceStrategies, simulate_slices


class Batcher(StrEnum):
    DP = "dp"
    FCFS = "fcfs"


class Offloading(StrEnum):
    MAX_MIN = "max-min"
    ROUND_ROBIN = "round-robin"


class IntervalRule(StrEnum):
    ADAPTIVE = "adaptive"
    FIXED = "fixed"


@dataclass(frozen=True)
class SliceScheduler:
    """A slice-level scheduler as parameters (see :mod:`.strategies`): how requests reach
    instances (``dispatch``), the batcher, its size (fixed for ``fcfs``, a limit for ``dp``;
    None: none), the offloader, the period rule (eq 12 or fixed Γ), λ, Γ (ms) and the slice
    length S. Each choice is a member of its enum, or its name."""

    name: str
    dispatch: Dispatch | str = Dispatch.POOL
    batcher: Batcher | str = Batcher.DP
    batch_size: int | None = None
    offloader: Offloading | str = Offloading.MAX_MIN
    interval: IntervalRule | str = IntervalRule.ADAPTIVE
    slice_length: int = DEFAULT_SLICE_LENGTH
    gamma_ms: float = DEFAULT_GAMMA_MS
    lam: float = DEFAULT_LAMBDA
    #: S is the generation limit, not a slice (SLS): a slice length given leaves it
    fixed_slice_length: bool = False

    def checked(self) -> SliceScheduler:
        """The parameters validated, each choice as its enum member (user errors: one
        :class:`OptionError` naming the field)."""
        choices: dict[str, Any] = {}
        for name, enum in (("dispatch", Dispatch), ("batcher", Batcher),
                           ("offloader", Offloading), ("interval", IntervalRule)):
            value = getattr(self, name)
            try:
                choices[name] = enum(value)
            except ValueError:
                raise OptionError(f"unknown {name} (one of: {', '.join(enum)})", field=name,
                                  value=value, has_value=True) from None
        check_slice_length(self.slice_length)
        check_interval_parameters(self.gamma_ms, self.lam)
        size = self.batch_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or size < 1):
            raise OptionError("the batch size must be an integer ≥ 1", field="batch_size",
                              value=size, has_value=True)
        if choices["batcher"] is Batcher.FCFS and size is None:
            raise OptionError("FCFS batching needs a fixed batch size", field="batch_size",
                              value=size, has_value=True)
        if choices["dispatch"] is Dispatch.ROUTE and choices["batcher"] is not Batcher.FCFS:
            raise OptionError("routed requests are batched by their instance, FCFS",
                              field="batcher", value=self.batcher)
        return replace(self, **choices)

    def strategies(self, profile: SclsProfile, workers: int, label: str) -> SliceStrategies:
        """The engine's strategies for one run (see :mod:`.strategies`)."""
        s, size = self.slice_length, self.batch_size
        check = check_each_fits(profile, s)
        if self.dispatch is Dispatch.ROUTE:
            return SliceStrategies(Dispatch.ROUTE, check,
                                   local=RoundRobinFcfs(profile, s, size or 1, workers, label))
        loads = MaxMinOffloader(workers)
        return SliceStrategies(
            Dispatch.POOL, check,
            batcher=(DpBatcher(profile, s, size, label) if self.batcher is Batcher.DP
                     else FcfsBatcher(profile, s, size or 1, label)),
            offloader=(MaxMinOffloading(loads) if self.offloader is Offloading.MAX_MIN
                       else RoundRobinOffloading(loads, workers)),
            interval=(AdaptiveInterval(loads, self.lam, self.gamma_ms)
                      if self.interval is IntervalRule.ADAPTIVE
                      else FixedInterval(self.gamma_ms)))


GENERATION_LIMIT = 1024   # the maximal generation length of section 5.1 (SLS's iteration limit)
FIXED_BATCH = 16          # SLS's / SO's fixed batch and PM's limit for HF workers (section 5.1)

SCHEDULERS: dict[str, SliceScheduler] = {
    s.name: s for s in [
        SliceScheduler("sls", dispatch=Dispatch.ROUTE, batcher=Batcher.FCFS,
                       batch_size=FIXED_BATCH, offloader=Offloading.ROUND_ROBIN,
                       interval=IntervalRule.FIXED, slice_length=GENERATION_LIMIT,
                       fixed_slice_length=True),
        SliceScheduler("so", dispatch=Dispatch.ROUTE, batcher=Batcher.FCFS,
                       batch_size=FIXED_BATCH, offloader=Offloading.ROUND_ROBIN,
                       interval=IntervalRule.FIXED),
        SliceScheduler("pm", batcher=Batcher.DP, batch_size=FIXED_BATCH,
                       offloader=Offloading.ROUND_ROBIN, interval=IntervalRule.FIXED),
        SliceScheduler("ab", batcher=Batcher.DP, offloader=Offloading.ROUND_ROBIN,
                       interval=IntervalRule.FIXED),
        SliceScheduler("lb", batcher=Batcher.DP, offloader=Offloading.MAX_MIN,
                       interval=IntervalRule.FIXED),
        SliceScheduler("scls", batcher=Batcher.DP, offloader=Offloading.MAX_MIN,
                       interval=IntervalRule.ADAPTIVE),
    ]
}
LADDER = tuple(SCHEDULERS)  # Fig. 15's order


def scheduler(name: str | SliceScheduler, *, slice_length: int | None = None,
              gamma_ms: float | None = None, lam: float | None = None,
              batch_size: int | None = None) -> SliceScheduler:
    """A scheduler of :data:`SCHEDULERS` by name (or one given), with parameters overridden.
    ``slice_length`` does not change SLS, whose iteration limit is the generation limit."""
    if isinstance(name, SliceScheduler):
        base = name
    elif name in SCHEDULERS:
        base = SCHEDULERS[name]
    else:
        raise OptionError(f"unknown slice-level scheduler (known: {', '.join(SCHEDULERS)})",
                          field="scheduler", value=name, has_value=True)
    changes: dict[str, Any] = {}
    if slice_length is not None and not base.fixed_slice_length:
        changes["slice_length"] = slice_length
    if gamma_ms is not None:
        changes["gamma_ms"] = gamma_ms
    if lam is not None:
        changes["lam"] = lam
    if batch_size is not None and base.batch_size is not None:
        changes["batch_size"] = batch_size
    return replace(base, **changes).checked()


def replay_slices(instance: Instance, scheduler_name: str | SliceScheduler = "scls", *,
                  instances: int = 1, slice_length: int | None = None,
                  gamma_ms: float | None = None, lam: float | None = None,
                  batch_size: int | None = None) -> SliceReplay:
    """Replay ``instance`` (an ``scls``-family profile) on ``instances`` model instances under a
    slice-level scheduler (a name of :data:`SCHEDULERS` or a :class:`SliceScheduler`); defaults
    S = 128, Γ = 6 s, λ = 0.5 (section 5.1)."""
    chosen = scheduler(scheduler_name, slice_length=slice_length, gamma_ms=gamma_ms, lam=lam,
                       batch_size=batch_size)
    return simulate_slices(instance, chosen, instances)


__all__ = ["DEFAULT_GAMMA_MS", "DEFAULT_LAMBDA", "DEFAULT_SLICE_LENGTH", "FIXED_BATCH",
           "GENERATION_LIMIT", "LADDER", "SCHEDULERS", "Batcher", "Dispatch", "IntervalRule",
           "Offloading", "SliceScheduler", "replay_slices", "scheduler"]
