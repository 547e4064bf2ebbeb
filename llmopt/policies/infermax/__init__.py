"""The InferMax schedulers (Kim et al. 2025) deployed on a cluster: one
:class:`~llmopt.policies.infermax.unified.UnifiedScheduler` per replica, requests dealt
round-robin in arrival order unless another router is given; and plans of batches (the CSP's)
followed exactly. The configurations of ``SCHEDULERS`` whose ``engine`` is vLLM V1 deploy from
``llmopt.policies.slo``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import InternalError, SolutionFileError
from llmopt.policies.base import Router
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.infermax.planned import PlannedBatches
from llmopt.policies.infermax.unified import UnifiedScheduler
from llmopt.policies.routing import RoundRobin
from llmopt.sim.cluster import Deployment


def deploy(instance: Instance, name: str, *, router: Router | None = None) -> Deployment:
    """The unified scheduler of configuration ``name`` on every replica (the configurations
    of another engine, vLLM V1's, deploy from ``llmopt.policies.slo``)."""
    config = SCHEDULERS[name]
    if config.engine != "unified":
        raise InternalError(f"{name} is not a configuration of the unified scheduler")
    return Deployment(name, [UnifiedScheduler(config) for _ in range(instance.system.instances)],
                      router or RoundRobin())


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
