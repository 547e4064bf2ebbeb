"""Solving the PD-competition problem of Pang et al. 2025 (eqs 1–25) exactly.

``llmopt solve INSTANCE --problem pd-competition [--formulation original|compact]
[--solver auto|highs|cpsat] [--bins K] [--literal] [--time-model stage|replay]``

1. Heuristic plans: every PD-competition policy of the replay engine is replayed and turned
   into a plan (``pd_plan``), and grid plans are built (``pd_grid``); the best under the chosen
   time model is the incumbent. Under time pressure the replays stop at their share of the
   limit (the first always runs), and a stop signal keeps the plans found so far.
2. The chosen formulation is solved from that incumbent: ``original`` (eqs 1–25 in Pyomo,
   HiGHS, warm-started) or ``compact`` (``pd_compact``; CP-SAT by default, or HiGHS). With
   ``--solver auto`` on instances too large for the full compact model (more than
   ``FULL_MODEL_LIMIT`` request-bin pairs), CP-SAT re-optimises windows of bins instead
   (``pd_lns``) until the time limit.
3. The solver's plan becomes a schedule under the stage model (segments and iterations that
   ``llmopt validate`` checks) and is replayed by the engine under the profile's batch-dependent
   costs; both totals are reported.

Bins. The original model uses K bins, by default the number of prefill stages of the best
heuristic plan (so the warm start is feasible). The compact model uses K = K_max by default, the
most non-empty stages a schedule better than the incumbent can afford: every stage costs at
least the cheapest level and the decode axis is at least the bin-packing optimum long. With
K ≥ K_max more bins cannot help, so an optimal K-bin solution is optimal, full stop; with fewer,
the solver's proof holds only among schedules with at most K prefill stages, and the solution is
reported ``feasible`` with that proof in its notes.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmopt.backends import cpsat as cpsat_backend
from llmopt.backends import highs as highs_backend
from llmopt.backends.common import (
    Outcome,
    OutOfTime,
    answer_reserve_s,
    interrupted_before_the_solver,
    out_of_time_while_building,
    time_left,
)
from llmopt.backends.versions import version_of
from llmopt.data.instance import Instance
from llmopt.deadline import NONE, Deadline
from llmopt.errors import InternalError, OptionError
from llmopt.problems.base import Simulation
from llmopt.problems.outcome import decide, keep_better, proof_text, tighter_bound
from llmopt.problems.pang import binpacking, pd_compact, pd_lns, pd_original
from llmopt.problems.pang.bounds import pd_bounds
from llmopt.problems.pang.pd_grid import best_grid_plan
from llmopt.problems.pang.pd_plan import (
    TIME_MODELS,
    PDProblem,
    Plan,
    plan_from_schedule,
    stage_schedule,
)
from llmopt.progress import SILENT, Progress
from llmopt.result import Result, ScheduleData
from llmopt.signals import sigint_sets
from llmopt.version import __version__

SOLVERS = ("auto", "highs", "cpsat")
FULL_MODEL_LIMIT = 20_000
FORMULATIONS = ("original", "compact")
PACKING_POLICIES = ("offline", "hybrid")  # replay the bin packing's assignment: replayed last
HEURISTIC_SHARE = 0.3  # of the time limit, for the replays of the heuristic phase
PACKING_SHARE = 0.5    # of the time left after them, for the bin packing (at most 30 s)
# loading the original formulation into HiGHS (Pyomo's translation) takes this many times its
# building, measured 2.1x (gsm8k-small, K = 22: 3.3 s, 7.1 s) and 4x on toy sizes
LOAD_PER_BUILD = 2.5


@dataclass
class Replayed:
    """The plans of the PD-competition policies' replays, by policy; the policies the time
    left no room for; whether a stop signal (Ctrl-C, SIGTERM) ended the replays; the policies
    in the registry's order (the order of ties)."""

    plans: dict[str, Plan]
    skipped: list[str] = field(default_factory=list)
    interrupted: bool = False
    order: list[str] = field(default_factory=list)


@dataclass
class Heuristics:
    """(total under the time model, plan) of every heuristic plan found, best first; what was
    skipped for want of time; whether a stop signal ended the phase."""

    plans: list[tuple[float, Plan]]
    skipped: list[str] = field(default_factory=list)
    interrupted: bool = False

    @property
    def best(self) -> tuple[float, Plan]:
        return self.plans[0]

    def note(self) -> str | None:
        """What a result says of a phase cut short."""
        if self.interrupted:
            return "interrupted during the heuristic plans: the best found so far is kept"
        if self.skipped:
            return (f"time limit: the heuristic phase skipped {', '.join(self.skipped)} (a "
                    "longer --time-limit runs them)")
        return None


