"""Lower bounds from the PD-competition models (Pang et al. 2025, eqs 1–25): the LP relaxation
of the original MIP and CP-SAT's proven bound on the compact model, each valid because it uses
K ≥ K_max bins; and every bound of the Pang family behind one signature."""

from __future__ import annotations

import pyomo.environ as pyo

from llmopt.backends.common import OutOfTime
from llmopt.backends.cpsat import solve_cpsat
from llmopt.backends.highs import solve_highs
from llmopt.data.instance import Instance
from llmopt.deadline import Deadline
from llmopt.errors import InstanceError
from llmopt.problems.base import Bound, Simulation
from llmopt.problems.pang import pd_compact, pd_competition, pd_original
from llmopt.problems.pang.binpacking import solve as solve_binpacking
from llmopt.problems.pang.bounds import pang_bounds
from llmopt.problems.pang.pd_plan import PDProblem
from llmopt.progress import SILENT, Progress
from llmopt.result import Result

PACKING_SHARE = 0.4  # of the time limit, for the bin packing, when solver bounds follow it
SIZE_LIMIT = 400_000  # request × client × bin triples of the LP; a twentieth: CP-SAT's pairs


def pd_solver_bounds(instance: Instance, deadline: Deadline, progress: Progress = SILENT,
                     size_limit: int = SIZE_LIMIT,
                     time_models: tuple[str, ...] = ("stage", "replay"),
                     packing: Result | None = None, *, simulation: Simulation) -> list[Bound]:
    """Bounds from the PD-competition models, valid because they use K ≥ K_max bins (no
    schedule better than the best heuristic has more prefill stages):

    - the LP relaxation of the original MIP (eqs 1–25), stage model;
    - CP-SAT's proven bound on the compact model, under the stage and the replay model.

    Models with more than ``size_limit`` request × client × bin triples (LP) or request × bin
    pairs (CP-SAT, a twentieth of it) are skipped, and so is a model whose estimated memory or
    building time does not fit (``Footprint``: 2 GB, its share of the time left); only
    ``time_models`` are bounded. Everything ends by ``deadline``: the heuristic plans (for
    K_max) get a fifth of the time, each model an equal share of what is left. ``packing`` is
    the bin packing's result when it is already known. None on an instance the
    PD-competition problem does not model (arrivals after 0, several model instances).
    ``simulation`` replays the heuristic policies."""
    try:
        problem = PDProblem.from_instance(instance)
    except InstanceError:
        return []
    packing = packing or pd_competition.decode_packing(instance, deadline.share(PACKING_SHARE))
    d_lb = pd_competition.decode_lower_bound(packing)
    replayed = pd_competition.replayed_plans(instance, problem, deadline.share(0.2),
                                            simulation=simulation)
    if replayed.interrupted:
        raise KeyboardInterrupt
    jobs = [(model, kind) for model in time_models
            for kind in (("lp", "cpsat") if model == "stage" else ("cpsat",))]
    out: list[Bound] = []
    upper_of: dict[str, tuple[float, int]] = {}
    for done, (model, kind) in enumerate(jobs):
        if model not in upper_of:
            heuristics = pd_competition.heuristic_plans(
                instance, problem, model, grid_time_s=min(5.0, 0.1 * deadline.left()),
                replayed=replayed)
            upper = heuristics.best[0]
            upper_of[model] = upper, pd_competition.max_useful_bins(problem, model, upper, d_lb)
        upper, k_max = upper_of[model]
        share = deadline.share(1 / (len(jobs) - done))
        if kind == "lp":
            bound = _lp_bound(problem, k_max, size_limit, share, progress)
        else:
            bound = _cpsat_bound(problem, model, k_max, d_lb, upper, size_limit // 20, share,
                                 progress)
        if bound is not None:
            out.append(bound)
    return out


def _lp_bound(problem: PDProblem, k_max: int, size_limit: int, deadline: Deadline,
              progress: Progress) -> Bound | None:
    """The LP relaxation of eqs 1–25 with K = K_max, if it fits (see ``pd_solver_bounds``)."""
    size = pd_original.estimated_size(problem, k_max)
    if (problem.n * problem.clients * k_max > size_limit
            or not pd_original.FOOTPRINT.fits(size, deadline.at)):
        return None
    progress.stage(f"LP relaxation of eqs 1–25 with K = {k_max}")
    try:
        m = pd_original.build(problem, k_max, cuts=False, deadline=deadline.at)
        pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
        res = solve_highs(m, time_limit_s=None, deadline=deadline.at)
    except OutOfTime:
        return None
    if res.interrupted:
        raise KeyboardInterrupt
    if res.ending != "optimal" or res.objective is None:
        return None
    return Bound(name="mip_lp_relaxation", value_ms=round(res.objective, 6),
                 equation="LP relaxation of eqs 1–25", time_model="stage",
                 valid_under="stage model, any prefill levels",
                 why=f"relaxes the original MIP with K = {k_max} ≥ K_max bins",
                 detail={"bins": k_max})


def _cpsat_bound(problem: PDProblem, model: str, k_max: int, d_lb: int, upper: float,
                 size_limit: int, deadline: Deadline, progress: Progress) -> Bound | None:
    """CP-SAT's proven bound on the compact model with K = K_max, if it fits."""
    if (problem.n * k_max > size_limit
            or not pd_compact.FOOTPRINT["cpsat"].fits(problem.n * k_max, deadline.at)):
        return None
    progress.stage(f"compact CP-SAT bound, {model} model, K = {k_max}")
    md, var = pd_compact.build_cpsat(problem, k_max, model, hint=None, min_decode_end=d_lb,
                                     horizon=pd_compact.decode_horizon(problem, upper, model))
    if deadline.passed():
        return None
    res = solve_cpsat(md, time_limit_s=deadline.seconds())
    if res.interrupted:
        raise KeyboardInterrupt
    if res.bound is None or res.bound <= 0:  # the objective's terms are ≥ 0: nothing proven
        return None
    value = res.bound / var["weights"].scale + problem.objective_offset_ms(model)
    return Bound(name=f"compact_cpsat_{model}", value_ms=round(min(value, upper), 6),
                 equation="CP-SAT best bound of the compact model", time_model=model,
                 valid_under=("stage model, any prefill levels" if model == "stage"
                              else "replay model, PD competition, batch-dependent rounds"),
                 why=f"proven by CP-SAT ({res.ending}) with K = {k_max} ≥ K_max bins",
                 detail={"bins": k_max, "status": res.ending})


def pang_family_bounds(instance: Instance, time_limit_s: float | None = 60.0,
                       progress: Progress = SILENT, solver_bounds: bool = True, *,
                       simulation: Simulation) -> list[Bound]:
    """Every bound of the Pang family: eqs 31–32 and the replay rounds bound, and (with
    ``solver_bounds``) the LP/CP-SAT bounds of the PD-competition models on small instances,
    all within ``time_limit_s``: the bin packing behind t_d gets all of it, or
    ``PACKING_SHARE`` when solver bounds follow. A stop signal raises KeyboardInterrupt."""
    deadline = Deadline.after(time_limit_s)
    progress.stage("t_d: offline bin packing (eqs 26–30)")
    packing = solve_binpacking(instance, "auto",
                               deadline.share(PACKING_SHARE if solver_bounds else 1.0).seconds(),
                               progress)
    if packing.interrupted:
        raise KeyboardInterrupt
    bounds = pang_bounds(instance, progress=progress, packing=packing)
    if solver_bounds:
        bounds += pd_solver_bounds(instance, deadline, progress, packing=packing,
                                   simulation=simulation)
    return bounds
