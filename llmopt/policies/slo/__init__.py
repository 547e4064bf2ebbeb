"""Schedulers of today's serving engines and SLO-aware papers: vLLM V1's scheduler
(``vllm_v1``, configurations ``vllm-v1`` and ``vllm-v1-priority`` of ``SCHEDULERS``) and SOLA
(Hong et al. 2025, ``sola``), deployed one per replica."""

from __future__ import annotations

from llmopt.data.instance import Instance
from llmopt.policies.base import IterationPolicy, Router
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.routing import RoundRobin
from llmopt.policies.slo.sola import Sola
from llmopt.policies.slo.vllm_v1 import VllmV1
from llmopt.sim.cluster import Deployment

SLO_POLICIES = ("sola",)


def deploy(instance: Instance, name: str, *, router: Router | None = None) -> Deployment:
    """SOLA, or a vLLM V1 configuration, on every replica."""
    n = instance.system.instances
    policies: list[IterationPolicy]
    if name == "sola":
        policies = [Sola() for _ in range(n)]
    else:
        priority = SCHEDULERS[name].engine == "vllm-v1-priority"
        policies = [VllmV1(name, priority=priority) for _ in range(n)]
    return Deployment(name, policies, router or RoundRobin())


__all__ = ["SLO_POLICIES", "Sola", "VllmV1", "deploy"]
