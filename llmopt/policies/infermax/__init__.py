"""The InferMax schedulers (Kim et al. 2025) deployed on a cluster: one
:class:`~llmopt.policies.infermax.unified.UnifiedScheduler` per replica, requests dealt
round-robin in arrival order unless another router is given; and plans of batches (the CSP's)
followed exactly. The configurations of ``SCHEDULERS`` whose ``engine`` is vLLM V1 deploy
:class:`~llmopt.policies.slo.vllm_v1.VllmV1` instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import SolutionFileError
from llmopt.policies.base import IterationPolicy, Router
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.infermax.planned import PlannedBatches
from llmopt.policies.infermax.unified import UnifiedScheduler
from llmopt.policies.routing import RoundRobin
from llmopt.sim.cluster import Deployment


def deploy(instance: Instance, name: str, *, router: Router | None = None) -> Deployment:
    config = SCHEDULERS[name]
    policies: list[IterationPolicy]
    if config.engine == "unified":
        policies = [UnifiedScheduler(config) for _ in range(instance.system.instances)]
    else:  # vLLM V1 (llmopt.policies.slo, which imports this package's unified module)
        from llmopt.policies.slo.vllm_v1 import VllmV1

        policies = [VllmV1(name, priority=config.engine == "vllm-v1-priority")
                    for _ in range(instance.system.instances)]
    return Deployment(name, policies, router or RoundRobin())


def deploy_plan(instance: Instance, plan: Mapping[str, Any], name: str = "plan") -> Deployment:
    """A solution's ``plan`` of batches on a one-replica system."""
    batches = plan.get("plan")
    if not isinstance(batches, list) or not all(isinstance(b, dict) for b in batches):
        raise SolutionFileError("plan must be a list of batches {evict, prefill, decode}",
                                field="plan")
    if instance.system.instances != 1:
        raise SolutionFileError("a plan of batches is for one model instance",
                                field="plan")
    return Deployment(name, [PlannedBatches(instance, batches, name)], RoundRobin())


__all__ = ["SCHEDULERS", "deploy", "deploy_plan"]
