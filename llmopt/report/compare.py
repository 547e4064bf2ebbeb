"""Compare schedules: replay several policies under one cost model beside the lower bounds.

``compare(instance, policies)`` returns a table (one row per schedule) and the bounds; the CLI
writes it as markdown and CSV with a chart. The gap of a schedule is measured against the best
bound valid under the replay's time model; bounds valid only under another model are listed
but not used for gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from llmopt.data.instance import Instance
from llmopt.deadline import Deadline
from llmopt.errors import LlmoptError
from llmopt.plugins import load
from llmopt.policies.replay import replay_result
from llmopt.problems.api import bounds as family_bounds
from llmopt.problems.api import family_of, solve
from llmopt.problems.base import Bound
from llmopt.progress import SILENT, Progress
from llmopt.report.units import fmt_time, time_column, time_unit
from llmopt.result import Result
from llmopt.schedule.metrics import ATTAINMENT_METRICS
from llmopt.schedule.schedule import LATENCY_METRICS

if TYPE_CHECKING:
    from llmopt.problems.infermax.attainment import AttainmentBound

ATTAINMENT_MODULE = "llmopt.problems.infermax.attainment"  # CP-SAT: loaded when used

SLO_HEADERS = {"attainment": "SLO attainment", "attainment_ttft": "TTFT met",
               "attainment_tpot": "TPOT met", "attainment_e2e": "E2E met"}


@dataclass
class Comparison:
    table: pd.DataFrame
    bounds: list[Bound]
    results: dict[str, Result]
    time_model: str  # the replays' time model: only bounds valid under it measure gaps
    notes: list[str] = field(default_factory=list)
    attainment_bound: AttainmentBound | None = None
    interrupted: bool = False  # a stop signal ended the exact solve: its incumbent is shown

    @property
    def best_bound(self) -> Bound | None:
        valid = [b for b in self.bounds if b.time_model == self.time_model]
        return max(valid, key=lambda b: b.value_ms) if valid else None

    def markdown(self) -> str:
        """The table and the bounds in markdown; each time column in ms or s by the one rule
        of ``llmopt.report.units`` (the bounds in the unit of the schedules' total time)."""
        t = self.table
        columns = [time_column(name, t[key]) for name, key in (
            ("total time", "makespan_ms"), ("TTFT p50", "ttft_p50_ms"),
            ("TPOT p50", "tpot_p50_ms"), ("E2E p50", "e2e_p50_ms"))]
        (total, totals), (ttft, ttfts), (tpot, tpots), (e2e, e2es) = columns
        unit = time_unit(float(t["makespan_ms"].max()))
        cols = ["schedule", total, "utilization", "tokens/s", ttft, tpot, e2e, "gap to bound"]
        slo_cols = [c for c in ("attainment", "attainment_ttft", "attainment_tpot",
                                "attainment_e2e")
                    if c in t and t[c].notna().any()]
        cols += [SLO_HEADERS[c] for c in slo_cols]
        goodput = bool(slo_cols) and "goodput_rps" in self.table \
            and self.table["goodput_rps"].notna().any()
        cols += ["goodput (req/s)"] if goodput else []
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        row: Any  # pandas-stubs types each field of itertuples() as any scalar (str, date, …)
        for k, row in enumerate(t.itertuples(index=False)):
            gap = "—" if pd.isna(row.gap_to_bound) else f"{row.gap_to_bound:.2%}"
            shares = "".join(" — |" if pd.isna(getattr(row, c)) else f" {getattr(row, c):.1%} |"
                             for c in slo_cols)
            if goodput:
                shares += (" — |" if pd.isna(row.goodput_rps) else f" {row.goodput_rps:.2f} |")
            lines.append(f"| {row.schedule} | {totals[k]} | {row.utilization:.2%} | "
                         f"{row.tokens_per_s:.1f} | {ttfts[k]} | {tpots[k]} | {e2es[k]} | "
                         f"{gap} |{shares}")
        if self.attainment_bound is not None:
            ab = self.attainment_bound
            found = "none" if ab.met_best is None else f"{ab.met_best}"
            lines.append(f"\nattainment bound (SLO met, at most): **{ab.share_upper:.1%}** "
                         f"({ab.met_upper} of {ab.requests} requests; {ab.status}, best "
                         f"schedule found meets {found}; {ab.runtime_s:.1f} s): no schedule "
                         "does better.")
        lines.append("")
        lines.append(f"| lower bound | {total} | valid under |")
        lines.append("|---|---|---|")
        for b in self.bounds:
            lines.append(f"| {b.name} | {fmt_time(b.value_ms, unit)} | {b.valid_under} |")
        best = self.best_bound
        if best is not None:
            lines.append(f"| **best for the replays ({self.time_model} model)** | "
                         f"**{fmt_time(best.value_ms, unit)}** | {best.name} |")
        lines += [f"\nNote: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


BOUNDS_SHARE = 0.4  # of the time left after the replays, for the bounds when a solve follows
MIN_PHASE_S = 0.05  # a bound or a solve gets at least this, even once the time is up


def compare(instance: Instance, policies: list[str], time_limit_s: float = 60.0,
            progress: Progress = SILENT, optimize: bool = True) -> Comparison:
    """Replay ``policies`` beside the lower bounds of the instance's family; with
    ``optimize``, also the family's exact problem under the replays' time model (a row of its
    own, e.g. ``pd-competition`` with the replay time model, or ``infermax-csp`` on small
    instances) and the solver-based bounds.

    Everything shares ``time_limit_s``: the replays come first, one at a time, each starting
    only within the limit (the first always runs; a note names those skipped); the bounds get
    ``BOUNDS_SHARE`` of the time left when a solve follows, the exact problem half of the rest
    when the attainment bound follows it, and the attainment bound the rest. A bound or solve
    whose time is up gets ``MIN_PHASE_S``: the closed-form bounds and the heuristics."""
    family = family_of(instance)
    deadline = Deadline.after(time_limit_s)
    small = (family.exact_max_requests is None
             or instance.num_requests <= family.exact_max_requests)
    solve_exact = optimize and small
    attain = optimize and instance.has_slos
    results: dict[str, Result] = {}
    notes: list[str] = []
    skipped: list[str] = []
    for policy in policies:
        if results and deadline.passed():
            skipped.append(policy)
            continue
        progress.stage(f"replay {policy}")
        results[policy], _ = replay_result(instance, policy, progress=progress)
    if skipped:
        notes.append(f"not replayed: {', '.join(skipped)} (the {time_limit_s:g} s time limit "
                     "was up; a longer --time-limit replays them)")
    bounds = family_bounds(instance, _seconds(deadline.share(
        BOUNDS_SHARE if solve_exact or attain else 1.0)), progress, solver_bounds=optimize)
    if solve_exact:
        progress.stage(f"{family.exact} under the replays' time model")
        try:
            results[family.exact] = solve(instance, family.exact, None,
                                          _seconds(deadline.share(0.5 if attain else 1.0)),
                                          progress, **family.exact_options)
        except LlmoptError as exc:
            notes.append(f"{family.exact} not solved: {exc}")
    elif optimize:
        notes.append(f"{family.exact} not solved: {instance.num_requests} requests, more "
                     f"than the {family.exact_max_requests} it is run on")
    valid = [b.value_ms for b in bounds if b.time_model == family.replay_time_model]
    exact = results.get(family.exact)
    if exact is not None and exact.bound is not None:
        valid.append(exact.bound)
    best = max(valid) if valid else None
    rows = []
    for policy, result in results.items():
        m = result.data["metrics"]
        rows.append({
            "schedule": policy,
            **{k: m[k] for k in ("makespan_ms", "utilization", "tokens_per_s", "ttft_p50_ms",
                                 "tpot_p50_ms", "e2e_p50_ms", "ttft_mean_ms", "tpot_mean_ms",
                                 "e2e_mean_ms")},
            "gap_to_bound": (m["makespan_ms"] - best) / m["makespan_ms"] if best else None,
            **{k: m.get(k) for k in ATTAINMENT_METRICS if instance.has_slos},
            **{k: m.get(k) for k in LATENCY_METRICS},
        })
    interrupted = exact is not None and exact.interrupted
    if interrupted:
        notes.append(f"{family.exact} interrupted: its best schedule so far is shown")
    attainment = _attainment_bound(instance, _seconds(deadline), progress, notes) \
        if attain and not interrupted else None
    return Comparison(pd.DataFrame(rows), bounds, results, family.replay_time_model, notes,
                      attainment, interrupted)


def _seconds(deadline: Deadline) -> float:
    """The time left to a phase, at least ``MIN_PHASE_S``."""
    return max(deadline.left(), MIN_PHASE_S)


def _attainment_bound(instance: Instance, time_limit_s: float, progress: Progress,
                      notes: list[str]) -> AttainmentBound | None:
    """The exact upper bound on SLO attainment, on instances small enough for it."""
    most = load(f"{ATTAINMENT_MODULE}:MAX_ATTAINMENT_REQUESTS")
    if instance.profile.family != "infermax" or instance.system.instances != 1 or \
            instance.num_requests > most:
        notes.append(f"attainment bound not computed: it is exact for one infermax model "
                     f"instance and up to {most} requests")
        return None
    progress.stage("the exact upper bound on SLO attainment")
    bound: AttainmentBound = load(f"{ATTAINMENT_MODULE}:attainment_bound")(
        instance, time_limit_s=time_limit_s)
    return bound