def replayed_plans(instance: Instance, problem: PDProblem, deadline: Deadline = NONE, *,
                   simulation: Simulation) -> Replayed:
    """The plans of the replays of the PD-competition policies (those the registry lists for
    this problem, replayed by ``simulation``), one replay at a time, the cheap ones first and
    then, if the bin packing they share (``reproducible_assignment``) finishes by
    ``deadline``, offline and hybrid. A replay starts only before ``deadline`` (the first
    always runs); a stop signal keeps the plans found so far (re-raised when there are none)."""
    plans: dict[str, Plan] = {}
    skipped: list[str] = []
    runs = dict(simulation.heuristics(instance, "pd-competition"))
    order = [p for p in runs if p not in PACKING_POLICIES] + [p for p in runs
                                                               if p in PACKING_POLICIES]
    try:
        for policy in order:
            if plans and (deadline.passed() or (
                    policy in PACKING_POLICIES and binpacking.reproducible_assignment_by(
                        binpacking.BinPacking.from_instance(instance), deadline.at) is None)):
                skipped.append(policy)
                continue
            plans[policy] = plan_from_schedule(problem, runs[policy]())
    except KeyboardInterrupt:
        if not plans:
            raise
        return Replayed(plans, [p for p in order if p not in plans], interrupted=True,
                        order=list(runs))
    return Replayed(plans, skipped, order=list(runs))


def heuristic_plans(instance: Instance, problem: PDProblem, model: str,
                    deadline: Deadline = NONE, *, grid_time_s: float = 10.0,
                    replayed: Replayed | None = None,
                    simulation: Simulation | None = None) -> Heuristics:
    """Every PD-competition policy's plan (``replayed_plans`` by ``deadline`` with
    ``simulation``, unless given) and the best grid plan (within ``grid_time_s``), ranked by
    their total under ``model`` (ties in the registry's order of the policies, the grid
    last)."""
    if replayed is None:
        if simulation is None:
            raise InternalError("heuristic_plans needs the replays or the simulation")
        replayed = replayed_plans(instance, problem, deadline, simulation=simulation)
    plans = [(plan.total_ms(problem, model), plan) for policy, plan in
             sorted(replayed.plans.items(), key=lambda kv: replayed.order.index(kv[0]))]
    interrupted = replayed.interrupted
    if not interrupted:
        try:
            grid = best_grid_plan(problem, model, grid_time_s)
        except KeyboardInterrupt:
            grid, interrupted = None, True
        if grid is not None:
            plans.append(grid)
    return Heuristics(sorted(plans, key=lambda tp: tp[0]), list(replayed.skipped), interrupted)


def decode_packing(instance: Instance, deadline: Deadline, progress: Progress = SILENT
                   ) -> Result:
    """The bin packing of eqs 26–30 by ``deadline`` (at most 30 s; an expired deadline gives
    LPT and the closed-form bound at once): its proven bound is the decode lower bound."""
    return binpacking.solve(instance, "auto", min(deadline.left(), 30.0), progress)


def decode_lower_bound(packing: Result) -> int:
    """The bin-packing optimum (or its proven bound) in tokens: no schedule's decode axis is
    shorter, since each client's requests occupy disjoint intervals of it."""
    return round((packing.bound or 0) / binpacking.packing_data(packing).t_round_ms)


def max_useful_bins(problem: PDProblem, model: str, upper_ms: float, d_lb: int) -> int:
    """K_max: no schedule cheaper than ``upper_ms`` has more non-empty prefill stages."""
    cheapest = (problem.profile.prefill.overhead_ms if model == "replay"
                else min(ms for cap, ms in problem.levels if cap > 0))
    room = upper_ms - problem.objective_offset_ms(model) - problem.round_weight_ms(model) * d_lb
    return max(1, min(problem.n, math.floor(room / cheapest + 1e-9)))


