"""Rendering of the compare workflow's results (``llmopt.problems.workflows.compare``): the
markdown of each kind of comparison, and :func:`render`, which gives ``llmopt compare`` what it
writes (heading, markdown, table, chart, schedules) for any of them. Nothing here solves or
replays."""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch
from typing import Any

import pandas as pd
from matplotlib.axes import Axes

from llmopt.data.instance import Instance
from llmopt.policies.slice.replay import ladder_markdown
from llmopt.problems.workflows.ceiling import PolicyCeilings
from llmopt.problems.workflows.compare import Comparison, LadderComparison, PriorityComparison
from llmopt.report import plot as plots
from llmopt.report.priority_compare import plot_priority, priority_markdown
from llmopt.report.units import fmt_time, time_column, time_unit
from llmopt.schedule import Schedule

SLO_HEADERS = {"attainment": "SLO attainment", "attainment_ttft": "TTFT met",
               "attainment_tpot": "TPOT met", "attainment_e2e": "E2E met"}


def comparison_markdown(comparison: Comparison) -> str:
    """The table and the bounds in markdown; each time column in ms or s by the one rule
    of ``llmopt.report.units`` (the bounds in the unit of the schedules' total time)."""
    t = comparison.table
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
    ceiling = bool(slo_cols) and "gap_to_ceiling" in t and t["gap_to_ceiling"].notna().any()
    cols += ["gap to ceiling"] if ceiling else []
    goodput = bool(slo_cols) and "goodput_rps" in comparison.table \
        and comparison.table["goodput_rps"].notna().any()
    cols += ["goodput (req/s)"] if goodput else []
    cached = "prefix_hit_rate_tokens" in t and t["prefix_hit_rate_tokens"].notna().any()
    cols += ["prefix hit (tokens)", "preemptions"] if cached else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    row: Any  # pandas-stubs types each field of itertuples() as any scalar (str, date, …)
    for k, row in enumerate(t.itertuples(index=False)):
        gap = "—" if pd.isna(row.gap_to_bound) else f"{row.gap_to_bound:.2%}"
        shares = "".join(" — |" if pd.isna(getattr(row, c)) else f" {getattr(row, c):.1%} |"
                         for c in slo_cols)
        if ceiling:
            shares += f" {ceiling_gap(row.gap_to_ceiling)} |"
        if goodput:
            shares += (" — |" if pd.isna(row.goodput_rps) else f" {row.goodput_rps:.2f} |")
        if cached:
            shares += (" — |" if pd.isna(row.prefix_hit_rate_tokens)
                       else f" {row.prefix_hit_rate_tokens:.1%} |") + f" {row.evictions:,} |"
        lines.append(f"| {row.schedule} | {totals[k]} | {row.utilization:.2%} | "
                     f"{row.tokens_per_s:.1f} | {ttfts[k]} | {tpots[k]} | {e2es[k]} | "
                     f"{gap} |{shares}")
    if comparison.ceilings is not None:
        lines += ["", *ceiling_lines(comparison.ceilings)]
    if comparison.bounds:  # a family without bounds (roofline) says so in a note
        lines.append("")
        lines.append(f"| lower bound | {total} | valid under |")
        lines.append("|---|---|---|")
    for b in comparison.bounds:
        valid = b.valid_under
        if comparison.prefix_caching and not b.holds_with_prefix_cache:
            valid += " — not with a prefix cache: no gap of these replays"
        lines.append(f"| {b.name} | {fmt_time(b.value_ms, unit)} | {valid} |")
    best = comparison.best_bound
    if best is not None:
        lines.append(f"| **best for the replays ({comparison.time_model} model)** | "
                     f"**{fmt_time(best.value_ms, unit)}** | {best.name} |")
    lines += [f"\nNote: {note}" for note in comparison.notes]
    return "\n".join(lines) + "\n"


def ceiling_gap(gap: float) -> str:
    """A gap to the ceiling (ceiling − attainment, a share) in percentage points."""
    return "—" if pd.isna(gap) else f"{100 * gap:.1f} pts"


