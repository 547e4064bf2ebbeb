"""The paper's baseline (Huang et al. 2025, section 5.1, "Baselines" and "Workflows"): vLLM
v0.6.0 with the SLO-aware feature off, requests sent continuously and the engine choosing each
iteration's batch: FCFS, prefill-first, no chunked prefill, no mixed iterations, at most
``system.clients`` requests running (the maximum batch size, vLLM's ``max_num_seqs``).

It is InferMax's ``vllm`` configuration of the unified scheduler (``llmopt.policies.infermax``)
on the bilinear predictor, with the token semantics of ``llmopt.data.cost.bilinear`` (the first
output token from the first decode, l_o decodes per request, as eq 16 counts them) and a
reservation of I + O KVs per request, so that a finite ``system.kv_capacity`` is never overrun
and nothing is evicted (the predictor has no memory model; without ``system.kv_capacity`` the
memory is unlimited).
"""

from __future__ import annotations

from dataclasses import replace

from llmopt.policies.base import ReplicaView
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.infermax.unified import UnifiedOnFamily

HUANG_VLLM = replace(
    SCHEDULERS["vllm"], name="huang-vllm",
    description="vLLM v0.6.0's continuous batching (FCFS, prefill-first, no chunked "
    "prefill) on the bilinear predictor: Huang et al.'s baseline")


class ContinuousFcfs(UnifiedOnFamily):
    """``HUANG_VLLM`` on a bilinear profile (see the module doc)."""

    def __init__(self) -> None:
        super().__init__(HUANG_VLLM, "bilinear", "the bilinear predictor (Huang et al. eqs 14-16)")

    def budgets(self, replica: ReplicaView) -> tuple[float, float]:
        return replica.C, replica.C

    def reservation(self, r: ReplicaView, i: int) -> int:
        return r.I[i] + r.O[i]
