"""The paper's iteration-level baseline ILS (Cheng et al. 2024, section 5.1, "Baselines"):
DeepSpeed-FastGen, continuous batching with Dynamic SplitFuse (chunked prefill), requests dealt
round-robin to the instances at arrival, at most a fixed number of requests running per instance
(the "conservative memory management" the paper blames for its throughput).

It is InferMax's ``sarathi`` configuration of the unified scheduler
(``llmopt.policies.infermax``): running decodes first, then running chunked prefills, then
waiting requests in arrival order (FCFS), decodes and prefill chunks in one (mixed) iteration, at
most P = 512 prompt tokens per iteration, a new request reserving its prompt's KVs and the
lowest-priority running request evicted (and later recomputed) when the KVs run short. On the
``scls`` family:

- iterations are timed by eqs 3–4 per request (``llmopt.data.cost.scls``: eq 3 at N = chunks,
  L_i = P/N; eq 4 at N = d, l = (K + d)/d; a mixed iteration the sum);
- the first output token comes from the first decode, as eq 2 counts L_o decode iterations after
  the prefill (``first_token_from_prefill = False``): a request of O output tokens decodes O
  times and holds up to I + O KVs;
- at most ``system.clients`` requests run at once per instance (FastGen's limit on the requests
  in flight), and the KV capacity is the profile's ``kv_capacity`` (⌊M_ava/Δ⌋, eqs 5–6) unless
  ``system.kv_capacity`` gives one;
- the iteration's token budget is ``system.max_batch_tokens`` when given, else P plus one token
  per running request (so that only P limits a chunk, as in SARATHI without a budget C);
- one instance per ``system.instances``, fed by the round-robin router (or another one asked for).

Continuous batching pads nothing and generates no invalid tokens: its schedules are the
simulation core's (segments and iteration log, mode ``continuous``), checked by
``llmopt.validate.schedule`` with the ``scls`` time model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from llmopt.data.instance import Instance
from llmopt.policies.base import ReplicaView, Router
from llmopt.policies.deploy import Deployment, each_replica
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.infermax.unified import UnifiedOnFamily
from llmopt.progress import SILENT, Progress
from llmopt.schedule import Schedule
from llmopt.sim.slices import section5_request_metrics

ILS = replace(
    SCHEDULERS["sarathi"], name="ils",
    description="ILS (DeepSpeed-FastGen's Dynamic SplitFuse): continuous batching, decode "
    "priority, hybrid batches, chunked prefill P = 512, on eqs 3-4 per request")


class IterationLevel(UnifiedOnFamily):
    """``ILS`` on an ``scls`` profile (see the module doc)."""

    def __init__(self) -> None:
        super().__init__(ILS, "scls", "the scls profile family (Cheng et al. eqs 3-4)")

    def budgets(self, replica: ReplicaView) -> tuple[float, float]:
        prefill = self.cfg.prefill_budget or replica.C
        C = replica.C if math.isfinite(replica.C) else prefill + replica.J
        return C, min(prefill, replica.P_system, C)


def section5_metrics(schedule: Schedule, instances: int) -> dict[str, float]:
    """The section 5 metrics of an iteration-level schedule on ``instances`` model instances,
    defined as :meth:`llmopt.sim.slices.SliceReplay.metrics` defines them for the slice-level
    schedulers, so that ILS stands beside the Fig. 15 ladder: request throughput (requests per
    second from the first arrival to the last finish), response time (finish − arrival) mean
    and p95, per-instance completion time (the end of its last iteration; 0 for an instance
    that ran nothing) and their population standard deviation (Fig. 17), the busy-time standard
    deviation, the mean batch size (requests per iteration; a slice's batch runs many
    iterations, so the two are not the same count), and pad and invalid tokens per request
    (none: continuous batching pads nothing and stops a request at its last token)."""
    req, its = schedule.requests, schedule.iterations
    done = np.zeros(instances)
    np.maximum.at(done, its["instance"].to_numpy(dtype=np.int64),
                  its["end_ms"].to_numpy(dtype=float))
    out = section5_request_metrics(req, its, done.tolist(), instances)
    out |= {
        "batch_size_mean": float(its["batch_size"].mean()) if len(its) else 0.0,
        "pad_tokens_per_request": 0.0,
        "invalid_tokens_per_request": 0.0,
    }
    return {k: round(v, 6) for k, v in out.items()}


def deploy(instance: Instance, name: str = "ils", *, plan: Mapping[str, Any] | None = None,
           router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    """ILS on every model instance of ``instance`` (``system.instances``), round-robin unless
    another router is given."""
    return each_replica(instance, ILS.name, IterationLevel, router)


__all__ = ["ILS", "IterationLevel", "deploy", "section5_metrics"]