def solve(instance: Instance, solver: str = "auto", time_limit_s: float | None = 60.0,
          progress: Progress = SILENT, formulation: str = "compact", bins: int | None = None,
          literal: bool = False, time_model: str = "stage", cuts: bool = True, *,
          simulation: Simulation) -> Result:
    """``simulation`` replays the paper's policies for the incumbent and follows the final
    plan (``llmopt.solve`` gives it). The phases share the time limit: the heuristic replays
    a ``HEURISTIC_SHARE`` of it (the grid plans their own fifth, at most 10 s), the bin packing
    half of what is left (at most 30 s), the model the rest, less the reserve of ``time_left``
    for reading and replaying its answer. A stop signal in any phase keeps the best plan found
    so far."""
    t0 = time.perf_counter()
    limit = time_limit_s if time_limit_s is not None else math.inf
    deadline = Deadline.after(time_limit_s)
    if formulation not in FORMULATIONS:
        raise OptionError(f"unknown formulation (known: {', '.join(FORMULATIONS)})",
                          field="--formulation", value=formulation)
    if time_model not in TIME_MODELS:
        raise OptionError(f"unknown time model (known: {', '.join(TIME_MODELS)})",
                          field="--time-model", value=time_model)
    backend = solver if solver != "auto" else ("highs" if formulation == "original" else "cpsat")
    if formulation == "original" and backend != "highs":
        raise OptionError("the original MIP has continuous shares w: solve it with highs",
                          field="--solver", value=solver)
    if formulation == "original" and time_model != "stage":
        raise OptionError("the original MIP is the stage model", field="--time-model",
                          value=time_model)
    if bins is not None and bins < 1:
        raise OptionError("must be at least 1", field="--bins", value=bins)
    problem = PDProblem.from_instance(instance)
    progress.stage("heuristic plans (replays of the paper's policies, grid plans)")
    heuristics = heuristic_plans(instance, problem, time_model,
                                 deadline.share(HEURISTIC_SHARE),
                                 grid_time_s=min(10.0, 0.2 * limit), simulation=simulation)
    best_total, best = heuristics.best
    progress.incumbent(best_total, None, " ms")
    K, k_max, packing = bins or best.prefill_stages(), None, None
    stopped = threading.Event()
    try:  # from here on an incumbent exists: a stop signal keeps it
        if heuristics.interrupted:
            raise KeyboardInterrupt
        packing = decode_packing(instance, deadline.share(PACKING_SHARE))
        if packing.interrupted:
            raise KeyboardInterrupt
        d_lb = decode_lower_bound(packing)
        k_max = max_useful_bins(problem, time_model, best_total, d_lb)
        K = bins or (best.prefill_stages() if formulation == "original" else k_max)
        out = _solve_model(problem, best, best_total, K, d_lb, formulation, backend, solver,
                           time_model, literal, cuts, deadline.at, limit, progress)
    except KeyboardInterrupt:
        phase = ("the heuristic plans" if heuristics.interrupted
                 else "the bounds or the model building")
        out = interrupted_before_the_solver(version_of(backend), phase)
    with sigint_sets(stopped):  # the answer is assembled whatever signal comes now
        if packing is None:  # stopped before it: LPT and the closed-form bound, at once
            packing = decode_packing(instance, Deadline.after(0.0))
        result = _result(instance, problem, out, heuristics, K, k_max, packing, formulation,
                         backend, solver, time_model, literal, t0, time_limit_s, simulation)
    result.interrupted = result.interrupted or stopped.is_set()
    return result


