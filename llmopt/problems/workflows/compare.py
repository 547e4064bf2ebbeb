"""One workflow compares schedules, whatever the family (``llmopt compare``): the policies
replayed under one cost model, beside the best schedule llmopt finds and the proven bounds, by
the hook the family registers (``FamilyInfo.compare``):

``by_total_time``  (Pang's and InferMax's families) total inference time and latencies, each
                   schedule's gap to the best bound valid under the replays' time model (bounds
                   valid only under another are listed, not used for gaps), the family's exact
                   problem under that model, and with SLOs the exact bound on attainment;
``by_g``           (the bilinear family, Huang et al. 2025) G (eq 2) of each replay beside the
                   best priority plan, served on the same core, and the proven upper bound on G
                   over priority plans (held only against the plan the predictor scores);
``by_section5``    (the scls family, Cheng et al. 2024) the section 5 metrics of the slice-level
                   schedulers and of the iteration-level baseline, side by side (no bound:
                   llmopt's exact model covers one period's batching, not a whole replay).

Each returns the numbers; ``llmopt.report.compare.render`` renders them (markdown, chart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from llmopt.data.instance import Instance
from llmopt.errors import LlmoptError, OptionError, unknown_name
from llmopt.plugins import load
from llmopt.policies.registry import POLICIES, Engine, check_family
from llmopt.policies.replay import replay_policy, replay_result
from llmopt.policies.slice.ils import section5_metrics
from llmopt.policies.slice.replay import ladder_table
from llmopt.problems.api import bounds as family_bounds
from llmopt.problems.api import family_of, solve
from llmopt.problems.base import Bound, gap_bounds
from llmopt.problems.slo_priority.model import SloPriorityData
from llmopt.problems.slo_priority.solve import SIMPLE_BOUND_PROOF, simple_bound
from llmopt.problems.workflows.slo_priority import replay_plan, replayed_g
from llmopt.progress import SILENT, Progress
from llmopt.result import Result
from llmopt.schedule import Schedule
from llmopt.schedule.metrics import ATTAINMENT_METRICS
from llmopt.schedule.schedule import LATENCY_METRICS, PREFIX_METRICS

if TYPE_CHECKING:
    from llmopt.problems.infermax.attainment import AttainmentBound

ATTAINMENT_MODULE = "llmopt.problems.workflows.attainment"  # CP-SAT: loaded when used
PLAN = "slo-priority plan"
PLAN_REPLAYED = "slo-priority plan, replayed"
BY_MODEL = "eqs 14–17"  # a row scored by the predictor, the only kind the bound holds for


def compare(instance: Instance, policies: list[str], time_limit_s: float = 60.0,
            progress: Progress = SILENT, optimize: bool = True
            ) -> Comparison | PriorityComparison | LadderComparison:
    """``policies`` compared on ``instance`` by its family's hook (see the module doc);
    ``optimize``: also the exact problem and the solvers' bounds."""
    for policy in policies:
        if policy not in POLICIES:
            raise OptionError(unknown_name("policy", policy, POLICIES), field="--policy",
                              value=policy)
        check_family(instance, policy)
    hook = family_of(instance, for_bounds=False).compare
    made: Comparison | PriorityComparison | LadderComparison = load(hook)(
        instance, policies, time_limit_s, progress, optimize)
    return made


# --------------------------------------------------------------------- total time

@dataclass
class Comparison:
    table: pd.DataFrame
    bounds: list[Bound]
    results: dict[str, Result]
    time_model: str  # the replays' time model: only bounds valid under it measure gaps
    notes: list[str] = field(default_factory=list)
    attainment_bound: AttainmentBound | None = None

    prefix_caching: bool = False  # the replays cache prefixes: only bounds holding so count

    @property
    def best_bound(self) -> Bound | None:
        valid = [b for b in self.bounds if b.time_model == self.time_model
                 and (b.holds_with_prefix_cache or not self.prefix_caching)]
        return max(valid, key=lambda b: b.value_ms) if valid else None


