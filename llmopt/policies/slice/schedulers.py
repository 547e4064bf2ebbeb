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

from dataclasses import replace
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import OptionError
from llmopt.problems.scls.offload import DEFAULT_GAMMA_MS, DEFAULT_LAMBDA
from llmopt.problems.scls.partition import DEFAULT_SLICE_LENGTH
from llmopt.sim.slices import SliceReplay, SliceScheduler, simulate_slices

GENERATION_LIMIT = 1024   # the maximal generation length of section 5.1 (SLS's iteration limit)
FIXED_BATCH = 16          # SLS's / SO's fixed batch and PM's limit for HF workers (section 5.1)

SCHEDULERS: dict[str, SliceScheduler] = {
    s.name: s for s in [
        SliceScheduler("sls", dispatch="route", batcher="fcfs", batch_size=FIXED_BATCH,
                       offloader="round-robin", interval="fixed",
                       slice_length=GENERATION_LIMIT),
        SliceScheduler("so", dispatch="route", batcher="fcfs", batch_size=FIXED_BATCH,
                       offloader="round-robin", interval="fixed"),
        SliceScheduler("pm", batcher="dp", batch_size=FIXED_BATCH, offloader="round-robin",
                       interval="fixed"),
        SliceScheduler("ab", batcher="dp", offloader="round-robin", interval="fixed"),
        SliceScheduler("lb", batcher="dp", offloader="max-min", interval="fixed"),
        SliceScheduler("scls", batcher="dp", offloader="max-min", interval="adaptive"),
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
    if slice_length is not None and base.name != "sls":
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
           "GENERATION_LIMIT", "LADDER", "SCHEDULERS", "replay_slices", "scheduler"]