def _solve_model(problem: PDProblem, best: Plan, best_total: float, K: int, d_lb: int,
                 formulation: str, backend: str, solver: str, time_model: str, literal: bool,
                 cuts: bool, deadline: float, limit: float, progress: Progress) -> Outcome:
    """The chosen formulation on ``K`` bins, warm-started from the best heuristic plan, by
    ``deadline`` (perf_counter seconds; ``limit`` is the whole time limit)."""
    padded = None if best.prefill_stages() > K else _pad(best, K, problem)
    horizon = pd_compact.decode_horizon(problem, best_total, time_model)
    use_lns = (solver == "auto" and formulation == "compact"
               and problem.n * K > FULL_MODEL_LIMIT)
    progress.stage(f"{formulation} formulation, {backend}, K = {K} bins"
                   + (" (window LNS)" if use_lns else ""))
    solver_deadline = deadline - answer_reserve_s(limit)  # then reading and replaying
    if use_lns:
        out = _lns(problem, best, time_model, solver_deadline, progress)
    elif formulation == "original":
        if (too_large := _original_too_large(problem, K, deadline)) is not None:
            return too_large
        try:
            built_at = time.perf_counter()
            m = pd_original.build(problem, K, literal=literal, cuts=cuts, decode_lb=d_lb,
                                  deadline=solver_deadline)
            build_s = time.perf_counter() - built_at
            if time.perf_counter() + LOAD_PER_BUILD * build_s > solver_deadline:
                raise OutOfTime  # HiGHS's loading cannot be stopped once started
            start = pd_original.warm_start(m, problem, padded) if padded else None
            out = highs_backend.solve_highs(
                m, time_limit_s=None, deadline=solver_deadline, progress=progress,
                warm_start=start, unit=" ms",
                collect=lambda value: pd_original.extract_plan(m, problem, K, value))
        except OutOfTime:
            return out_of_time_while_building(highs_backend.version())
    elif (too_large := _compact_too_large(problem, K, backend, deadline)) is not None:
        return too_large
    elif backend == "cpsat":
        md, var = pd_compact.build_cpsat(problem, K, time_model, horizon=horizon, hint=padded,
                                         min_decode_end=d_lb)
        W = var["weights"]
        remaining = time_left(deadline, limit)
        if remaining is None:
            return out_of_time_while_building(cpsat_backend.version())
        out = cpsat_backend.solve_cpsat(
            md, time_limit_s=remaining, progress=progress, scale=1 / W.scale, unit=" ms",
            collect=lambda value: pd_compact.plan_from_bins(
                problem, np.array([value(v) for v in var["bin"]]), "compact CP-SAT"))
        offset = problem.objective_offset_ms(time_model)
        out.objective = None if out.objective is None else out.objective / W.scale + offset
        out.bound = None if out.bound is None else out.bound / W.scale + offset
        if not W.exact:
            out.message += "; objective coefficients rounded to 1e-6 ms"
    else:
        m = pd_compact.build_highs(problem, K, time_model, horizon=horizon)
        try:
            out = highs_backend.solve_highs(
                m, time_limit_s=None, deadline=solver_deadline, progress=progress, unit=" ms",
                collect=lambda value: pd_compact.plan_from_bins(
                    problem, pd_compact.highs_bins(m, problem, K, value), "compact HiGHS"))
        except OutOfTime:
            return out_of_time_while_building(highs_backend.version())
    return out


def _original_too_large(problem: PDProblem, K: int, deadline: float) -> Outcome | None:
    size = pd_original.estimated_size(problem, K)
    return pd_original.FOOTPRINT.too_large(
        size, f"the original formulation with K = {K} bins ({size:,} variables and constraints)",
        "use --formulation compact or fewer --bins", version_of("highs"), deadline)


def _compact_too_large(problem: PDProblem, K: int, backend: str, deadline: float
                       ) -> Outcome | None:
    return pd_compact.FOOTPRINT[backend].too_large(
        problem.n * K, f"the compact formulation with K = {K} bins for {problem.n} requests",
        "use --solver auto (window search) or fewer --bins", version_of(backend), deadline)


def _lns(problem: PDProblem, start: Plan, model: str, deadline: float, progress: Progress):
    """Window LNS from ``start``; an Outcome without a proof (bound None)."""
    t = time.perf_counter()
    plan, interrupted = pd_lns.improve_plan(problem, start, model, deadline, progress=progress)
    return Outcome(ending="feasible", objective=plan.total_ms(problem, model), bound=None,
                   runtime_s=time.perf_counter() - t, solver_version=cpsat_backend.version(),
                   interrupted=interrupted, message="window LNS (no proof)", solution=plan)


def _pad(plan: Plan, K: int, problem: PDProblem) -> Plan:
    bins = [b for b in plan.bins if b]
    starts = [s for b, s in zip(plan.bins, plan.starts, strict=True) if b]
    end = plan.decode_end(problem)
    return Plan(bins + [[] for _ in range(K - len(bins))], starts + [end] * (K - len(bins)),
                plan.client, plan.source)


