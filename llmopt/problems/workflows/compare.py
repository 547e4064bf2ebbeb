"""One workflow compares schedules, whatever the family (``llmopt compare``): the policies
replayed under one cost model, beside the best schedule llmopt finds and the proven bounds, by
the hook the family registers (``FamilyInfo.compare``):

``by_total_time``  (Pang's and InferMax's families) total inference time and latencies, each
                   schedule's gap to the best bound valid under the replays' time model (bounds
                   valid only under another are listed, not used for gaps), the family's exact
                   problem under that model, and with SLOs the proven ceiling on SLO
                   attainment beside each schedule's (``workflows.ceiling``);
``by_g``           (the bilinear family, Huang et al. 2025) G (eq 2) of each replay beside the
                   best priority plan (Algorithm 2's on several model instances), served on
                   the same core, and the proven upper bound on G over priority plans (held
                   only against the plan the predictor scores);
``by_section5``    (the scls family, Cheng et al. 2024) the section 5 metrics of the slice-level
                   schedulers and of the iteration-level baseline, side by side, beside lower
                   bounds on the last end and the response times (``problems.scls.bounds``;
                   no exact row: llmopt's exact model covers one period's batching).

Each returns the numbers; ``llmopt.report.compare.render`` renders them (markdown, chart).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pandas as pd

from llmopt.data.instance import Instance
from llmopt.deadline import Deadline
from llmopt.errors import LlmoptError, OptionError, unknown_name
from llmopt.plugins import load
from llmopt.policies.registry import POLICIES, Engine, check_family
from llmopt.policies.replay import replay_policy, replay_result
from llmopt.policies.slice.ils import section5_metrics
from llmopt.policies.slice.replay import ladder_table
from llmopt.problems.api import bounds as family_bounds
from llmopt.problems.api import family_of, solve
from llmopt.problems.base import Bound, gap_bounds
from llmopt.problems.scls.bounds import Engine as BoundEngine
from llmopt.problems.scls.bounds import SliceBounds, slice_bounds
from llmopt.problems.slo_priority.cluster import (
    CLUSTER_BOUND_PROOF,
    cluster_g_bound,
    plan_cluster,
)
from llmopt.problems.slo_priority.model import SloPriorityData
from llmopt.problems.slo_priority.solve import SIMPLE_BOUND_PROOF, priority_plan, simple_bound
from llmopt.problems.workflows.ceiling import PolicyCeilings, policy_ceilings
from llmopt.problems.workflows.slo_priority import (
    replay_cluster_plan,
    replay_plan,
    replayed_g,
)
from llmopt.progress import SILENT, Progress
from llmopt.result import Result
from llmopt.schedule import Schedule
from llmopt.schedule.metrics import ATTAINMENT_METRICS
from llmopt.schedule.schedule import LATENCY_METRICS, PREFIX_METRICS

PLAN = "slo-priority plan"
PLAN_REPLAYED = "slo-priority plan, replayed"
CLUSTER_PLAN = "Algorithm 2 plan (SA per instance)"
CLUSTER_PLAN_REPLAYED = "Algorithm 2 plan, replayed"
BY_MODEL = "eqs 14–17"  # a row scored by the predictor, the only kind the bound holds for
BOUNDS_SHARE = 0.4  # of the time left after the replays, for the bounds when a solve follows
MIN_PHASE_S = 0.05  # a bound or a solve gets at least this, even once the time is up


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
    #: the proven ceilings on SLO attainment (None: the instance has no SLOs)
    ceilings: PolicyCeilings | None = None
    interrupted: bool = False  # a stop signal ended the exact solve: its incumbent is shown
    prefix_caching: bool = False  # the replays cache prefixes: only bounds holding so count
    failed: dict[str, str] = field(default_factory=dict)  # policy: why it could not run

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
    instances) and the solver-based bounds; with SLOs, the proven ceiling on SLO attainment
    beside each schedule's (``workflows.ceiling``).

    Everything shares ``time_limit_s``: the replays come first, one at a time, each starting
    only while the time left is at least what the last one took (the first always runs; a
    note names those skipped); the bounds get
    ``BOUNDS_SHARE`` of the time left when a solve or the ceiling follows, the exact problem
    half of the rest when the ceiling follows it, and the ceiling the rest (at least
    ``workflows.ceiling.MIN_CEILING_S``). A bound or solve whose time is up gets
    ``MIN_PHASE_S``: the closed-form bounds and the heuristics."""
    family = family_of(instance, for_bounds=False)
    deadline = Deadline.after(time_limit_s)
    small = (family.exact_max_requests is None
             or instance.num_requests <= family.exact_max_requests)
    solve_exact = optimize and small and bool(family.exact)
    ceiling_follows = instance.has_slos
    results: dict[str, Result] = {}
    notes: list[str] = []
    failed: dict[str, str] = {}
    notes += _replayed(instance, policies, deadline, time_limit_s, progress, results, failed)
    bounds: list[Bound] = []
    if family.bounds:
        bounds = family_bounds(instance, _seconds(deadline.share(
            BOUNDS_SHARE if solve_exact or ceiling_follows else 1.0)), progress,
            solver_bounds=optimize)
    else:
        notes.append(f"no lower bound for profile family {instance.profile.family}: "
                     f"{family.unbounded_why or 'it has none'}")
    if solve_exact:
        progress.stage(f"{family.exact} under the replays' time model")
        try:
            results[family.exact] = solve(instance, family.exact, None,
                                          _seconds(deadline.share(0.5 if ceiling_follows
                                                                  else 1.0)),
                                          progress, **family.exact_options)
        except LlmoptError as exc:
            notes.append(f"{family.exact} not solved: {exc}")
    elif optimize and family.exact:
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
        m = result.schedule_metrics()
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
    table = pd.DataFrame(rows)
    interrupted = exact is not None and exact.interrupted
    if interrupted:
        notes.append(f"{family.exact} interrupted: its best schedule so far is shown")
    ceilings = None
    if ceiling_follows and interrupted:
        notes.append("SLO ceiling not computed: interrupted")
    elif ceiling_follows:
        ceilings = policy_ceilings(instance, list(results), deadline.left(), progress,
                                   exact=optimize)
    if ceilings is not None:
        with_ceiling(table, ceilings)
    return Comparison(table, bounds, results, family.replay_time_model, notes, ceilings,
                      interrupted, instance.system.prefix_caching, failed)


