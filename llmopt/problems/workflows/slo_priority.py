"""A slo-priority plan served on the simulation core, and G (eq 2) of any replayed schedule.

``replay_plan`` serves a plan (a solver's ``Result``, its ``data`` or a solution file's dict:
the ``batches`` of request ids in priority order) as static batches
(``llmopt.policies.slo_priority.static``) on the bilinear predictor mapped to iterations
(``llmopt.data.cost.bilinear``). ``replayed_g`` scores a schedule as ``model`` scores a plan:
n = requests meeting every target they have (eqs 6–7, TPOT = (E2E − TTFT) / (l_o − 1) as in
``model``), t = Σ E2E (eq 3), G = n / t in requests per second.

With max batch 1 the replay reproduces ``model.evaluate`` exactly for E2E (so t), while its TTFT
is eq 8's plus one decode step, τ_d(1, l_i + 1): the core's first output token comes from the
first of the l_o decodes eq 16 counts. With larger batches the two differ further: the core
prefills a batch in one iteration (eq 14 at the batch's mean prompt, one end for all members)
and its decode batch shrinks as members finish (eq 15 at the live batch and mean length), where
the predictor gives each request its own eq 14 and keeps b for its whole decode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmopt.data.instance import Instance
from llmopt.policies.slo_priority.deploy import deploy_cluster_plan, deploy_plan
from llmopt.problems.slo_priority.cluster import ClusterPlan
from llmopt.problems.slo_priority.model import g_per_s
from llmopt.result import Result
from llmopt.schedule import Schedule
from llmopt.schedule.metrics import request_latencies
from llmopt.sim.cluster import simulate


@dataclass(frozen=True)
class ReplayedG:
    """n (requests meeting their SLO), t (Σ E2E, ms) and G (requests/s) of a schedule."""

    n_met: int
    total_ms: float

    @property
    def g_per_s(self) -> float:
        return g_per_s(self.n_met, self.total_ms)


def replayed_g(schedule: Schedule, instance: Instance) -> ReplayedG:
    """Eq 2 of a replayed schedule (see the module doc)."""
    lat = request_latencies(schedule, instance)
    return ReplayedG(int(lat["slo_met"].sum()), float(lat["e2e_ms"].sum()))


def replay_plan(instance: Instance, plan: Result | Mapping[str, Any], *,
                fast: bool = True) -> Schedule:
    """Serve a slo-priority plan on ``instance`` (one model instance) as static batches."""
    data = plan.data.to_json() if isinstance(plan, Result) else plan
    return simulate(instance, deploy_plan(instance, data), fast=fast)


def replay_cluster_plan(instance: Instance, plan: ClusterPlan, *,
                        fast: bool = True) -> Schedule:
    """Algorithm 2 served: each model instance of ``instance`` (``system.instances`` of them)
    runs its own plan of ``cluster.plan_cluster``, all on one cluster clock."""
    return simulate(instance, deploy_cluster_plan(instance, plan.members,
                                                  [list(map(list, b)) for b in plan.batches]),
                    fast=fast)
