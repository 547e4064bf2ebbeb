"""Serving Huang et al. 2025 (SLO-aware priority mapping) on the simulation core: a
``slo-priority`` plan as static batches in priority order (``static``), on one replica or, for
Algorithm 2, per instance with each request routed to its planned instance; and the paper's
continuous FCFS baseline, vLLM (``fcfs``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import SolutionFileError
from llmopt.policies.base import Router, RouterView
from llmopt.policies.deploy import each_replica, no_router
from llmopt.policies.routing import RoundRobin
from llmopt.policies.slo_priority.fcfs import HUANG_VLLM, ContinuousFcfs
from llmopt.policies.slo_priority.static import StaticBatches
from llmopt.progress import SILENT, Progress
from llmopt.sim.cluster import Deployment

PLAN_PROBLEM = "slo-priority"


def plan_batches(instance: Instance, plan: Mapping[str, Any]) -> list[list[int]]:
    """The request indices of a ``slo-priority`` solution's ``batches`` (ids, in priority
    order; a solution file or ``Result.data``): every request of ``instance`` exactly once."""
    batches = plan.get("batches")
    if not isinstance(batches, list) or not batches or not all(
            isinstance(b, list) and b and all(isinstance(r, str) for r in b) for b in batches):
        raise SolutionFileError("must be a non-empty list of batches, each a non-empty list "
                                "of request ids", field="batches", value=batches)
    index = {rid: k for k, rid in enumerate(instance.ids)}
    out: list[list[int]] = []
    seen: set[str] = set()
    for k, members in enumerate(batches):
        for rid in members:
            if rid not in index:
                raise SolutionFileError(f"batch {k} names an unknown request",
                                        field=f"batches[{k}]", value=rid)
            if rid in seen:
                raise SolutionFileError(f"batch {k} names a request already in an earlier "
                                        "batch", field=f"batches[{k}]", value=rid)
            seen.add(rid)
        out.append([index[r] for r in members])
    missing = [r for r in instance.ids if r not in seen]
    if missing:
        raise SolutionFileError(f"{len(missing)} request(s) of the instance in no batch",
                                field="batches", value=missing[:3])
    return out


def deploy_plan(instance: Instance, plan: Mapping[str, Any], name: str = "plan") -> Deployment:
    """A ``slo-priority`` plan served as static batches on a one-replica system."""
    batches = plan_batches(instance, plan)
    if instance.system.instances != 1:
        raise SolutionFileError("a slo-priority plan is for one model instance (Algorithm 2's "
                                "per-instance plans: deploy_cluster_plan)", field="batches")
    return Deployment(name, [StaticBatches(batches, name)], RoundRobin())


class PlannedInstances:
    """Routes each request to the model instance its plan gives (Algorithm 2's instance
    queues)."""

    name = "planned"
    reads_state = False

    def __init__(self, instance_of: Sequence[int]) -> None:
        self.instance_of = list(instance_of)

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        return self.instance_of[request]


def deploy_cluster_plan(instance: Instance, members: Sequence[Sequence[int]],
                        batches: Sequence[Sequence[Sequence[int]]],
                        name: str = "plan") -> Deployment:
    """Algorithm 2 served: model instance e runs ``batches[e]`` (indices into ``members[e]``,
    the instance's requests, as ``problems.slo_priority.cluster.ClusterPlan`` gives them) as
    static batches; all instances on one cluster clock."""
    n_inst = instance.system.instances
    if len(members) != n_inst or len(batches) != n_inst:
        raise SolutionFileError(f"a plan for {len(members)} instances on a system of {n_inst}",
                                field="system.instances", value=n_inst)
    instance_of = [-1] * instance.num_requests
    policies = []
    for e, (own, plan) in enumerate(zip(members, batches, strict=True)):
        for i in own:
            instance_of[i] = e
        policies.append(StaticBatches([[own[j] for j in b] for b in plan], name,
                                      field=f"instance {e} batches"))
    if -1 in instance_of:
        raise SolutionFileError("a request on no instance", field="members",
                                value=instance.ids[instance_of.index(-1)])
    router: Router = PlannedInstances(instance_of)
    return Deployment(name, policies, router)


def follow_plan(instance: Instance, name: str = "plan", *,
                plan: Mapping[str, Any] | None = None, router: Router | None = None,
                progress: Progress = SILENT) -> Deployment:
    """A ``slo-priority`` solution's plan (``--policy plan``)."""
    no_router(router, "a slo-priority plan")
    return deploy_plan(instance, plan or {}, name)


def deploy_vllm(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
                router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    """The paper's baseline ``huang-vllm`` on every replica."""
    return each_replica(instance, name, ContinuousFcfs, router)


__all__ = ["HUANG_VLLM", "PLAN_PROBLEM", "ContinuousFcfs", "PlannedInstances", "StaticBatches",
           "deploy_cluster_plan", "deploy_plan", "deploy_vllm", "follow_plan", "plan_batches"]
