"""Rendering of ``llmopt compare`` on a bilinear instance (SLO-aware priority mapping, Huang et
al. 2025; the numbers: ``llmopt.problems.workflows.compare.by_g``):
each replayed policy's G (eq 2: requests meeting their SLOs over the summed end-to-end latency,
in requests per second) beside the best priority plan llmopt finds, served on the same
simulation core, and the proven upper bound on G.

The bound holds over priority plans (static batches of at most ``system.clients`` requests in
priority order) timed by the predictor (eqs 14–17), the problem ``slo-priority`` solves: it is
shown beside every row, but only the plan scored by the predictor is held against it (its gap).
A replay times iterations on the core (``llmopt.problems.workflows.slo_priority``) and a
continuous-batching policy is no priority plan, so neither is bounded by it.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes

from llmopt.problems.workflows.compare import PriorityComparison
from llmopt.report.units import time_column


def priority_markdown(comparison: PriorityComparison) -> str:
    """The table of G per schedule and the bound on G, in markdown."""
    # times in ms or s by the one rule of llmopt.report.units, as llmopt replay shows them
    e2e, e2es = time_column("Σ E2E", comparison.table["total_e2e_s"] * 1000.0)
    total, totals = time_column("total time", comparison.table["makespan_s"] * 1000.0)
    lines = [f"| schedule | scored by | G (requests/s) | SLO met | {e2e} | {total} "
             "| gap to the bound |", "|---|---|---|---|---|---|---|"]
    row: Any  # pandas-stubs types each field of itertuples() as any scalar
    for k, row in enumerate(comparison.table.itertuples(index=False)):
        gap = "—" if pd.isna(row.gap_to_bound) else f"{row.gap_to_bound:.2%}"
        lines.append(f"| {row.schedule} | {row.scored_by} | {row.g_per_s:.6f} | "
                     f"{row.n_met} of {row.requests} | {e2es[k]} | {totals[k]} | "
                     f"{gap} |")
    if comparison.bound_g_per_s is not None:
        lines += ["", f"upper bound on G over priority plans (static batches of at most "
                  f"system.clients, timed by eqs 14–17): **{comparison.bound_g_per_s:.6f} "
                  f"requests/s** ({comparison.bound_proof}). Replays are timed by the simulation "
                  "core, and a continuous-batching policy is no priority plan: the bound is "
                  "shown beside them, not held against them."]
    lines += [f"\nNote: {note}" for note in comparison.notes]
    return "\n".join(lines) + "\n"


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
