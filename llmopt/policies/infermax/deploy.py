"""The InferMax schedulers (Kim et al. 2025) deployed on a cluster: one
:class:`~llmopt.policies.infermax.unified.UnifiedScheduler` per replica, requests dealt
round-robin in arrival order unless another router is given; and plans of batches (the CSP's)
followed exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import SolutionFileError
from llmopt.policies.base import Router
from llmopt.policies.deploy import Deployment, each_replica, no_router
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.infermax.planned import PlannedBatches
from llmopt.policies.infermax.unified import UnifiedScheduler
from llmopt.policies.routing import RoundRobin
from llmopt.progress import SILENT, Progress


def deploy(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
           router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    """The unified scheduler of configuration ``name`` on every replica."""
    config = SCHEDULERS[name]
    return each_replica(instance, name, lambda: UnifiedScheduler(config), router)


def deploy_plan(instance: Instance, name: str = "plan", *,
                plan: Mapping[str, Any] | None = None, router: Router | None = None,
                progress: Progress = SILENT) -> Deployment:
    """A solution's ``plan`` of batches on a one-replica system."""
    no_router(router, "a plan of batches")
    batches = (plan or {}).get("plan")
    if not isinstance(batches, list) or not all(isinstance(b, dict) for b in batches):
        raise SolutionFileError("plan must be a list of batches {evict, prefill, decode}",
                                field="plan")
    if instance.system.instances != 1:
        raise SolutionFileError("a plan of batches is for one model instance",
                                field="plan")
    return Deployment(name, [PlannedBatches(instance, batches, name)], RoundRobin())


__all__ = ["deploy", "deploy_plan"]
