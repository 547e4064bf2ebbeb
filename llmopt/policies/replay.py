"""Replay: a registered policy (or a solver's plan) simulated on an instance.

``replay(instance, "hybrid")`` deploys the policy on every replica of the system (one policy
per replica, the policy's router or the one asked for) and runs the cluster simulation; it
returns a :class:`~llmopt.schedule.Schedule`. ``replay_result`` wraps it in a solution
:class:`~llmopt.result.Result` (problem ``replay``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import OptionError, unknown_name
from llmopt.plugins import load
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.registry import POLICIES, ROUTERS, SLICE_POLICIES, check_family
from llmopt.progress import SILENT, Progress
from llmopt.result import Result
from llmopt.schedule import Schedule
from llmopt.sim.cluster import Deployment, simulate
from llmopt.version import __version__


def deployment(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
               router: str | None = None, progress: Progress = SILENT) -> Deployment:
    """The policies and router that replay ``policy`` on ``instance``."""
    if policy not in POLICIES:
        raise OptionError(unknown_name("policy", policy, POLICIES), field="--policy",
                          value=policy)
    if router is not None and router not in ROUTERS:
        raise OptionError(unknown_name("router", router, ROUTERS), field="--router",
                          value=router)
    check_family(instance, policy)
    if policy in SLICE_POLICIES:
        raise OptionError("schedules slices (padded static batches that move between model "
                          "instances), not iterations: replay it with `llmopt replay` or "
                          "llmopt.policies.slice.replay.slice_result", field="--policy",
                          value=policy)
    chosen = ROUTERS[router].make() if router else None
    if POLICIES[policy].family == "scls":  # iteration-level on Cheng et al.'s profile: ILS
        return load("llmopt.policies.slice.ils:deploy")(instance, router=chosen)
    if POLICIES[policy].family == "bilinear" or (
            policy == "plan" and isinstance(plan, Mapping)
            and plan.get("problem") == "slo-priority"):  # Huang et al.'s static batches
        return load("llmopt.policies.slo_priority:deploy")(instance, policy, plan=plan,
                                                            router=chosen)
    if policy == "plan" and isinstance(plan, Mapping) and plan.get("mode") == "continuous":
        if chosen is not None:
            raise OptionError("a plan of batches fixes its replica; no router applies",
                              field="--router", value=router)
        return load("llmopt.policies.infermax:deploy_plan")(instance, plan)
    if policy == "sola" or (policy in SCHEDULERS and SCHEDULERS[policy].engine != "unified"):
        return load("llmopt.policies.slo:deploy")(instance, policy, router=chosen)
    if policy in SCHEDULERS:
        return load("llmopt.policies.infermax:deploy")(instance, policy, router=chosen)
    # the Pang policies need the bin packing (Pyomo, OR-Tools): loaded when used
    return load("llmopt.policies.pang:deploy")(instance, policy, plan=plan, router=chosen,
                                               progress=progress)


def mode_of(policy: str, plan: Mapping[str, Any] | None = None) -> str:
    """``continuous`` for InferMax's schedulers and batch plans, ``pd_competition`` else."""
    if policy == "plan":
        return "continuous" if (plan or {}).get("mode") == "continuous" else "pd_competition"
    return POLICIES[policy].mode if policy in POLICIES else "pd_competition"


def replay(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
           router: str | None = None, progress: Progress = SILENT,
           fast: bool = True) -> Schedule:
    """Simulate ``instance`` under ``policy``; ``plan`` is a solution dict for policy
    ``plan``; ``router`` a name of ``ROUTERS`` (default: the policy's own)."""
    chosen = deployment(instance, policy, plan=plan, router=router, progress=progress)
    return simulate(instance, chosen, fast=fast, progress=progress)


def replay_result(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
                  router: str | None = None,
                  progress: Progress = SILENT) -> tuple[Result, Schedule]:
    """Replay and wrap the schedule as a solution (problem ``replay``, solver = policy)."""
    t0 = time.perf_counter()
    schedule = replay(instance, policy, plan=plan, router=router, progress=progress)
    runtime = time.perf_counter() - t0
    metrics = schedule.metrics(instance)
    result = Result(
        problem="replay", solver=policy, status="feasible",
        objective=round(metrics["makespan_ms"], 3), bound=None, runtime_s=runtime,
        time_limit_s=None, solver_version=f"llmopt {__version__} replay",
        data={"mode": mode_of(policy, plan), "clients": instance.total_clients,
              "metrics": metrics},
        schedule=schedule,
    )
    if router is not None:
        result.data["router"] = router
    if policy in SCHEDULERS and SCHEDULERS[policy].unlimited_memory:
        result.data["unlimited_memory"] = True
        result.notes.append("a hypothetical schedule: the KV capacity is ignored")
    return result, schedule
