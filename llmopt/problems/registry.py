"""Every optimization problem llmopt solves, and the lower bounds of each cost-profile family, in
one place each, with the paper and equations they implement. The CLI's choices and help,
``llmopt list`` and the docs' tables come from here; implementations load on first use.
Installed packages add problems through the entry point ``llmopt.problems``
(:mod:`llmopt.plugins`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmopt.plugins import Registry


@dataclass(frozen=True)
class ProblemInfo:
    name: str
    family: str                   # the cost-profile family it needs
    paper: str
    equations: str
    summary: str
    solvers: tuple[str, ...]      # the first is the default
    options: dict[str, str] = field(default_factory=dict)  # its own options and their help
    solve: str | Callable[..., Any] = ""  # "module:function" or the function: (instance,
    #                               solver, time_limit_s, progress, **options) -> Result
    #: the independent checker of its solution files (``llmopt validate``, which never runs
    #: the solver): (instance, solution, verdict) -> llmopt.validate.claims.Evidence
    check: str | Callable[..., Any] = ""


@dataclass(frozen=True)
class FamilyInfo:
    """What holds for every instance of a cost-profile family: its lower bounds, the time model
    its replays are timed by, and the exact problem that optimizes what the replays measure
    (run by ``llmopt compare`` up to ``exact_max_requests`` requests)."""

    family: str
    summary: str                  # of its bounds
    bounds: str                   # "module:function" (instance, time_limit_s, progress,
    #                               solver_bounds) -> list[Bound]
    replay_time_model: str
    exact: str
    exact_options: dict[str, str] = field(default_factory=dict)
    exact_max_requests: int | None = None


PANG = "Pang et al. 2025"

PROBLEMS: Registry[ProblemInfo] = Registry("llmopt.problems", ProblemInfo, [
        ProblemInfo(
            "binpacking", "pang_linear", PANG, "eqs 26–30 (section IV.B)",
            "offline makespan bin packing of requests onto clients (P||Cmax), with proven "
            "lower bounds",
            ("auto", "highs", "cpsat", "heuristic"),
            solve="llmopt.problems.pang.binpacking:solve",
            check="llmopt.validate.binpacking:check_binpacking"),
        ProblemInfo(
            "pd-competition", "pang_linear", PANG, "eqs 1–25 (section III), KV memory",
            "the prefill-decode competition schedule: which requests each prefill stage takes "
            "and how long each decode stage runs",
            ("auto", "highs", "cpsat"),
            {"formulation": "original (eqs 1–25) | compact", "bins": "number of bins K",
             "time_model": "stage (the MIP's) | replay (batch-dependent rounds)",
             "literal": "original: eq 13 as printed, no w ≤ d link",
             "cuts": "original: symmetry cuts and valid inequalities"},
            solve="llmopt.problems.pang.pd_competition:solve",
            check="llmopt.validate.pd_competition:check_pd_competition"),
        ProblemInfo(
            "infermax-csp", "infermax", "Kim et al. 2025 (InferMax)", "section 5",
            "optimal continuous batching: the batches (chunks, decodes, evictions) of least "
            "total latency under the InferMax cost model",
            ("auto", "cpsat", "highs"),
            {"bins": "number of batches N", "workers": "CP-SAT threads"},
            solve="llmopt.problems.infermax.csp:solve",
            check="llmopt.validate.infermax:check_infermax"),
        ProblemInfo(
            "scls-batching", "scls", "Cheng et al. 2024 (SCLS)", "eqs 1–10, Algorithm 1",
            "serving-time-oriented batching: padded static batches of least total serving "
            "time for one slice, none out of memory (DP, or exact over all partitions)",
            ("dp", "cpsat", "brute"),
            {"slice_length": "slice length S (default 128)", "workers": "CP-SAT threads",
             "formulation": "cpsat: counts (default) | assignment",
             "max_size": "at most this many requests per batch (PM: 12 DS, 16 HF)"},
            solve="llmopt.problems.scls.partition:solve",
            check="llmopt.validate.scls:check_scls_batching"),
        ProblemInfo(
            "slo-priority", "bilinear", "Huang et al. 2025", "eqs 2–19, Algorithm 1",
            "SLO-aware priority mapping: the priority order and static batches that maximize "
            "G = met requests / total latency (exact CP-SAT, simulated annealing, exhaustive)",
            ("auto", "cpsat", "sa", "exhaustive"),
            {"max_batch": "maximum batch size (default: system.clients)",
             "seed": "sa: random seed", "acceptance": "sa: metropolis | literal",
             "t0": "sa: initial temperature", "t_thres": "sa: threshold temperature",
             "iters": "sa: moves per temperature", "tau": "sa: temperature decay",
             "workers": "cpsat: CP-SAT threads",
             "method": "cpsat: parametric | dinkelbach",
             "formulation": "cpsat: intervals | slots"},
            solve="llmopt.problems.slo_priority.solve:solve",
            check="llmopt.validate.slo_priority:check_slo_priority"),
])

FAMILIES: dict[str, FamilyInfo] = {
    f.family: f for f in [
        FamilyInfo("pang_linear", "eqs 31–32 (stage model), the replay model's rounds bound, "
                   "and the LP/CP-SAT bounds of the PD-competition models",
                   "llmopt.problems.pang.solver_bounds:pang_family_bounds",
                   replay_time_model="replay", exact="pd-competition",
                   exact_options={"time_model": "replay"}),
        FamilyInfo("infermax", "the InferMax cost model's work bound, and the CSP's proven "
                   "bound on small instances",
                   "llmopt.problems.infermax.bounds:infermax_family_bounds",
                   replay_time_model="infermax", exact="infermax-csp", exact_max_requests=12),
    ]
}


def problem_names(family: str | None = None) -> list[str]:
    return [name for name, p in PROBLEMS.items() if family is None or p.family == family]
