"""Every scheduling policy and router llmopt can replay, in one place each, with its paper and a
one-line description. The CLI's choices and help, ``llmopt list`` and the docs' tables come from
here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError
from llmopt.policies.base import Router
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.routing import (
    LeastOutstandingTokens,
    MostFreeMemory,
    RoundRobin,
    ShortestQueue,
)


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    family: str      # the cost-profile family it runs on ("pang_linear", "infermax", "any")
    paper: str
    where: str       # section, algorithm or table
    summary: str
    #: continuous batching (chunked prefill, mixed iterations) on a family other than infermax
    continuous: bool = False

    @property
    def mode(self) -> str:
        """The solution files' ``mode`` of its schedules."""
        return ("continuous" if self.family == "infermax" or self.continuous
                else "pd_competition")


@dataclass(frozen=True)
class RouterInfo:
    name: str
    summary: str
    make: Callable[[], Router]


PANG = "Pang et al. 2025"
KIM = "Kim et al. 2025 (InferMax)"
SOLA = "Hong et al. 2025 (SOLA)"
V1 = "vLLM V1 (v0.11)"
HUANG = "Huang et al. 2025"
SCLS = "Cheng et al. 2024 (SCLS)"
# the slice-level schedulers of llmopt.policies.slice (names of its SCHEDULERS, Fig. 15's order);
# listed here rather than imported: the batcher and offloader load Pyomo and OR-Tools
SLICE_POLICIES = ("sls", "so", "pm", "ab", "lb", "scls")

POLICIES: dict[str, PolicyInfo] = {
    p.name: p for p in [
        PolicyInfo("baseline", "pang_linear", PANG, "section V (vLLM's default)",
                   "one FCFS queue, prefill-first"),
        PolicyInfo("offline", "pang_linear", PANG, "section IV.B, eqs 26–30",
                   "per-client queues from the optimal bin packing, prefill-first"),
        PolicyInfo("online", "pang_linear", PANG, "Algorithm 1 without the offline stage",
                   "round-robin queues sorted longest first, idle clients steal"),
        PolicyInfo("iteration", "pang_linear", PANG, "section IV.D, eqs 41–43",
                   "one FCFS queue, prefill stages by the Lagrangian rule"),
        PolicyInfo("hybrid", "pang_linear", PANG, "Algorithm 1 with eqs 26–30 and 41–43",
                   "bin-packing queues, longest first, stealing, Lagrangian prefill timing"),
        *[PolicyInfo(name, "infermax", KIM,
                     "section 6" if name in ("evict-short", "vllm-unlimited")
                     else "section 4.6" if name.startswith("rank") else "Algorithm 1, Table 1",
                     cfg.description)
          for name, cfg in SCHEDULERS.items()],
        # issue 15's baselines are in SCHEDULERS too; these entries (later in the list) give
        # them their own paper and place
        *[PolicyInfo(name, "infermax", SOLA, "section 6.1", cfg.description)
          for name, cfg in SCHEDULERS.items() if cfg.source == "sola"],
        *[PolicyInfo(name, "infermax", V1, "vllm/v1/core/sched/scheduler.py, schedule()",
                     cfg.description)
          for name, cfg in SCHEDULERS.items() if cfg.source == "vllm-v1"],
        PolicyInfo("sola", "infermax", SOLA, "sections 4 and 5, Algorithm 1, Table 2, eqs 1–5",
                   "state-aware: TTFT or TPOT optimized subject to the other per iteration, "
                   "deadline-ordered prefills, peak-memory-aware admission (needs SLOs)"),
        PolicyInfo("sls", "scls", SCLS, "section 5.1 (baseline; Fig. 15 step 1)",
                   "sequence-level: round-robin at arrival, FCFS static batches of 16 "
                   "generated to completion (S = 1024)"),
        PolicyInfo("so", "scls", SCLS, "section 5.4 (Fig. 15 step 2)",
                   "slice-only: SLS with slices of S = 128, unfinished requests re-sent "
                   "round-robin"),
        PolicyInfo("pm", "scls", SCLS, "section 5.4 (Fig. 15 step 3)",
                   "padding-mitigating: central pool every 6 s, eq 10's DP with at most 16 "
                   "per batch, round-robin offloading"),
        PolicyInfo("ab", "scls", SCLS, "section 5.4, Algorithm 1 (Fig. 15 step 4)",
                   "adaptive batching: PM with Algorithm 1's DP unlimited (eqs 1–10)"),
        PolicyInfo("lb", "scls", SCLS, "section 5.4, eq 11 (Fig. 15 step 5)",
                   "load balancing: AB with max-min offloading and the load decrement"),
        PolicyInfo("scls", "scls", SCLS, "section 4, Algorithm 1, eqs 1–12 (Fig. 15 step 6)",
                   "SCLS: LB with the adaptive interval of eq 12 (lambda 0.5, Gamma 6 s)"),
        PolicyInfo("ils", "scls", SCLS, "section 5.1 (baseline: DeepSpeed-FastGen)",
                   "iteration-level: SARATHI's continuous batching (decodes first, hybrid, "
                   "chunked prefill P = 512) on eqs 3-4 per request, round-robin, at most "
                   "system.clients running (first token from the first decode)",
                   continuous=True),
        PolicyInfo("huang-vllm", "bilinear", HUANG, "section 5.1 (baseline: vLLM v0.6.0)",
                   "vLLM's continuous batching, FCFS, prefill-first, no chunked prefill, on the "
                   "bilinear predictor (first token from the first decode, I + O KVs reserved)"),
        PolicyInfo("plan", "any", "llmopt", "solution files",
                   "a solver's plan followed exactly (--plan SOLUTION): PD stages, "
                   "InferMax batches or slo-priority static batches"),
    ]
}

