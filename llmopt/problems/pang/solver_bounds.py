"""Lower bounds from the PD-competition models (Pang et al. 2025, eqs 1–25): the LP relaxation
of the original MIP and CP-SAT's proven bound on the compact model, each valid because it uses
K ≥ K_max bins; and every bound of the Pang family behind one signature."""

from __future__ import annotations

import pyomo.environ as pyo

from llmopt.backends.cpsat import solve_cpsat
from llmopt.backends.highs import solve_highs
from llmopt.data.instance import Instance
from llmopt.problems.base import Bound, Simulation
from llmopt.problems.pang import pd_compact, pd_competition, pd_original
from llmopt.problems.pang.bounds import pang_bounds
from llmopt.problems.pang.pd_plan import PDProblem
from llmopt.progress import SILENT, Progress


def pd_solver_bounds(instance: Instance, time_limit_s: float = 30.0,
                     progress: Progress = SILENT, size_limit: int = 400_000,
                     time_models: tuple[str, ...] = ("stage", "replay"), *,
                     simulation: Simulation) -> list[Bound]:
    """Bounds from the PD-competition models, valid because they use K ≥ K_max bins (no
    schedule better than the best heuristic has more prefill stages):

    - the LP relaxation of the original MIP (eqs 1–25), stage model;
    - CP-SAT's proven bound on the compact model, under the stage and the replay model.

    Models with more than ``size_limit`` request × client × bin triples (LP) or request × bin
    pairs (CP-SAT, a twentieth of it) are skipped; only ``time_models`` are bounded."""
    problem = PDProblem.from_instance(instance)
    d_lb = pd_competition.decode_lower_bound(instance, time_limit_s)
    out: list[Bound] = []
    for model in time_models:
        plans = pd_competition.heuristic_plans(instance, problem, model, 5.0,
                                               simulation=simulation)
        upper = plans[0][0]
        k_max = pd_competition.max_useful_bins(problem, model, upper, d_lb)
        if model == "stage" and problem.n * problem.clients * k_max <= size_limit:
            progress.stage(f"LP relaxation of eqs 1–25 with K = {k_max}")
            m = pd_original.build(problem, k_max, cuts=False)
            pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
            res = solve_highs(m, time_limit_s=time_limit_s)
            if res.ending == "optimal" and res.objective is not None:
                out.append(Bound(
                    name="mip_lp_relaxation", value_ms=round(res.objective, 6),
                    equation="LP relaxation of eqs 1–25", time_model="stage",
                    valid_under="stage model, any prefill levels",
                    why=f"relaxes the original MIP with K = {k_max} ≥ K_max bins",
                    detail={"bins": k_max}))
        if problem.n * k_max <= size_limit // 20:
            progress.stage(f"compact CP-SAT bound, {model} model, K = {k_max}")
            md, var = pd_compact.build_cpsat(problem, k_max, model, hint=None,
                                             min_decode_end=d_lb,
                                             horizon=pd_compact.decode_horizon(problem, upper,
                                                                               model))
            res = solve_cpsat(md, time_limit_s=time_limit_s)
            if res.bound is not None:
                value = res.bound / var["weights"].scale + problem.objective_offset_ms(model)
                out.append(Bound(
                    name=f"compact_cpsat_{model}", value_ms=round(min(value, upper), 6),
                    equation="CP-SAT best bound of the compact model",
                    time_model=model,
                    valid_under=("stage model, any prefill levels" if model == "stage"
                                 else "replay model, PD competition, batch-dependent rounds"),
                    why=f"proven by CP-SAT ({res.ending}) with K = {k_max} ≥ K_max bins",
                    detail={"bins": k_max, "status": res.ending}))
    return out


def pang_family_bounds(instance: Instance, time_limit_s: float | None = 60.0,
                       progress: Progress = SILENT, solver_bounds: bool = True, *,
                       simulation: Simulation) -> list[Bound]:
    """Every bound of the Pang family: eqs 31–32 and the replay rounds bound, and (with
    ``solver_bounds``) the LP/CP-SAT bounds of the PD-competition models on small instances."""
    bounds = pang_bounds(instance, time_limit_s, progress)
    if solver_bounds:
        bounds += pd_solver_bounds(instance, min(time_limit_s or 30.0, 30.0), progress,
                                   simulation=simulation)
    return bounds