def _replayed(instance: Instance, policies: list[str], deadline: Deadline, time_limit_s: float,
              progress: Progress, results: dict[str, Result], failed: dict[str, str],
              schedules: dict[str, Schedule] | None = None) -> list[str]:
    """Replay ``policies`` into ``results`` (and ``schedules``), one at a time, each starting
    only while what is left before ``deadline`` is at least what the last replay took (the
    first always runs); a policy that cannot run the instance
    (``LlmoptError``: e.g. a prompt no batch of its holds) goes into ``failed`` with the
    reason, unless none can, which raises the first one's error. The notes naming those
    skipped and those failed."""
    skipped: list[str] = []
    first_error: LlmoptError | None = None
    last_s = 0.0  # how long the last replay took: the next starts only if that much is left
    for policy in policies:
        if results and (deadline.passed() or deadline.left() < last_s):
            skipped.append(policy)
            continue
        progress.stage(f"replay {policy}")
        started = time.perf_counter()
        try:
            results[policy], schedule = replay_result(instance, policy, progress=progress)
            last_s = time.perf_counter() - started
        except LlmoptError as exc:
            failed[policy] = str(exc)
            first_error = first_error or exc
            continue
        if schedules is not None:
            schedules[policy] = schedule
    if not results and first_error is not None:
        raise first_error
    notes = [f"could not run {policy}: {reason}" for policy, reason in failed.items()]
    if skipped:
        notes.append(f"not replayed: {', '.join(skipped)} (the {time_limit_s:g} s time limit "
                     "was up; a longer --time-limit replays them)")
    return notes


def _seconds(deadline: Deadline) -> float:
    """The time left to a phase, at least ``MIN_PHASE_S``."""
    return max(deadline.left(), MIN_PHASE_S)


def with_ceiling(table: pd.DataFrame, ceilings: PolicyCeilings) -> None:
    """Add to a table of schedules (``schedule``, ``attainment``) the ceiling valid for each
    (``ceiling``, a share; NaN: none holds for it) and ``gap_to_ceiling`` (ceiling −
    attainment, in shares)."""
    shares = [math.nan if c is None else c.share
              for c in map(ceilings.for_schedule, table["schedule"])]
    table["ceiling"] = shares
    table["gap_to_ceiling"] = [c - a if not (math.isnan(c) or pd.isna(a)) else math.nan
                               for c, a in zip(shares, table["attainment"], strict=True)]