ROUTERS: dict[str, RouterInfo] = {
    r.name: r for r in [
        RouterInfo("round-robin", "requests dealt to the replicas in turn, in arrival order",
                   RoundRobin),
        RouterInfo("least-outstanding-tokens", "the replica with the fewest tokens left to "
                   "process (live load)", LeastOutstandingTokens),
        RouterInfo("shortest-queue", "the replica with the fewest requests waiting or running",
                   ShortestQueue),
        RouterInfo("most-free-memory", "the replica with the most free KV memory",
                   MostFreeMemory),
    ]
}


# what ``llmopt replay`` and ``llmopt compare`` run when no --policy is given
DEFAULT_POLICIES: dict[str, dict[str, tuple[str, ...]]] = {
    "pang_linear": {"replay": ("baseline", "offline", "online", "hybrid"),
                    "compare": ("baseline", "offline", "online", "iteration", "hybrid")},
    "infermax": {"replay": tuple(SCHEDULERS), "compare": tuple(SCHEDULERS)},
    "scls": {"replay": (*SLICE_POLICIES, "ils"), "compare": (*SLICE_POLICIES, "ils")},
}
DEFAULT_POLICIES["bilinear"] = {"replay": ("huang-vllm",), "compare": ("huang-vllm",)}
# the issue 15 baselines run when named, not by default: the defaults stay InferMax's schedulers
DEFAULT_POLICIES["infermax"] = {
    command: tuple(p for p in names if SCHEDULERS[p].source == "infermax")
    for command, names in DEFAULT_POLICIES["infermax"].items()}


def policy_names(family: str | None = None) -> list[str]:
    """Policy names, those for profile ``family`` (and ``plan``) when given."""
    return [name for name, info in POLICIES.items()
            if family is None or info.family in (family, "any")]


def check_family(instance: Instance, policy: str) -> None:
    """Refuse ``policy`` on an instance whose profile family it does not run on."""
    family, profile = POLICIES[policy].family, instance.profile
    if family not in ("any", profile.family):
        raise InstanceError(f"policy {policy} runs on profiles of family {family}; this "
                            f"model is of family {profile.family} (its policies: "
                            f"{', '.join(policy_names(profile.family))})",
                            file=instance.label(), field="model", value=profile.name)