def by_total_time(instance: Instance, policies: list[str], time_limit_s: float = 60.0,
                  progress: Progress = SILENT, optimize: bool = True) -> Comparison:
    """Replay ``policies`` beside the lower bounds of the instance's family; with
    ``optimize``, also the family's exact problem under the replays' time model (a row of its
    own, e.g. ``pd-competition`` with the replay time model, or ``infermax-csp`` on small
    instances) and the solver-based bounds."""
    family = family_of(instance)
    bounds = family_bounds(instance, time_limit_s, progress, solver_bounds=optimize)
    results: dict[str, Result] = {}
    for policy in policies:
        progress.stage(f"replay {policy}")
        results[policy], _ = replay_result(instance, policy, progress=progress)
    small = (family.exact_max_requests is None
             or instance.num_requests <= family.exact_max_requests)
    notes: list[str] = []
    if optimize and small:
        progress.stage(f"{family.exact} under the replays' time model")
        try:
            results[family.exact] = solve(instance, family.exact, None, time_limit_s,
                                          progress, **family.exact_options)
        except LlmoptError as exc:
            notes.append(f"{family.exact} not solved: {exc}")
    elif optimize:
        notes.append(f"{family.exact} not solved: {instance.num_requests} requests, more "
                     f"than the {family.exact_max_requests} it is run on")
    valid = [b.value_ms for b in gap_bounds(bounds, family.replay_time_model, instance)]
    if instance.system.prefix_caching:
        notes.append("the replays cache prefixes (system.prefix_caching): only the bounds that "
                     "hold with a prefix cache measure their gaps")
    exact = results.get(family.exact)
    if exact is not None and exact.bound is not None:
        valid.append(exact.bound)
    best = max(valid) if valid else None
    rows = []
    for policy, result in results.items():
        m = result.data["metrics"]
        rows.append({
            "schedule": policy,
            **{k: m[k] for k in ("makespan_ms", "utilization", "tokens_per_s", "ttft_p50_ms",
                                 "tpot_p50_ms", "e2e_p50_ms", "ttft_mean_ms", "tpot_mean_ms",
                                 "e2e_mean_ms")},
            "gap_to_bound": (m["makespan_ms"] - best) / m["makespan_ms"] if best else None,
            **{k: m.get(k) for k in ATTAINMENT_METRICS if instance.has_slos},
            **{k: m.get(k) for k in LATENCY_METRICS},
            **({k: m.get(k) for k in (*PREFIX_METRICS, "evictions")}
               if instance.system.prefix_caching else {}),
        })
    attainment = _attainment_bound(instance, time_limit_s, progress, notes) \
        if optimize and instance.has_slos else None
    return Comparison(pd.DataFrame(rows), bounds, results, family.replay_time_model, notes,
                      attainment, instance.system.prefix_caching)


def _attainment_bound(instance: Instance, time_limit_s: float, progress: Progress,
                      notes: list[str]) -> AttainmentBound | None:
    """The exact upper bound on SLO attainment, on instances small enough for it."""
    most = load(f"{ATTAINMENT_MODULE}:MAX_ATTAINMENT_REQUESTS")
    if instance.system.prefix_caching:
        notes.append("attainment bound not computed: its model computes every prompt token "
                     "(no prefix cache)")
        return None
    if instance.profile.family != "infermax" or instance.system.instances != 1 or \
            instance.num_requests > most:
        notes.append(f"attainment bound not computed: it is exact for one infermax model "
                     f"instance and up to {most} requests")
        return None
    progress.stage("the exact upper bound on SLO attainment")
    bound: AttainmentBound = load(f"{ATTAINMENT_MODULE}:attainment_bound")(
        instance, time_limit_s=time_limit_s)
    return bound


# --------------------------------------------------------------------- G (Huang et al.)

@dataclass
class PriorityComparison:
    """One row per schedule (``schedule``, ``scored_by``, ``g_per_s``, ``n_met``,
    ``requests``, ``total_e2e_s``, ``makespan_s``, ``gap_to_bound``) and the bound on G."""

    table: pd.DataFrame
    bound_g_per_s: float | None  # None: no bound for this instance (several model instances)
    bound_proof: str
    schedules: dict[str, Schedule]
    results: dict[str, Result]
    notes: list[str] = field(default_factory=list)