# --------------------------------------------------------------------- G (Huang et al.)

@dataclass
class PriorityComparison:
    """One row per schedule (``schedule``, ``scored_by``, ``g_per_s``, ``n_met``,
    ``requests``, ``total_e2e_s``, ``makespan_s``, ``gap_to_bound``) and the bound on G."""

    table: pd.DataFrame
    bound_g_per_s: float | None  # None: no bound
    bound_proof: str
    schedules: dict[str, Schedule]
    results: dict[str, Result]
    notes: list[str] = field(default_factory=list)
    instances: int = 1  # the model instances the plans and the bound are for
    interrupted: bool = False  # (a stop signal ends the compare as an error here)
    failed: dict[str, str] = field(default_factory=dict)  # policy: why it could not run


def by_g(instance: Instance, policies: list[str], time_limit_s: float,
         progress: Progress = SILENT, optimize: bool = True) -> PriorityComparison:
    """Replay ``policies``; with ``optimize``, also solve ``slo-priority`` (CP-SAT from SA's
    plan) and serve its plan. The bound is CP-SAT's when it solved, else the closed-form one
    every solver reports (``simple_bound``). The replays start only within ``time_limit_s``
    (the first always runs); the solve gets the time left. On several model instances,
    Algorithm 2's plan (``cluster.plan_cluster``, SA per instance) and its replay, and the
    closed-form bound over every plan of Algorithm 2 (``cluster.cluster_g_bound``)."""
    rows: list[dict[str, object]] = []
    schedules: dict[str, Schedule] = {}
    results: dict[str, Result] = {}
    notes: list[str] = []
    one_instance = instance.system.instances == 1
    deadline = Deadline.after(time_limit_s)
    failed: dict[str, str] = {}
    replay_notes = _replayed(instance, policies, deadline, time_limit_s, progress, results,
                             failed, schedules)
    rows += [_replayed_row(policy, schedules[policy], instance) for policy in schedules]
    notes += replay_notes
    bound: float | None = None
    proof = ""
    if optimize and one_instance:
        progress.stage("slo-priority (CP-SAT from SA's plan)")
        try:
            plan = solve(instance, "slo-priority", "cpsat", _seconds(deadline), progress)
        except LlmoptError as exc:
            notes.append(f"slo-priority not solved: {exc}")
        else:
            results[PLAN] = plan
            found = priority_plan(plan)
            rows.append({"schedule": f"{PLAN} ({plan.status})", "scored_by": BY_MODEL,
                         "g_per_s": found.g_per_s, "n_met": found.n_met,
                         "requests": instance.num_requests,
                         "total_e2e_s": found.total_latency_ms / 1000.0,
                         "makespan_s": float("nan")})
            bound, proof = found.g_bound_per_s, plan.proof or "CP-SAT"
            schedules[PLAN_REPLAYED] = replay_plan(instance, plan)
            rows.append(_replayed_row(PLAN_REPLAYED, schedules[PLAN_REPLAYED], instance))
    if optimize and not one_instance:
        progress.stage("Algorithm 2: instance assignment, then SA per instance")
        rows += _cluster_rows(instance, schedules, notes)
    if bound is None and one_instance:
        bound = simple_bound(SloPriorityData.from_instance(instance))
        proof = f"{SIMPLE_BOUND_PROOF}, closed form"
    elif bound is None:
        bound = cluster_g_bound(SloPriorityData.from_instance(instance),
                                instance.system.instances)
        proof = f"{CLUSTER_BOUND_PROOF}; closed form"
    ceilings = policy_ceilings(instance, policies, time_limit_s, progress)
    if ceilings is not None and ceilings.note:
        notes.append(ceilings.note)  # G's family has no SLO attainment ceiling
    table = pd.DataFrame(rows)
    table["gap_to_bound"] = [
        (bound - g) / bound if scored == BY_MODEL and bound else float("nan")
        for g, scored in zip(table["g_per_s"], table["scored_by"], strict=True)]
    return PriorityComparison(table, bound, proof, schedules, results, notes,
                              instance.system.instances, failed=failed)


