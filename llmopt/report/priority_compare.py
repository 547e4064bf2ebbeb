"""``llmopt compare`` of a bilinear instance (SLO-aware priority mapping, Huang et al. 2025):
each replayed policy's G (eq 2: requests meeting their SLOs over the summed end-to-end latency,
in requests per second) beside the best priority plan llmopt finds, served on the same
simulation core, and the proven upper bound on G.

The bound holds over priority plans (static batches of at most ``system.clients`` requests in
priority order) timed by the predictor (eqs 14–17), the problem ``slo-priority`` solves: it is
shown beside every row, but only the plan scored by the predictor is held against it (its gap).
A replay times iterations on the core (``llmopt.problems.slo_priority.replayed``) and a
continuous-batching policy is no priority plan, so neither is bounded by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes

from llmopt.data.instance import Instance
from llmopt.deadline import Deadline
from llmopt.errors import LlmoptError
from llmopt.policies.replay import replay_result
from llmopt.problems.api import solve
from llmopt.problems.slo_priority.model import SloPriorityData
from llmopt.problems.slo_priority.replayed import replay_plan, replayed_g
from llmopt.problems.slo_priority.solve import SIMPLE_BOUND_PROOF, simple_bound
from llmopt.progress import SILENT, Progress
from llmopt.report.compare import MIN_PHASE_S
from llmopt.report.units import time_column
from llmopt.result import Result
from llmopt.schedule import Schedule

PLAN = "slo-priority plan"
PLAN_REPLAYED = "slo-priority plan, replayed"
BY_MODEL = "eqs 14–17"  # a row scored by the predictor, the only kind the bound holds for


@dataclass
class PriorityComparison:
    """One row per schedule (``schedule``, ``scored_by``, ``g_per_s``, ``n_met``,
    ``requests``, ``total_e2e_s``, ``makespan_s``, ``gap_to_bound``) and the bound on G."""

    table: pd.DataFrame
    bound_g_per_s: float | None  # None: no bound for this instance (several model instances)
    bound_proof: str
    schedules: dict[str, Schedule]
    results: dict[str, Result]
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        # times in ms or s by the one rule of llmopt.report.units, as llmopt replay shows them
        e2e, e2es = time_column("Σ E2E", self.table["total_e2e_s"] * 1000.0)
        total, totals = time_column("total time", self.table["makespan_s"] * 1000.0)
        lines = [f"| schedule | scored by | G (requests/s) | SLO met | {e2e} | {total} "
                 "| gap to the bound |", "|---|---|---|---|---|---|---|"]
        row: Any  # pandas-stubs types each field of itertuples() as any scalar
        for k, row in enumerate(self.table.itertuples(index=False)):
            gap = "—" if pd.isna(row.gap_to_bound) else f"{row.gap_to_bound:.2%}"
            lines.append(f"| {row.schedule} | {row.scored_by} | {row.g_per_s:.6f} | "
                         f"{row.n_met} of {row.requests} | {e2es[k]} | {totals[k]} | "
                         f"{gap} |")
        if self.bound_g_per_s is not None:
            lines += ["", f"upper bound on G over priority plans (static batches of at most "
                      f"system.clients, timed by eqs 14–17): **{self.bound_g_per_s:.6f} "
                      f"requests/s** ({self.bound_proof}). Replays are timed by the simulation "
                      "core, and a continuous-batching policy is no priority plan: the bound is "
                      "shown beside them, not held against them."]
        lines += [f"\nNote: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def compare_priority(instance: Instance, policies: list[str], time_limit_s: float,
                     progress: Progress = SILENT, optimize: bool = True) -> PriorityComparison:
    """Replay ``policies``; with ``optimize``, also solve ``slo-priority`` (CP-SAT from SA's
    plan) and serve its plan. The bound is CP-SAT's when it solved, else the closed-form one
    every solver reports (``simple_bound``). The replays start only within ``time_limit_s``
    (the first always runs); the solve gets the time left."""
    rows: list[dict[str, object]] = []
    schedules: dict[str, Schedule] = {}
    results: dict[str, Result] = {}
    notes: list[str] = []
    one_instance = instance.system.instances == 1
    if not one_instance:
        notes.append(f"no plan and no bound: slo-priority plans one model instance, this "
                     f"system has {instance.system.instances} (system.instances)")
    deadline = Deadline.after(time_limit_s)
    skipped: list[str] = []
    for policy in policies:
        if results and deadline.passed():
            skipped.append(policy)
            continue
        progress.stage(f"replay {policy}")
        results[policy], schedules[policy] = replay_result(instance, policy, progress=progress)
        rows.append(_replayed_row(policy, schedules[policy], instance))
    if skipped:
        notes.append(f"not replayed: {', '.join(skipped)} (the {time_limit_s:g} s time limit "
                     "was up; a longer --time-limit replays them)")
    bound: float | None = None
    proof = ""
    if optimize and one_instance:
        progress.stage("slo-priority (CP-SAT from SA's plan)")
        try:
            plan = solve(instance, "slo-priority", "cpsat",
                         max(deadline.left(), MIN_PHASE_S), progress)
        except LlmoptError as exc:
            notes.append(f"slo-priority not solved: {exc}")
        else:
            results[PLAN] = plan
            rows.append({"schedule": f"{PLAN} ({plan.status})", "scored_by": BY_MODEL,
                         "g_per_s": plan.data["g_per_s"], "n_met": plan.data["n_met"],
                         "requests": instance.num_requests,
                         "total_e2e_s": plan.data["total_latency_ms"] / 1000.0,
                         "makespan_s": float("nan")})
            if plan.data.get("g_bound_per_s") is not None:
                bound, proof = plan.data["g_bound_per_s"], plan.proof or "CP-SAT"
            schedules[PLAN_REPLAYED] = replay_plan(instance, plan)
            rows.append(_replayed_row(PLAN_REPLAYED, schedules[PLAN_REPLAYED], instance))
    if bound is None and one_instance:
        bound = simple_bound(SloPriorityData.from_instance(instance))
        proof = f"{SIMPLE_BOUND_PROOF}, closed form"
    table = pd.DataFrame(rows)
    table["gap_to_bound"] = [
        (bound - g) / bound if scored == BY_MODEL and bound else float("nan")
        for g, scored in zip(table["g_per_s"], table["scored_by"], strict=True)]
    return PriorityComparison(table, bound, proof, schedules, results, notes)


def _replayed_row(name: str, schedule: Schedule, instance: Instance) -> dict[str, object]:
    g = replayed_g(schedule, instance)
    return {"schedule": name, "scored_by": "replay", "g_per_s": g.g_per_s, "n_met": g.n_met,
            "requests": instance.num_requests, "total_e2e_s": g.total_ms / 1000.0,
            "makespan_s": schedule.makespan_ms / 1000.0}


def plot_priority(comparison: PriorityComparison, ax: Axes | None = None,
                  title: str = "") -> Axes:
    """G per schedule (bars, SLO met on top) with the upper bound on G as a line."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    table = comparison.table
    bars = ax.bar(table["schedule"], table["g_per_s"], color="#4e79a7")
    for bar, met, n in zip(bars, table["n_met"], table["requests"], strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{met} of {n} met",
                ha="center", va="bottom", fontsize=8)
    if comparison.bound_g_per_s is not None:
        ax.axhline(comparison.bound_g_per_s, color="crimson", ls="--", lw=1.2,
                   label=f"upper bound over priority plans {comparison.bound_g_per_s:.4f}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_ylabel("G = SLO met / Σ E2E (requests/s)")
    ax.set_title(title or "G by schedule (labels: requests meeting their SLOs)", fontsize=10)
    ax.tick_params(axis="x", labelrotation=15)
    return ax