def by_g(instance: Instance, policies: list[str], time_limit_s: float,
         progress: Progress = SILENT, optimize: bool = True) -> PriorityComparison:
    """Replay ``policies``; with ``optimize``, also solve ``slo-priority`` (CP-SAT from SA's
    plan) and serve its plan. The bound is CP-SAT's when it solved, else the closed-form one
    every solver reports (``simple_bound``)."""
    rows: list[dict[str, object]] = []
    schedules: dict[str, Schedule] = {}
    results: dict[str, Result] = {}
    notes: list[str] = []
    one_instance = instance.system.instances == 1
    if not one_instance:
        notes.append(f"no plan and no bound: slo-priority plans one model instance, this "
                     f"system has {instance.system.instances} (system.instances)")
    for policy in policies:
        progress.stage(f"replay {policy}")
        results[policy], schedules[policy] = replay_result(instance, policy, progress=progress)
        rows.append(_replayed_row(policy, schedules[policy], instance))
    bound: float | None = None
    proof = ""
    if optimize and one_instance:
        progress.stage("slo-priority (CP-SAT from SA's plan)")
        try:
            plan = solve(instance, "slo-priority", "cpsat", time_limit_s, progress)
        except LlmoptError as exc:
            notes.append(f"slo-priority not solved: {exc}")
        else:
            results[PLAN] = plan
            rows.append({"schedule": f"{PLAN} ({plan.status})", "scored_by": BY_MODEL,
                         "g_per_s": plan.data["g_per_s"], "n_met": plan.data["n_met"],
                         "requests": instance.num_requests,
                         "total_e2e_s": plan.data["total_latency_ms"] / 1000.0,
                         "makespan_s": float("nan")})
            if plan.data.get("g_bound_per_s") is not None:
                bound, proof = plan.data["g_bound_per_s"], plan.proof or "CP-SAT"
            schedules[PLAN_REPLAYED] = replay_plan(instance, plan)
            rows.append(_replayed_row(PLAN_REPLAYED, schedules[PLAN_REPLAYED], instance))
    if bound is None and one_instance:
        bound = simple_bound(SloPriorityData.from_instance(instance))
        proof = f"{SIMPLE_BOUND_PROOF}, closed form"
    table = pd.DataFrame(rows)
    table["gap_to_bound"] = [
        (bound - g) / bound if scored == BY_MODEL and bound else float("nan")
        for g, scored in zip(table["g_per_s"], table["scored_by"], strict=True)]
    return PriorityComparison(table, bound, proof, schedules, results, notes)


def _replayed_row(name: str, schedule: Schedule, instance: Instance) -> dict[str, object]:
    g = replayed_g(schedule, instance)
    return {"schedule": name, "scored_by": "replay", "g_per_s": g.g_per_s, "n_met": g.n_met,
            "requests": instance.num_requests, "total_e2e_s": g.total_ms / 1000.0,
            "makespan_s": schedule.makespan_ms / 1000.0}


# --------------------------------------------------------------------- section 5 (SCLS)

@dataclass
class LadderComparison:
    """The section 5 metrics of each schedule (``policies.slice.replay.LADDER_COLUMNS``), by
    schedule name, and the model instances they ran on."""

    table: pd.DataFrame
    instances: int


def by_section5(instance: Instance, policies: list[str], time_limit_s: float = 60.0,
                progress: Progress = SILENT, optimize: bool = True) -> LadderComparison:
    """The slice-level schedulers (Cheng et al. 2024, Fig. 15's ladder) and ILS side by side:
    their section 5 metrics. No lower bound or exact row: llmopt has no exact model of a whole
    slice-level cluster replay (its exact checks are per period: ``scls-batching``)."""
    metrics = {}
    for name in policies:
        if POLICIES[name].engine is Engine.SLICE:
            metrics[name] = replay_policy(instance, name).metrics
        else:
            metrics[name] = _iteration_section5(instance, name)
    return LadderComparison(ladder_table(metrics), instance.system.instances)


def _iteration_section5(instance: Instance, name: str) -> dict[str, float]:
    """Section 5's metrics of an iteration-level replay (ILS) on the instance's model
    instances, as the slice-level replays define them (no slices: ``slices_per_request``
    NaN)."""
    _, schedule = replay_result(instance, name)
    return {**section5_metrics(schedule, instance.system.instances),
            "slices_per_request": math.nan}


__all__ = ["BY_MODEL", "PLAN", "PLAN_REPLAYED", "Comparison", "LadderComparison",
           "PriorityComparison", "by_g", "by_section5", "by_total_time", "compare"]
