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
class Option:
    """One of a problem's own options (``llmopt solve --NAME``, the keyword of
    ``llmopt.solve``, a sweep cell's parameter): its type, its help and the range the command
    line holds it to (``low`` and ``high`` inclusive; the problem checks the rest). Unset, the
    problem's default applies."""

    kind: type            # int, float, str or bool
    help: str
    low: float | None = None
    high: float | None = None


def _int(help_: str, low: int = 1) -> Option:
    return Option(int, help_, low=low)


def _positive(help_: str) -> Option:
    return Option(float, help_, low=0.0)


def _choice(help_: str) -> Option:
    return Option(str, help_)


@dataclass(frozen=True)
class ProblemInfo:
    name: str
    family: str                   # the cost-profile family it needs
    paper: str
    equations: str
    summary: str
    solvers: tuple[str, ...]      # the first is the default
    options: dict[str, Option] = field(default_factory=dict)  # its own options
    solve: str | Callable[..., Any] = ""  # "module:function" or the function: (instance,
    #                               solver, time_limit_s, progress, **options) -> Result
    #: the independent checker of its solution files (``llmopt validate``, which never runs
    #: the solver): (instance, solution, verdict) -> llmopt.validate.claims.Evidence
    check: str | Callable[..., Any] = ""
    #: the lines ``llmopt solve`` prints about a result beside its status, objective, bound,
    #: proof and notes: (Result) -> list[str]; "": none
    describe: str | Callable[..., Any] = ""


@dataclass(frozen=True)
class FamilyInfo:
    """What holds for every instance of a cost-profile family: its lower bounds (if any), the
    time model its replays are timed by, the exact problem that optimizes what the replays
    measure (run by ``llmopt compare`` up to ``exact_max_requests`` requests), and how
    ``llmopt compare`` compares its schedules (``compare``: a hook of
    ``llmopt.problems.workflows.compare``)."""

    family: str
    summary: str = "—"            # of its bounds
    bounds: str = ""              # "module:function" (instance, time_limit_s, progress,
    #                               solver_bounds, simulation) -> list[Bound]; "": none
    replay_time_model: str = ""
    exact: str = ""
    exact_options: dict[str, str] = field(default_factory=dict)
    exact_max_requests: int | None = None
    compare: str = "llmopt.problems.workflows.compare:by_total_time"
    #: the proven ceiling on SLO attainment of the family's replays, "module:function"
    #: (instance, time_limit_s, stop, memory) -> llmopt.problems.slo_ceiling.ceiling.
    #: AttainmentCeiling (``memory=False``: also for policies ignoring M); "": none
    slo_ceiling: str = ""
    #: the largest arrival rate at which that ceiling allows an attainment level (a sweep's
    #: goodput bound), "module:function" (make_instance, level, low, high, time_limit_s,
    #: memory, grid) -> llmopt.problems.slo_ceiling.goodput.GoodputCeiling; "": none
    goodput_ceiling: str = ""
    #: why a family whose policies replay has no bounds, exact problem or SLO ceiling, and
    #: what to use instead: ``llmopt solve`` and ``llmopt bound`` refuse with it, ``llmopt
    #: compare`` and the ceilings note it
    unbounded_why: str = ""


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
            {"formulation": _choice("original (eqs 1–25) | compact"),
             "bins": _int("number of bins K"),
             "time_model": _choice("stage (the MIP's) | replay (batch-dependent rounds)"),
             "literal": Option(bool, "original: eq 13 as printed, no w ≤ d link"),
             "cuts": Option(bool, "original: symmetry cuts and valid inequalities (default: "
                                  "with)")},
            solve="llmopt.problems.pang.pd_competition:solve",
            check="llmopt.validate.pd_competition:check_pd_competition",
            describe="llmopt.problems.pang.pd_competition:describe"),
        ProblemInfo(
            "infermax-csp", "infermax", "Kim et al. 2025 (InferMax)", "section 5",
            "optimal continuous batching: the batches (chunks, decodes, evictions) of least "
            "total latency under the InferMax cost model",
            ("auto", "cpsat", "highs"),
            {"bins": _int("number of batches N"), "workers": _int("CP-SAT threads")},
            solve="llmopt.problems.infermax.csp:solve",
            check="llmopt.validate.infermax:check_infermax"),
        ProblemInfo(
            "scls-batching", "scls", "Cheng et al. 2024 (SCLS)", "eqs 1–10, Algorithm 1",
            "serving-time-oriented batching: padded static batches of least total serving "
            "time for one slice, none out of memory (DP, or exact over all partitions)",
            ("dp", "cpsat", "brute"),
            {"slice_length": _int("slice length S (default 128)"),
             "workers": _int("CP-SAT threads"),
             "formulation": _choice("cpsat: counts (default) | assignment"),
             "max_size": _int("at most this many requests per batch (PM: 12 DS, 16 HF)")},
            solve="llmopt.problems.scls.partition:solve",
            check="llmopt.validate.scls:check_scls_batching"),
        ProblemInfo(
            "slo-priority", "bilinear", "Huang et al. 2025", "eqs 2–19, Algorithm 1",
            "SLO-aware priority mapping: the priority order and static batches that maximize "
            "G = met requests / total latency (exact CP-SAT, simulated annealing, exhaustive)",
            ("auto", "cpsat", "sa", "exhaustive"),
            {"max_batch": _int("maximum batch size (default: system.clients)"),
             "seed": _int("sa: random seed", low=0),
             "acceptance": _choice("sa: metropolis | literal"),
             "t0": _positive("sa: initial temperature (> 0)"),
             "t_thres": _positive("sa: threshold temperature (> 0)"),
             "iters": _int("sa: moves per temperature"),
             "tau": Option(float, "sa: temperature decay (between 0 and 1)", 0.0, 1.0),
             "workers": _int("cpsat: CP-SAT threads"),
             "method": _choice("cpsat: parametric | dinkelbach"),
             "formulation": _choice("cpsat: intervals | slots")},
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
                   replay_time_model="infermax", exact="infermax-csp", exact_max_requests=12,
                   slo_ceiling="llmopt.problems.workflows.ceiling:infermax_ceiling",
                   goodput_ceiling="llmopt.problems.slo_ceiling.goodput:goodput_ceiling"),
        FamilyInfo("bilinear", compare="llmopt.problems.workflows.compare:by_g"),
        FamilyInfo("scls", compare="llmopt.problems.workflows.compare:by_section5"),
        FamilyInfo("roofline", "none (the roofline is not linear: bound the fitted infermax "
                   "profile)", replay_time_model="infermax",
                   unbounded_why="the exact problems, bounds and SLO ceiling need the InferMax "
                   "linear form; use the infermax profile fitted to the same roofline "
                   "(llmopt profile roofline without --family roofline)"),
    ]
}


def bounded_families() -> list[str]:
    """The families with lower bounds (``llmopt bound``)."""
    return [name for name, info in FAMILIES.items() if info.bounds]


def problem_names(family: str | None = None) -> list[str]:
    return [name for name, p in PROBLEMS.items() if family is None or p.family == family]
