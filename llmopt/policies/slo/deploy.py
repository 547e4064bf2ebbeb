"""SOLA, SOLA's baselines and vLLM V1 deployed one per replica (round-robin unless another
router is given): the factories of their registry entries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmopt.data.instance import Instance
from llmopt.policies.base import Router
from llmopt.policies.deploy import Deployment, each_replica, per_replica
from llmopt.policies.infermax.unified import UnifiedScheduler
from llmopt.policies.slo.baselines import SOLA_BASELINES, V1_SCHEDULERS
from llmopt.policies.slo.least_slack import LeastSlack
from llmopt.policies.slo.sola import Sola
from llmopt.policies.slo.vllm_v1 import VllmV1
from llmopt.progress import SILENT, Progress


def deploy_sola(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
                router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    return each_replica(instance, name, Sola, router)


def deploy_v1(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
              router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    config = V1_SCHEDULERS[name]
    return each_replica(instance, name, lambda: VllmV1(name, priority=config.priority), router)


def deploy_baseline(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
                    router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    config = SOLA_BASELINES[name]
    return each_replica(instance, name, lambda: UnifiedScheduler(config), router)


deploy_least_slack = per_replica(LeastSlack)
deploy_least_slack_defer = per_replica(lambda: LeastSlack(defer=True))


__all__ = ["deploy_baseline", "deploy_least_slack", "deploy_least_slack_defer",
           "deploy_sola", "deploy_v1"]
