"""Compare schedules: replay several policies under one cost model beside the lower bounds.

``compare(instance, policies)`` returns a table (one row per schedule) and the bounds; the CLI
writes it as markdown and CSV with a chart. The gap of a schedule is measured against the best
bound valid under the replay's time model; bounds valid only under another model are listed
but not used for gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from llmopt.data.instance import Instance
from llmopt.policies.replay import replay_result
from llmopt.problems.base import Bound
from llmopt.problems.pang.bounds import pang_bounds
from llmopt.progress import SILENT, Progress
from llmopt.result import Result

REPLAY_MODEL = "replay"


@dataclass
class Comparison:
    table: pd.DataFrame
    bounds: list[Bound]
    results: dict[str, Result]

    @property
    def best_bound(self) -> Bound | None:
        valid = [b for b in self.bounds if b.time_model == REPLAY_MODEL]
        return max(valid, key=lambda b: b.value_ms) if valid else None

    def markdown(self) -> str:
        cols = ["schedule", "total time (s)", "utilization", "tokens/s", "TTFT p50 (s)",
                "TPOT p50 (ms)", "E2E p50 (s)", "gap to bound"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in self.table.itertuples(index=False):
            gap = "—" if pd.isna(row.gap_to_bound) else f"{row.gap_to_bound:.2%}"
            lines.append(
                f"| {row.schedule} | {row.makespan_ms / 1000:.2f} | {row.utilization:.2%} | "
                f"{row.tokens_per_s:.1f} | {row.ttft_p50_ms / 1000:.2f} | "
                f"{row.tpot_p50_ms:.1f} | {row.e2e_p50_ms / 1000:.2f} | {gap} |")
        lines.append("")
        lines.append("| lower bound | total time (s) | valid under |")
        lines.append("|---|---|---|")
        for b in self.bounds:
            lines.append(f"| {b.name} | {b.value_ms / 1000:.2f} | {b.valid_under} |")
        best = self.best_bound
        if best is not None:
            lines.append(f"| **best for the replay** | **{best.value_ms / 1000:.2f}** | "
                         f"{best.name} |")
        return "\n".join(lines) + "\n"


def compare(instance: Instance, policies: list[str], time_limit_s: float = 60.0,
            progress: Progress = SILENT, optimize: bool = True) -> Comparison:
    """Replay ``policies``; with ``optimize``, also solve the PD-competition problem under the
    replay's time model (``pd-competition`` row) and add the solver-based bounds."""
    bounds = pang_bounds(instance, time_limit_s, progress)
    results: dict[str, Result] = {}
    for policy in policies:
        progress.stage(f"replay {policy}")
        results[policy], _ = replay_result(instance, policy, progress=progress)
    if optimize:
        from llmopt.problems.pang import pd_competition
        from llmopt.problems.pang.solver_bounds import pd_solver_bounds

        bounds += pd_solver_bounds(instance, min(time_limit_s, 30.0), progress,
                                   time_models=(REPLAY_MODEL,))
        results["pd-competition"] = pd_competition.solve(
            instance, "auto", time_limit_s, progress, time_model=REPLAY_MODEL)
    valid = [b.value_ms for b in bounds if b.time_model == REPLAY_MODEL]
    if optimize and results["pd-competition"].bound is not None:
        valid.append(results["pd-competition"].bound)
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
        })
    return Comparison(pd.DataFrame(rows), bounds, results)