def ceiling_lines(ceilings: PolicyCeilings) -> list[str]:
    """The ceilings' sentences as markdown paragraphs, each with its time, then what the
    ceiling holds for and the note (if any)."""
    out = []
    within, ignoring = ceilings.within_memory, ceilings.ignoring_memory
    if within is not None:
        out.append(f"SLO ceiling: **{within.sentence()}**; {within.runtime_s:.1f} s.")
    if ignoring is not None:
        out.append(f"SLO ceiling for {', '.join(ceilings.ignoring)} (ignores the KV memory M): "
                   f"**{ignoring.sentence()}**; {ignoring.runtime_s:.1f} s.")
    found = within or ignoring
    if found is not None:
        ran = ", ".join(f"{name} {met}" for name, met in found.bounds.items())
        out.append(f"Bounds that ran: {ran}" + "".join(f"; {note}" for note in found.notes)
                   + ".")
        out.append(f"Valid under: {found.valid_under}. Gap to ceiling: the ceiling that holds "
                   "for the schedule minus its attainment.")
    if ceilings.note:
        out.append(f"Note: {ceilings.note}")
    return [line for text in out for line in ("", text)][1:]


@dataclass
class Rendered:
    """What ``llmopt compare`` writes of a comparison: compare.md (``heading`` and
    ``markdown``), compare.csv (``table``), compare.png (``figure``, when there is one) and,
    with SLOs, the CDF of the ``schedules``."""

    heading: str
    markdown: str
    table: pd.DataFrame
    figure: Axes | None
    schedules: dict[str, Schedule]


@singledispatch
def render(comparison: Any, instance: Instance) -> Rendered:
    raise TypeError(f"no rendering of {type(comparison).__name__}")


@render.register
def _total_time(comparison: Comparison, instance: Instance) -> Rendered:
    best = comparison.best_bound
    ceiling = comparison.ceilings.within_memory if comparison.ceilings else None
    ax = plots.comparison_figure(
        comparison.table, best.value_ms if best else None,
        ceiling=ceiling.share if ceiling is not None else None,
        ceiling_label=f"no schedule meets more (method: {ceiling.method})" if ceiling else "",
        title=f"{instance.name}: schedules compared")
    schedules = {name: r.schedule for name, r in comparison.results.items()
                 if r.schedule is not None}
    return Rendered("schedules compared", comparison_markdown(comparison), comparison.table,
                    ax, schedules)


@render.register
def _g(comparison: PriorityComparison, instance: Instance) -> Rendered:
    return Rendered("schedules compared by G", priority_markdown(comparison), comparison.table,
                    plot_priority(comparison, title=f"{instance.name}: G by schedule"),
                    comparison.schedules)


@render.register
def _section5(comparison: LadderComparison, instance: Instance) -> Rendered:
    md = (f"{ladder_markdown(comparison.table, {'gap to bound': 'gap_to_bound'})}\n"
          f"Replays on {comparison.instances} model "
          "instance(s) (Cheng et al. 2024, section 5): times in s; batch = mean batch size "
          "(requests per slice; per iteration for ILS); pad, invalid and slices per request; "
          "gap to bound = (last end − the bound valid for the schedule) / last end.\n")
    if comparison.bounds:
        md += "\n" + slice_bounds_markdown(comparison) + "\n"
    md += "".join(f"\nNote: {note}\n" for note in comparison.notes)
    return Rendered("slice-level schedules compared", md, comparison.table, None, {})


HOLDS_FOR = {"slice": "slice-level schedulers", "iteration": "iteration-level (ILS)"}


def slice_bounds_markdown(comparison: LadderComparison) -> str:
    """The bounds of ``problems.scls.bounds`` as a table: at most the throughput, at least the
    response mean and p95 and the last end, with what each holds for."""
    lines = ["| bound for | req/s (at most) | response (s, at least) | resp. p95 (s, at least) "
             "| last end (s, at least) | valid under |", "|---|---|---|---|---|---|"]
    for engine, b in comparison.bounds.items():
        lines.append(f"| {HOLDS_FOR.get(engine, engine)} | {b.throughput_rps:,.2f} | "
                     f"{b.response_mean_ms / 1000:,.2f} | {b.response_p95_ms / 1000:,.2f} | "
                     f"{b.makespan_ms / 1000:,.2f} | {b.valid_under} |")
    lines.append("\nLast end: the larger of each request served alone after its arrival "
                 "(T_serve(1, I, O), eqs 1–4) and the work of the requests arriving after any "
                 "time, spread over the instances (formulations.md, SCLS bounds).")
    return "\n".join(lines)


__all__ = ["SLO_HEADERS", "Rendered", "comparison_markdown", "render"]
