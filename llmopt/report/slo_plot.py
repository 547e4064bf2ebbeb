"""SLO charts: the distribution (CDF) of each request's TTFT and TPOT per schedule, with the
targets marked (docs/guide.md, "SLOs and goodput").

When every request has the same target the axis is in milliseconds and the target is a vertical
line; when targets differ (classes, ``basis: each``) the axis is each request's latency over its
own target, and the line is at 1. Either way, the height of a curve where it crosses the line is
the share of requests meeting that target."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from llmopt.data.instance import Instance
from llmopt.report.plot import readable_log_ticks, set_title
from llmopt.schedule.metrics import request_latencies
from llmopt.schedule.schedule import Schedule

TARGETS = {"ttft_ms": ("ttft_slo_ms", "TTFT"), "tpot_ms": ("tpot_slo_ms", "TPOT")}
CDF_POINTS = 2000  # steps drawn per curve at most: a share off by under 1/2000, unseen


def step_cdf(ax: Axes, values: np.ndarray, label: str) -> None:
    """The empirical CDF of ``values`` (sorted, finite) as steps, through at most
    ``CDF_POINTS`` of its points evenly spaced in share (millions of token gaps drew for
    tens of seconds and gigabytes)."""
    n = values.size
    at = np.unique(np.linspace(0, n - 1, min(n, CDF_POINTS)).round().astype(np.int64))
    ax.step(values[at], (at + 1) / n, where="post", label=label)


def plot_latency_cdf(latencies: dict[str, pd.DataFrame], metric: str = "ttft_ms",
                     ax: Axes | None = None) -> Axes:
    """One empirical CDF of ``metric`` (``ttft_ms`` or ``tpot_ms``) per schedule, from
    :func:`~llmopt.schedule.metrics.request_latencies` tables keyed by schedule name."""
    if metric not in TARGETS:
        raise ValueError(f"metric must be one of {', '.join(TARGETS)}, not {metric!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    target_col, label = TARGETS[metric]
    targets = pd.concat([t[target_col] for t in latencies.values()]).dropna()
    single = targets.nunique() <= 1
    for name, table in latencies.items():
        values = table[metric].to_numpy(dtype=float)
        if not single:
            values = values / table[target_col].to_numpy(dtype=float)
        values = np.sort(values[np.isfinite(values)])
        if values.size:
            step_cdf(ax, values, name)
    if targets.size:
        at = float(targets.iloc[0]) if single else 1.0
        ax.axvline(at, color="black", linestyle="--", linewidth=1,
                   label=f"{label} target ({at:,.0f} ms)" if single else f"{label} target")
    ax.set_xscale("log")
    readable_log_ticks(ax)
    ax.set_xlabel(f"{label} (ms)" if single else f"{label} / its target")
    ax.set_ylabel("share of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def slo_cdf_figure(instance: Instance, schedules: dict[str, Schedule], title: str = "") -> Axes:
    """TTFT and TPOT CDFs side by side for ``schedules`` of ``instance`` (which has SLOs);
    returns the first axes (``plot.save`` saves the whole figure)."""
    latencies = {name: request_latencies(s, instance) for name, s in schedules.items()}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    plot_latency_cdf(latencies, "ttft_ms", left)
    plot_latency_cdf(latencies, "tpot_ms", right)
    fig.suptitle(title or f"{instance.name}: TTFT and TPOT per request (dashed: the SLO)")
    return left


def plot_itl_cdf(schedules: dict[str, Schedule], ax: Axes | None = None) -> Axes:
    """One empirical CDF per schedule of its inter-token latencies (every gap between two
    consecutive output tokens of a request, ``Schedule.inter_token_latencies``), with the
    TPOT target dashed when every request has the same one (a request's TPOT is the mean of
    its gaps)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    for name, schedule in schedules.items():
        gaps = np.sort(schedule.inter_token_latencies()["itl_ms"].to_numpy(dtype=float))
        gaps = gaps[np.isfinite(gaps)]
        if gaps.size:
            step_cdf(ax, gaps, name)
    ax.set_xscale("log")
    readable_log_ticks(ax)
    ax.set_xlabel("inter-token latency (ms)")
    ax.set_ylabel("share of token gaps")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    return ax


def itl_cdf_figure(instance: Instance, schedules: dict[str, Schedule], title: str = "") -> Axes:
    """The ITL CDF of ``schedules``, the TPOT target dashed when all requests share one."""
    ax = plot_itl_cdf(schedules)
    targets = pd.Series(instance.slo_targets("tpot_slo_ms")).dropna()
    if targets.size and targets.nunique() == 1:
        at = float(targets.iloc[0])
        ax.axvline(at, color="black", linestyle="--", linewidth=1,
                   label=f"TPOT target ({at:,.0f} ms)")
    ax.legend(fontsize=8, loc="lower right")
    set_title(ax, title or f"{instance.name}: inter-token latency (every gap between tokens)")
    return ax
