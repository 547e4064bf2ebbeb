"""Replay: a registered policy (or a solver's plan) simulated on an instance.

``replay(instance, "hybrid")`` deploys an iteration-level policy on every replica of the system
(one policy per replica, the policy's router or the one asked for), by the factory its registry
entry names, and runs the cluster simulation; it returns a :class:`~llmopt.schedule.Schedule`.
``replay_result`` wraps it in a solution :class:`~llmopt.result.Result` (problem ``replay``).
``replay_policy`` replays any registered policy, on the engine its entry names (iteration or
slice level), as a :class:`Replayed`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, OptionError, unknown_name
from llmopt.plugins import load
from llmopt.policies.base import Router
from llmopt.policies.registry import POLICIES, ROUTERS, Engine, check_family, plan_follower
from llmopt.progress import SILENT, Progress
from llmopt.result import Mode, Result, ScheduleData
from llmopt.schedule import Schedule
from llmopt.sim.cluster import Deployment, simulate
from llmopt.version import __version__

if TYPE_CHECKING:
    from llmopt.sim.slices import SliceReplay


def _checked(instance: Instance, policy: str, router: str | None) -> Router | None:
    """The policy known and of the instance's family, the router known; the router made."""
    if policy not in POLICIES:
        raise OptionError(unknown_name("policy", policy, POLICIES), field="--policy",
                          value=policy)
    if router is not None and router not in ROUTERS:
        raise OptionError(unknown_name("router", router, ROUTERS), field="--router",
                          value=router)
    check_family(instance, policy)
    if instance.system.prefix_caching:
        _check_prefix_caching(instance, policy)
    return ROUTERS[router].make() if router else None


def _check_prefix_caching(instance: Instance, policy: str) -> None:
    """Prefix caching is simulated on the InferMax cost model (a chunk after m cached tokens
    costs c² + 2mc: it reads them) by the iteration-level engine; a plan fixes every chunk of
    a schedule made without a cache."""
    if (instance.profile.policy_family != "infermax"
            or POLICIES[policy].engine is not Engine.ITERATION):
        raise InstanceError(f"prefix caching is simulated on infermax profiles by the "
                            f"iteration-level policies; {policy} runs on family "
                            f"{POLICIES[policy].family}", file=instance.label(),
                            field="system.prefix_caching", value=True)
    if POLICIES[policy].mode is None:
        raise InstanceError("a plan fixes every chunk of a schedule made without a prefix "
                            "cache: replay it with prefix_caching off", file=instance.label(),
                            field="system.prefix_caching", value=True)


def deployment(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
               router: str | None = None, progress: Progress = SILENT,
               name: str | None = None) -> Deployment:
    """The policies and router that replay the iteration-level ``policy`` on ``instance``
    (the schedule named ``name``, by default the policy's)."""
    chosen = _checked(instance, policy, router)
    info = POLICIES[policy]
    if info.engine is not Engine.ITERATION:
        raise OptionError("schedules slices (padded static batches that move between model "
                          "instances), not iterations: replay it with `llmopt replay` or "
                          "llmopt.policies.slice.replay.slice_result", field="--policy",
                          value=policy)
    made: Deployment = load(info.deploy)(instance, name or policy, plan=plan, router=chosen,
                                         progress=progress)
    return made


def follow_plan(instance: Instance, name: str = "plan", *,
                plan: Mapping[str, Any] | None = None, router: Router | None = None,
                progress: Progress = SILENT) -> Deployment:
    """The factory of policy ``plan``: the plan's follower (``registry.PLAN_FOLLOWERS``)."""
    made: Deployment = load(plan_follower(plan))(instance, name, plan=plan, router=router,
                                                 progress=progress)
    return made


def mode_of(policy: str, plan: Mapping[str, Any] | None = None) -> Mode:
    """The ``mode`` of ``policy``'s schedules (of a plan's, for policy ``plan``)."""
    mode = POLICIES[policy].mode if policy in POLICIES else Mode.PD_COMPETITION
    if mode is None:
        return Mode.CONTINUOUS if (plan or {}).get("mode") == Mode.CONTINUOUS \
            else Mode.PD_COMPETITION
    return mode


def replay(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
           router: str | None = None, progress: Progress = SILENT,
           fast: bool = True, name: str | None = None) -> Schedule:
    """Simulate ``instance`` under ``policy``; ``plan`` is a solution dict for policy
    ``plan``; ``router`` a name of ``ROUTERS`` (default: the policy's own); ``name`` names
    the schedule (default: the policy)."""
    chosen = deployment(instance, policy, plan=plan, router=router, progress=progress,
                        name=name)
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
        data=ReplayData(mode=mode_of(policy, plan), metrics=metrics,
                        clients=instance.total_clients, router=router,
                        unlimited_memory=POLICIES[policy].hypothetical),
        schedule=schedule,
    )
    if POLICIES[policy].hypothetical:
        result.notes.append("a hypothetical schedule: the KV capacity is ignored")
    return result, schedule


@dataclass
class ReplayData(ScheduleData):
    """A replay's solution data (``Result.data``): besides the schedule's mode and metrics,
    the clients, the router of a multi-replica replay (None: the policy's own) and whether the
    policy ignores the KV capacity (a hypothetical schedule)."""

    clients: int
    router: str | None = None
    unlimited_memory: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "clients": self.clients,
                               "metrics": self.metrics}
        if self.router is not None:
            out["router"] = self.router
        if self.unlimited_memory:
            out["unlimited_memory"] = True
        return out


@dataclass
class Replayed:
    """A replay of a registered policy: the solution (problem ``replay``) and, by engine, the
    iteration-level schedule or the slice-level replay."""

    result: Result
    schedule: Schedule | None = None
    slices: SliceReplay | None = None

    @property
    def metrics(self) -> dict[str, float]:
        return self.result.schedule_metrics()


def replay_policy(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
                  router: str | None = None, progress: Progress = SILENT) -> Replayed:
    """``policy`` on the engine its registry entry names."""
    _checked(instance, policy, router)
    if POLICIES[policy].engine is Engine.SLICE:
        if router is not None:
            raise OptionError(f"{policy} is a slice-level scheduler: it dispatches by its own "
                              "rule; no router applies", field="--router", value=router)
        result, sliced = load("llmopt.policies.slice.replay:slice_result")(instance, policy)
        return Replayed(result, slices=sliced)
    result, schedule = replay_result(instance, policy, plan=plan, router=router,
                                     progress=progress)
    return Replayed(result, schedule=schedule)


__all__ = ["Replayed", "deployment", "follow_plan", "mode_of", "replay", "replay_policy",
           "replay_result"]