def _cluster_rows(instance: Instance, schedules: dict[str, Schedule], notes: list[str]
                  ) -> list[dict[str, object]]:
    """Algorithm 2's plan on the instance's model instances (InstAssign with
    ``system.kv_capacity`` tokens per instance, or, without one, the requests' total: every
    request then goes where the most is left) scored by eqs 14–17, and its replay."""
    data = SloPriorityData.from_instance(instance)
    kv = instance.system.kv_capacity or sum(data.input_tokens) + sum(data.output_tokens)
    try:
        plan = plan_cluster(data, [kv] * instance.system.instances)
    except LlmoptError as exc:
        notes.append(f"Algorithm 2 not planned: {exc}")
        return []
    schedules[CLUSTER_PLAN_REPLAYED] = replay_cluster_plan(instance, plan)
    return [{"schedule": CLUSTER_PLAN, "scored_by": BY_MODEL, "g_per_s": plan.g_per_s,
             "n_met": plan.n_met, "requests": instance.num_requests,
             "total_e2e_s": plan.total_ms / 1000.0, "makespan_s": float("nan")},
            _replayed_row(CLUSTER_PLAN_REPLAYED, schedules[CLUSTER_PLAN_REPLAYED], instance)]


def _replayed_row(name: str, schedule: Schedule, instance: Instance) -> dict[str, object]:
    g = replayed_g(schedule, instance)
    return {"schedule": name, "scored_by": "replay", "g_per_s": g.g_per_s, "n_met": g.n_met,
            "requests": instance.num_requests, "total_e2e_s": g.total_ms / 1000.0,
            "makespan_s": schedule.makespan_ms / 1000.0}


# --------------------------------------------------------------------- section 5 (SCLS)

@dataclass
class LadderComparison:
    """The section 5 metrics of each schedule (``policies.slice.replay.LADDER_COLUMNS``), by
    schedule name, with ``gap_to_bound`` (last end − its bound) / last end; the model
    instances they ran on; and the lower bounds of ``problems.scls.bounds`` valid for the
    schedules of each engine ("slice", "iteration": ``bounds[engine]``) with ``notes``."""

    table: pd.DataFrame
    instances: int
    bounds: dict[str, SliceBounds] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False


def by_section5(instance: Instance, policies: list[str], time_limit_s: float = 60.0,
                progress: Progress = SILENT, optimize: bool = True) -> LadderComparison:
    """The slice-level schedulers (Cheng et al. 2024, Fig. 15's ladder) and ILS side by side:
    their section 5 metrics, beside lower bounds on the last end and the response times valid
    for every slice-level schedule, and for every continuous-batching one
    (``problems.scls.bounds``), each schedule's gap measured against the bound of its engine.
    No exact row: llmopt has no exact model of a whole slice-level cluster replay (its exact
    checks are per period: ``scls-batching``)."""
    metrics, engines = {}, {}
    for name in policies:
        engines[name] = POLICIES[name].engine.value
        if POLICIES[name].engine is Engine.SLICE:
            metrics[name] = replay_policy(instance, name).metrics
        else:
            metrics[name] = _iteration_section5(instance, name)
    table = ladder_table(metrics)
    bounds: dict[str, SliceBounds] = {}
    notes: list[str] = []
    for engine in dict.fromkeys(engines.values()):
        found = slice_bounds(instance, BoundEngine(engine))
        if found is None:
            notes.append(f"no lower bound for the {engine}-level schedules: a coefficient of "
                         "eqs 3–4 is negative")
        else:
            bounds[engine] = found
    ceilings = policy_ceilings(instance, policies, time_limit_s, progress)
    if ceilings is not None and ceilings.note:
        notes.append(ceilings.note)
    table["gap_to_bound"] = [
        (last - bounds[engines[name]].makespan_ms) / last
        if engines[name] in bounds and last > 0 else math.nan
        for name, last in zip(table["schedule"], table["makespan_ms"], strict=True)]
    return LadderComparison(table, instance.system.instances, bounds, notes)


def _iteration_section5(instance: Instance, name: str) -> dict[str, float]:
    """Section 5's metrics of an iteration-level replay (ILS) on the instance's model
    instances, as the slice-level replays define them (no slices: ``slices_per_request``
    NaN)."""
    _, schedule = replay_result(instance, name)
    return {**section5_metrics(schedule, instance.system.instances),
            "slices_per_request": math.nan}


__all__ = ["BY_MODEL", "PLAN", "PLAN_REPLAYED", "Comparison", "LadderComparison",
           "PriorityComparison", "by_g", "by_section5", "by_total_time", "compare"]
