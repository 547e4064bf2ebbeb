"""Solver front end: ``solve(instance, problem=…, solver=…, time_limit_s=…) -> Result`` and
``bounds(instance)``, both dispatched through the registry (``problems.registry``).

A workflow module (above problems and policies): a solver that starts from the replay engine's
schedules or follows its plan on the engine takes a ``simulation`` keyword, and ``solve`` gives
it the replay engine (``workflows.simulation.ENGINE``)."""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, OptionError, unknown_name
from llmopt.plugins import load
from llmopt.problems.base import Bound
from llmopt.problems.registry import FAMILIES, PROBLEMS, FamilyInfo, bounded_families
from llmopt.progress import SILENT, Progress
from llmopt.result import Result

# the replay engine solvers may be given, loaded when one takes it (it imports the simulation)
ENGINE = "llmopt.problems.workflows.simulation:ENGINE"
DEFAULT_PROBLEM = "binpacking"
DEFAULT_TIME_LIMIT_S = 60.0
# problems whose solve() answers a time limit of 0 with its heuristic and bound at once
ZERO_TIME_LIMIT_PROBLEMS = ("binpacking",)


def resolve_options(instance: Instance, problem: str | None, solver: str | None,
                    time_limit_s: float | None) -> tuple[str, str, float | None]:
    """Command-line values win over the instance's ``solve:`` defaults, which win over ours:
    the first problem registered for the instance's profile family (binpacking for Pang's)."""
    problem = problem or instance.solve.problem or next(
        (p.name for p in PROBLEMS.values() if p.family == instance.profile.family),
        DEFAULT_PROBLEM)
    field_of = "solve.problem" if instance.solve.problem == problem else "--problem"
    if problem not in PROBLEMS:
        raise OptionError(unknown_name("problem", problem, PROBLEMS),
                          file=instance.label() if field_of.startswith("solve") else None,
                          field=field_of, value=problem)
    solvers = PROBLEMS[problem].solvers
    solver = solver or instance.solve.solver or solvers[0]
    if time_limit_s is None:
        time_limit_s = instance.solve.time_limit_s or DEFAULT_TIME_LIMIT_S
    if solver not in solvers:
        from_file = instance.solve.solver == solver
        raise OptionError(unknown_name(f"solver for {problem}", solver, solvers),
                          file=instance.label() if from_file else None,
                          field="solve.solver" if from_file else "--solver", value=solver)
    if time_limit_s is not None and (not math.isfinite(time_limit_s) or time_limit_s < 0 or (
            time_limit_s == 0 and problem not in ZERO_TIME_LIMIT_PROBLEMS)):
        allowed = "positive" if problem not in ZERO_TIME_LIMIT_PROBLEMS else "0 or positive"
        raise OptionError(f"must be {allowed} and finite", field="--time-limit",
                          value=time_limit_s)
    return problem, solver, time_limit_s


def solve(instance: Instance, problem: str | None = None, solver: str | None = None,
          time_limit_s: float | None = None, progress: Progress = SILENT,
          **options: Any) -> Result:
    """Solve ``problem`` on ``instance``; the result keeps the incumbent and the best bound even
    when the time limit is hit or the run is interrupted. ``options`` are the problem's own
    (``PROBLEMS[problem].options``; pd-competition: formulation, bins, literal, time_model)."""
    family = FAMILIES.get(instance.profile.family)
    if family is not None and family.unbounded_why:
        raise InstanceError(f"no exact problem for profile family {instance.profile.family}: "
                            f"{family.unbounded_why}", file=instance.label(), field="model",
                            value=instance.profile.name)
    problem, solver, time_limit_s = resolve_options(instance, problem, solver, time_limit_s)
    if instance.system.prefix_caching:
        raise InstanceError(f"the exact models ({problem}) assume every prompt token is "
                            "computed: none models a prefix cache; solve with prefix_caching "
                            "off, or replay policies with it on", file=instance.label(),
                            field="system.prefix_caching", value=True)
    info = PROBLEMS[problem]
    unknown = sorted(k for k, v in options.items() if v is not None and k not in info.options)
    if unknown:
        raise OptionError(f"not an option of problem {problem}",
                          field=f"--{unknown[0].replace('_', '-')}", value=options[unknown[0]])
    given = {k: v for k, v in options.items() if v is not None}
    logging.getLogger("pyomo.contrib.solver").setLevel(logging.ERROR)
    run = load(info.solve)
    if "simulation" in inspect.signature(run).parameters:
        given["simulation"] = load(ENGINE)
    try:
        result: Result = run(instance, solver=solver, time_limit_s=time_limit_s,
                             progress=progress, **given)
        return result
    finally:
        progress.done()


def bounds(instance: Instance, time_limit_s: float | None = None, progress: Progress = SILENT,
           solver_bounds: bool = True) -> list[Bound]:
    """The lower bounds of the instance's cost-profile family, each saying the time model it
    holds under."""
    limit = time_limit_s or instance.solve.time_limit_s or DEFAULT_TIME_LIMIT_S
    if not (math.isfinite(limit) and limit > 0):
        raise OptionError("must be positive and finite", field="--time-limit", value=limit)
    found: list[Bound] = load(family_of(instance).bounds)(instance, limit, progress,
                                                          solver_bounds,
                                                          simulation=load(ENGINE))
    return found


def family_of(instance: Instance, *, for_bounds: bool = True) -> FamilyInfo:
    """The registry's entry of the instance's profile family; with ``for_bounds``, refused
    when the family has no bounds or exact problem."""
    family = instance.profile.family
    info = FAMILIES.get(family)
    if info is not None and for_bounds and info.unbounded_why:
        raise OptionError(f"no bounds or exact problem for profile family {family!r}: "
                          f"{info.unbounded_why}", file=instance.label(), field="model",
                          value=instance.profile.name)
    if info is None or (for_bounds and not info.bounds):
        raise OptionError(f"no bounds or exact problem for profile family {family!r} (known: "
                          f"{', '.join(bounded_families())})", field="model",
                          value=instance.profile.name)
    return info
