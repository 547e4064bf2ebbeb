"""Every scheduling policy and router llmopt can replay, in one place each, with its paper and a
one-line description, its factory (``"module:function"``, loaded when the policy runs) and the
engine it runs on; installed packages add theirs through the entry points ``llmopt.policies``
and ``llmopt.routers`` (:mod:`llmopt.plugins`). The CLI's choices and help, ``llmopt list``,
the docs' tables, the default policies of ``llmopt replay`` and ``llmopt compare``, and the
heuristic incumbents of the solvers come from here; nothing else dispatches on a policy's name
or family."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from llmopt.errors import InstanceError
from llmopt.plugins import Registry
from llmopt.policies.base import Router
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.routing import (
    LeastOutstandingTokens,
    MostFreeMemory,
    PrefixAffinity,
    RoundRobin,
    ShortestQueue,
)
from llmopt.policies.slo.baselines import SOLA_BASELINES, V1_SCHEDULERS
from llmopt.result import Mode

if TYPE_CHECKING:
    from llmopt.data.instance import Instance


class Engine(Enum):
    """The simulation a policy runs on."""

    #: ``llmopt.sim.cluster``: one iteration policy per replica; the factory returns a
    #: ``Deployment`` (see ``llmopt.policies.deploy``)
    ITERATION = "iteration"
    #: ``llmopt.sim.slices``: padded static batches served a slice at a time; the factory
    #: returns the scheduler (``llmopt.sim.slices.SlicePolicy``) from the policy's name
    SLICE = "slice"


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    family: str      # the cost-profile family it runs on ("pang_linear", "infermax", "any")
    paper: str
    where: str       # section, algorithm or table
    summary: str
    deploy: str | Callable[..., Any] = ""  # its factory (see Engine), "module:function"
    engine: Engine = Engine.ITERATION
    #: the solution files' ``mode`` of its schedules (None: the plan's, for ``plan``)
    mode: Mode | None = Mode.CONTINUOUS
    #: replayed by ``llmopt replay`` / ``llmopt compare`` when no --policy is given
    replay_default: bool = True
    compare_default: bool = True
    #: ignores a limit of the system (unlimited KV memory): its schedules are marked so, and
    #: it is never a solver's incumbent
    hypothetical: bool = False
    #: the exact problems (and bounds) whose solvers start from its schedule
    incumbent_for: tuple[str, ...] = ()


@dataclass(frozen=True)
class RouterInfo:
    name: str
    summary: str
    make: Callable[[], Router]


@dataclass(frozen=True)
class PlanFollower:
    """Who follows a solution's plan (``--policy plan --plan FILE``): the first follower whose
    ``field`` of the solution equals ``value``, else ``DEFAULT_PLAN_FOLLOWER``."""

    field: str
    value: str
    deploy: str


PANG = "Pang et al. 2025"
KIM = "Kim et al. 2025 (InferMax)"
SOLA = "Hong et al. 2025 (SOLA)"
V1 = "vLLM V1 (v0.11)"
HUANG = "Huang et al. 2025"
SCLS = "Cheng et al. 2024 (SCLS)"
ATTAINMENT = "attainment"  # the exact bound on SLO attainment (not a registered problem)
SLICE_FACTORY = "llmopt.policies.slice.schedulers:scheduler"


def _pang(name: str, where: str, summary: str, replay_default: bool = True) -> PolicyInfo:
    return PolicyInfo(name, "pang_linear", PANG, where, summary,
                      "llmopt.policies.pang.deploy:deploy", mode=Mode.PD_COMPETITION,
                      replay_default=replay_default, incumbent_for=("pd-competition",))


def _slice(name: str, where: str, summary: str) -> PolicyInfo:
    return PolicyInfo(name, "scls", SCLS, where, summary, SLICE_FACTORY, Engine.SLICE,
                      mode=Mode.SLICES)


POLICIES: Registry[PolicyInfo] = Registry("llmopt.policies", PolicyInfo, [
        _pang("baseline", "section V (vLLM's default)", "one FCFS queue, prefill-first"),
        _pang("offline", "section IV.B, eqs 26–30",
              "per-client queues from the optimal bin packing, prefill-first"),
        _pang("online", "Algorithm 1 without the offline stage",
              "round-robin queues sorted longest first, idle clients steal"),
        _pang("iteration", "section IV.D, eqs 41–43",
              "one FCFS queue, prefill stages by the Lagrangian rule", replay_default=False),
        _pang("hybrid", "Algorithm 1 with eqs 26–30 and 41–43",
              "bin-packing queues, longest first, stealing, Lagrangian prefill timing"),
        *[PolicyInfo(name, "infermax", KIM,
                     "section 6" if name in ("evict-short", "vllm-unlimited")
                     else "section 4.6" if name.startswith("rank") else "Algorithm 1, Table 1",
                     cfg.description, "llmopt.policies.infermax.deploy:deploy",
                     hypothetical=cfg.unlimited_memory,
                     incumbent_for=() if cfg.unlimited_memory else ("infermax-csp", ATTAINMENT))
          for name, cfg in SCHEDULERS.items()],
        # issue 15's baselines: replayed when named, not by default
        *[PolicyInfo(name, "infermax", SOLA, "section 6.1", cfg.description,
                     "llmopt.policies.slo.deploy:deploy_baseline", replay_default=False,
                     compare_default=False, incumbent_for=("infermax-csp", ATTAINMENT))
          for name, cfg in SOLA_BASELINES.items()],
        *[PolicyInfo(name, "infermax", V1, "vllm/v1/core/sched/scheduler.py, schedule()",
                     cfg.description, "llmopt.policies.slo.deploy:deploy_v1",
                     replay_default=False, compare_default=False,
                     incumbent_for=("infermax-csp", ATTAINMENT))
          for name, cfg in V1_SCHEDULERS.items()],
        PolicyInfo("sola", "infermax", SOLA, "sections 4 and 5, Algorithm 1, Table 2, eqs 1–5",
                   "state-aware: TTFT or TPOT optimized subject to the other per iteration, "
                   "deadline-ordered prefills, peak-memory-aware admission (needs SLOs)",
                   "llmopt.policies.slo.deploy:deploy_sola", replay_default=False,
                   compare_default=False, incumbent_for=(ATTAINMENT,)),
        PolicyInfo("least-slack", "infermax", "llmopt", "llmopt/policies/slo/least_slack.py",
                   "deadline-aware: prefills by TTFT deadline in 256-token chunks (hopeless ones "
                   "last), decodes when their TPOT slack asks (uses SLOs)",
                   "llmopt.policies.slo.deploy:deploy_least_slack", replay_default=False,
                   compare_default=False, incumbent_for=(ATTAINMENT,)),
        PolicyInfo("least-slack-defer", "infermax", "llmopt",
                   "llmopt/policies/slo/least_slack.py; Moore 1968",
                   "least-slack, and under overload Moore-Hodgson's rule defers the long prompts "
                   "that would make more short ones miss their TTFT (uses SLOs)",
                   "llmopt.policies.slo.deploy:deploy_least_slack_defer", replay_default=False,
                   compare_default=False, incumbent_for=(ATTAINMENT,)),
        _slice("sls", "section 5.1 (baseline; Fig. 15 step 1)",
               "sequence-level: round-robin at arrival, FCFS static batches of 16 "
               "generated to completion (S = 1024)"),
        _slice("so", "section 5.4 (Fig. 15 step 2)",
               "slice-only: SLS with slices of S = 128, unfinished requests re-sent "
               "round-robin"),
        _slice("pm", "section 5.4 (Fig. 15 step 3)",
               "padding-mitigating: central pool every 6 s, eq 10's DP with at most 16 "
               "per batch, round-robin offloading"),
        _slice("ab", "section 5.4, Algorithm 1 (Fig. 15 step 4)",
               "adaptive batching: PM with Algorithm 1's DP unlimited (eqs 1–10)"),
        _slice("lb", "section 5.4, eq 11 (Fig. 15 step 5)",
               "load balancing: AB with max-min offloading and the load decrement"),
        _slice("scls", "section 4, Algorithm 1, eqs 1–12 (Fig. 15 step 6)",
               "SCLS: LB with the adaptive interval of eq 12 (lambda 0.5, Gamma 6 s)"),
        PolicyInfo("ils", "scls", SCLS, "section 5.1 (baseline: DeepSpeed-FastGen)",
                   "iteration-level: SARATHI's continuous batching (decodes first, hybrid, "
                   "chunked prefill P = 512) on eqs 3-4 per request, round-robin, at most "
                   "system.clients running (first token from the first decode)",
                   "llmopt.policies.slice.ils:deploy"),
        PolicyInfo("huang-vllm", "bilinear", HUANG, "section 5.1 (baseline: vLLM v0.6.0)",
                   "vLLM's continuous batching, FCFS, prefill-first, no chunked prefill, on the "
                   "bilinear predictor (first token from the first decode, I + O KVs reserved)",
                   "llmopt.policies.slo_priority.deploy:deploy_vllm",
                   mode=Mode.PD_COMPETITION),
        PolicyInfo("plan", "any", "llmopt", "solution files",
                   "a solver's plan followed exactly (--plan SOLUTION): PD stages, "
                   "InferMax batches or slo-priority static batches",
                   "llmopt.policies.replay:follow_plan", mode=None, replay_default=False,
                   compare_default=False),
])

ROUTERS: Registry[RouterInfo] = Registry("llmopt.routers", RouterInfo, [
        RouterInfo("round-robin", "requests dealt to the replicas in turn, in arrival order",
                   RoundRobin),
        RouterInfo("least-outstanding-tokens", "the replica with the fewest tokens left to "
                   "process (live load)", LeastOutstandingTokens),
        RouterInfo("shortest-queue", "the replica with the fewest requests waiting or running",
                   ShortestQueue),
        RouterInfo("most-free-memory", "the replica with the most free KV memory",
                   MostFreeMemory),
        RouterInfo("prefix-affinity", "the replica caching the longest prefix of the prompt, "
                   "unless its outstanding tokens exceed twice the least-loaded's plus the "
                   "prompt (after llm-d's and BLIS's prefix-aware routing)", PrefixAffinity),
])

PLAN_FOLLOWERS = [
    PlanFollower("problem", "slo-priority", "llmopt.policies.slo_priority.deploy:follow_plan"),
    PlanFollower("mode", Mode.CONTINUOUS, "llmopt.policies.infermax.deploy:deploy_plan"),
]
DEFAULT_PLAN_FOLLOWER = "llmopt.policies.pang.deploy:deploy_plan"  # assignments and stages


def policy_names(family: str | None = None) -> list[str]:
    """Policy names, those for profile ``family`` (and ``plan``) when given."""
    return [name for name, info in POLICIES.items()
            if family is None or info.family in (family, "any")]


def default_policies(family: str, command: str) -> list[str]:
    """What ``llmopt replay`` or ``llmopt compare`` (``command``) runs without --policy."""
    wanted = "replay_default" if command == "replay" else "compare_default"
    return [name for name, info in POLICIES.items()
            if info.family == family and getattr(info, wanted)]


def slice_policies() -> list[str]:
    return [name for name, info in POLICIES.items() if info.engine is Engine.SLICE]


def incumbent_policies(problem: str) -> list[str]:
    """The policies whose schedules start ``problem``'s solvers, in the registry's order."""
    return [name for name, info in POLICIES.items() if problem in info.incumbent_for]


def plan_follower(plan: Mapping[str, Any] | None) -> str:
    """The factory that follows a solution's plan (see :class:`PlanFollower`)."""
    if isinstance(plan, Mapping):
        for follower in PLAN_FOLLOWERS:
            if plan.get(follower.field) == follower.value:
                return follower.deploy
    return DEFAULT_PLAN_FOLLOWER


def check_family(instance: Instance, policy: str) -> None:
    """Refuse ``policy`` on an instance whose profile it does not run on: a policy runs on the
    profiles whose ``policy_family`` is its family (a ``roofline`` profile's is ``infermax``)."""
    family, profile = POLICIES[policy].family, instance.profile
    if family not in ("any", profile.policy_family):
        raise InstanceError(f"policy {policy} runs on profiles of family {family}; this "
                            f"model is of family {profile.family} (its policies: "
                            f"{', '.join(policy_names(profile.policy_family))})",
                            file=instance.label(), field="model", value=profile.name)