def _result(instance: Instance, problem: PDProblem, out, heuristics: Heuristics, K: int,
            k_max: int | None, packing: Result, formulation: str, backend: str, solver: str,
            time_model: str, literal: bool, t0: float, time_limit_s: float | None,
            simulation: Simulation) -> Result:
    total, plan = keep_better(heuristics.best, None if out.solution is None else
                              (out.solution.total_ms(problem, time_model), out.solution),
                              tol=1e-6)
    broken = plan.check(problem)
    if broken:
        raise InternalError(f"the {plan.source} plan breaks a rule of the problem: {broken[0]}")
    global_bounds = pd_bounds(instance, time_model, packing=packing)
    bound = max(b.value_ms for b in global_bounds)
    notes = [f"K = {K} bins; K_max = {k_max if k_max is not None else 'not computed'}",
             f"time model: {time_model}"]
    if (cut_short := heuristics.note()) is not None:
        notes.append(cut_short)
    if literal:
        notes.append("literal eq 13 and no w ≤ d link (see docs/formulations.md)")
    proof = None
    all_bins = k_max is not None and k_max <= K  # the model holds every optimal schedule
    solver_proved = out.bound is not None and (
        out.ending == "optimal" or out.bound >= total - 1e-6 * max(1.0, total))
    if solver_proved and all_bins and not literal:
        bound = tighter_bound(bound, min(out.bound, total))
        proof = proof_text(backend, f"closed the gap of the {formulation} model with K = {K} "
                                    f"≥ K_max = {k_max} bins")
    elif solver_proved:
        notes.append(f"{backend} proved this optimal among schedules with at most {K} prefill "
                     f"stages (K_max = {k_max}); run with --bins {k_max} for a full proof")
    elif out.bound is not None and all_bins and not literal:
        bound = tighter_bound(bound, out.bound)
    replayed = simulation.follow(instance, plan.to_data(problem))
    if time_model == "stage":
        schedule, objective = stage_schedule(problem, plan), total
    else:
        schedule, objective = replayed, replayed.makespan_ms
        if objective > total + 1e-3:
            notes.append(f"the replay followed the plan {objective - total:.1f} ms late (the KV "
                         "budget delayed a stage)")
            proof = None
    verdict = decide(objective, bound, proof=proof, tol=1e-6 * max(1.0, objective),
                     what="the makespan (ms)")
    data = CompetitionPlan(
        mode="pd_competition", metrics=schedule.metrics(), formulation=formulation, bins=K,
        time_model=time_model,
        objective_stage_model_ms=round(plan.total_ms(problem, "stage"), 6),
        objective_replay_ms=round(replayed.makespan_ms, 6),
        prefill_stages=plan.prefill_stages(), decode_rounds=plan.decode_end(problem),
        heuristics={p.source.removeprefix("replay "): round(t, 6) for t, p in heuristics.plans},
        bounds={b.name: b.value_ms for b in global_bounds}, clients=problem.clients,
        plan=plan.to_data(problem))
    version = version_of(backend)
    return Result(problem="pd-competition", solver=solver, status=verdict.status,
                  objective=round(objective, 3), bound=round(min(bound, objective), 3),
                  runtime_s=time.perf_counter() - t0, time_limit_s=time_limit_s,
                  solver_version=f"llmopt {__version__} + {version}", data=data,
                  proof=verdict.proof, interrupted=out.interrupted,
                  notes=[*notes, out.message] if out.message else notes,
                  schedule=schedule)


@dataclass
class CompetitionPlan(ScheduleData):
    """A pd-competition solution's data (``Result.data``): besides the schedule's mode and
    metrics, the formulation, K (bins), the time model, the plan's total under the stage model
    and replayed (ms), its prefill stages and decode rounds, each heuristic's total and each
    global bound (ms), the clients, and the plan itself (``Plan.to_data``: assignment, order,
    stages)."""

    formulation: str
    bins: int
    time_model: str
    objective_stage_model_ms: float
    objective_replay_ms: float
    prefill_stages: int
    decode_rounds: int
    heuristics: dict[str, float]
    bounds: dict[str, float]
    clients: int
    plan: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"formulation": self.formulation, "bins": self.bins,
                "time_model": self.time_model,
                "objective_stage_model_ms": self.objective_stage_model_ms,
                "objective_replay_ms": self.objective_replay_ms,
                "prefill_stages": self.prefill_stages, "decode_rounds": self.decode_rounds,
                "heuristics": self.heuristics, "bounds": self.bounds, "mode": self.mode,
                "clients": self.clients, "metrics": self.metrics, **self.plan}


def describe(result: Result) -> list[str]:
    """What ``llmopt solve`` prints of a PD-competition result beside its status and bound:
    the plan's size, its total under both time models, and the heuristics'."""
    d = result.data
    if not isinstance(d, CompetitionPlan):
        return []
    return [f"{d.prefill_stages} prefill stages, {d.decode_rounds} decode rounds; "
            f"stage model {d.objective_stage_model_ms:,.1f} ms, replayed with "
            f"batch-dependent rounds {d.objective_replay_ms:,.1f} ms",
            "heuristics: " + ", ".join(f"{k} {v:,.1f}" for k, v in d.heuristics.items())]
