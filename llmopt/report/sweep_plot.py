"""Plots of a sweep's results table: a metric against a parameter, one line per policy with a
band over the other parameters (seeds), or the spread of a metric per policy.

Both take a DataFrame as ``pd.read_parquet(OUT / "results.parquet")`` gives it and an optional
``ax``.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from llmopt.errors import OptionError
from llmopt.report.plot import readable_log_ticks, set_title

NUMERIC_X = ("rate_scale", "rate_per_s", "count", "clients", "replicas", "kv_capacity",
             "max_batch_tokens", "max_prefill_tokens", "time_limit_s", "bins", "slo_scale")
DEFAULT_Y = ("ttft_p99_ms", "gap_to_bound", "makespan_ms", "gap", "objective")
LABELS = {"rate_scale": "arrival-rate scale (×)", "rate_per_s": "arrival rate (requests/s)",
          "ttft_p99_ms": "TTFT p99 (ms)", "makespan_ms": "total inference time (ms)",
          "gap_to_bound": "gap to the best lower bound", "gap": "solver gap",
          "slo_scale": "SLO targets scaled by (×)", "tpot_p99_ms": "TPOT p99 (ms)",
          "attainment": "SLO attainment (share of requests)",
          "attainment_ttft": "TTFT attainment", "attainment_tpot": "TPOT attainment"}
# the parameter columns of a results table besides the numeric ones: cells differing in one of
# these are different runs (a seed, a policy), never repeats of one measurement
OTHER_PARAMETERS = ("instance", "policy", "router", "problem", "solver", "formulation",
                    "time_model", "literal", "cuts", "workers", "seed")
TARGET_COLOR = "#444444"


def check_columns(frame: pd.DataFrame, **chosen: str | None) -> None:
    """Each chosen column (x=…, y=…, hue=…) exists in the table, else an OptionError naming
    the option."""
    for option, column in chosen.items():
        if column is not None and column not in frame.columns:
            raise OptionError(f"no such column (the table has: {', '.join(frame.columns)})",
                              field=f"--{option}", value=column)


def default_axes(frame: pd.DataFrame) -> tuple[str | None, str | None, str | None]:
    """(x, y, hue) for the default plot: the first numeric parameter that varies (none: a
    spread per hue), the first of :data:`DEFAULT_Y` with values, policy or problem as hue."""
    ok = frame[frame["cell_status"] == "ok"] if "cell_status" in frame else frame
    x = next((c for c in NUMERIC_X if c in ok and ok[c].nunique() > 1), None)
    y = next((c for c in DEFAULT_Y if c in ok and ok[c].notna().any()), None)
    hue = next((c for c in ("policy", "problem", "instance") if c in ok
                and ok[c].notna().any()), None)
    return x, y, hue


def plot_lines(frame: pd.DataFrame, x: str, y: str, hue: str | None = None,
               ax: Axes | None = None, title: str = "", target: float | None = None,
               target_label: str = "target", ceiling: pd.DataFrame | None = None) -> Axes:
    """``y`` against ``x``, one line per ``hue`` value. When the other parameters that vary
    (seeds, …) were crossed with ``x`` (a grid), the line is their mean, shaded between the
    least and the largest value at each ``x``; when they were not (a search's probes: each group
    probes its own ``x`` values), one line per combination of them in its hue's colour, never a
    mean across them. ``target``: a dashed horizontal line (a search's threshold).
    ``ceiling``: the proven SLO ceiling's curve of a goodput search (``llmopt.sweep.goodput``:
    ``rate``, ``ceiling_share``, ``workload``), a black line per workload, drawn when ``y`` is
    the attainment and ``x`` its rate parameter."""
    check_columns(frame, x=x, y=y, hue=hue)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    data = _ok(frame).dropna(subset=[x, y])
    others = [c for c in (*NUMERIC_X, *OTHER_PARAMETERS) if c in data and c not in (x, hue)
              and data[c].nunique() > 1]
    groups: Any = data.groupby(hue, sort=True) if hue else [("", data)]
    banded = separate = False
    for name, part in groups:
        label = str(name[0] if isinstance(name, tuple) else name) or y
        if not others or _crossed(part, x, others):
            stats = part.groupby(x)[y].agg(["mean", "min", "max", "count"]).sort_index()
            xs = stats.index.to_numpy(dtype=float)
            line = ax.plot(xs, stats["mean"], marker="o", label=label)[0]
            if (stats["count"] > 1).any():
                banded = True
                ax.fill_between(xs, stats["min"], stats["max"], color=line.get_color(),
                                alpha=0.18, linewidth=0)
            continue
        separate = True
        color = None
        for k, (_, run) in enumerate(part.groupby(others, sort=True, dropna=False)):
            run = run.sort_values(x)
            line = ax.plot(run[x].to_numpy(dtype=float), run[y].to_numpy(dtype=float),
                           marker="o", markersize=4, lw=1.0, alpha=0.85, color=color,
                           label=label if k == 0 else None)[0]
            color = line.get_color()
    if target is not None:
        ax.axhline(target, color=TARGET_COLOR, ls="--", lw=1.2, label=target_label)
    if ceiling is not None and y == "attainment" and len(ceiling) and \
            set(ceiling["parameter"]) == {x}:
        for k, (_, curve) in enumerate(ceiling.groupby(["workload", "memory"], sort=False)):
            curve = curve.sort_values("rate")
            ax.plot(curve["rate"].to_numpy(dtype=float),
                    curve["ceiling_share"].to_numpy(dtype=float), color="black", lw=1.6,
                    marker="x", markersize=4, ls="-" if bool(curve["memory"].iloc[0]) else ":",
                    label=None if k else "SLO ceiling: no schedule above\n(at the rates it probed)")
    positive = data[x].to_numpy(dtype=float)
    if len(positive) and positive.min() > 0 and positive.max() / positive.min() >= 16:
        ax.set_xscale("log")
        readable_log_ticks(ax)
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    how = ("one line per " + ", ".join(others) if separate
           else "line: mean\nband: min–max over " + ", ".join(others) if banded else "")
    if ax.get_legend_handles_labels()[0]:  # no line drawn (no cell has both): none
        ax.legend(title="\n".join(t for t in (hue, how) if t), frameon=False, fontsize=8,
                  title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    set_title(ax, title or f"{LABELS.get(y, y)} by {LABELS.get(x, x)}")
    ax.grid(alpha=0.3)
    return ax


def _crossed(part: pd.DataFrame, x: str, others: list[str]) -> bool:
    """Every combination of ``others`` was run at the same ``x`` values (a grid)."""
    xs = {frozenset(run[x]) for _, run in part.groupby(others, dropna=False)}
    return len(xs) == 1


def plot_spread(frame: pd.DataFrame, y: str, hue: str, ax: Axes | None = None,
                title: str = "") -> Axes:
    """The distribution of ``y`` per ``hue`` value across cells (e.g. the gap of each policy
    to the proven bound over 100 random cases, Pang et al. 2025 Figs 10–11): a box per value
    with every cell as a dot."""
    check_columns(frame, y=y, hue=hue)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    data = _ok(frame).dropna(subset=[y])
    names = sorted(data[hue].astype(str).unique())
    values = [data.loc[data[hue].astype(str) == n, y].to_numpy(dtype=float) for n in names]
    ax.boxplot(values, tick_labels=names, showfliers=False)
    rng = np.random.default_rng(0)
    for i, v in enumerate(values, start=1):
        ax.scatter(i + rng.uniform(-0.12, 0.12, len(v)), v, s=8, alpha=0.5)
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_xlabel(hue)
    counts = ", ".join(f"{n}: {len(v)}" for n, v in zip(names, values, strict=True))
    set_title(ax, title or f"{LABELS.get(y, y)} per {hue} ({counts} cells)")
    ax.grid(alpha=0.3, axis="y")
    return ax


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["cell_status"] == "ok"] if "cell_status" in frame else frame
