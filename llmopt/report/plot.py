"""Charts. Every function draws on a matplotlib ``ax`` (created when not given) and returns it."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg", force=False)

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import (
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    PercentFormatter,
)

from llmopt.data.instance import Instance
from llmopt.data.limits import resolve_limits
from llmopt.files import write_atomic
from llmopt.plugins import load
from llmopt.report.units import time_unit

if TYPE_CHECKING:
    from matplotlib.artist import Artist


def _axes(ax: Axes | None, height_for: int) -> Axes:
    if ax is not None:
        return ax
    height = min(max(3.0, 0.045 * height_for + 1.5), 14.0)
    _, ax = plt.subplots(figsize=(11, height), layout="constrained")
    return ax


def plot_assignment(instance: Instance, solution: dict[str, Any], ax: Axes | None = None
                    ) -> Axes:
    """Per-client assignment of a bin-packing solution: one row per client, its requests laid
    end to end by decode time (T_i), coloured by output length; the makespan and the proven
    bound as vertical lines."""
    clients = instance.total_clients
    ax = _axes(ax, clients)
    t_round = float(solution.get("t_round_ms") or 1.0)
    assignment = solution.get("assignment") or {}
    per_client: list[list[int]] = [[] for _ in range(clients)]
    names: list[list[str]] = [[] for _ in range(clients)]
    for r in instance.requests:
        c = assignment.get(r.id)
        if isinstance(c, int) and 0 <= c < clients:
            per_client[c].append(r.output_tokens)
            names[c].append(r.id)
    label_bars = clients <= 16 and instance.num_requests <= 64
    cmap = plt.get_cmap("viridis")
    top = max(int(instance.output_tokens.max()), 1)
    for c, lengths in enumerate(per_client):
        starts = np.cumsum([0, *lengths])[:-1] * t_round / 1000.0
        spans = [(s, n * t_round / 1000.0) for s, n in zip(starts, lengths, strict=True)]
        ax.broken_barh(spans, (c - 0.4, 0.8), facecolors=[cmap(n / top) for n in lengths],
                       edgecolor="white", linewidth=0.3 if clients > 60 else 0.8)
        if label_bars:
            for (x0, width), n, rid in zip(spans, lengths, names[c], strict=True):
                ax.text(x0 + width / 2, c, rid, ha="center", va="center", fontsize=7,
                        color="white" if n / top < 0.6 else "black")
    obj, bound = solution.get("objective"), solution.get("bound")
    if obj is not None:
        ax.axvline(obj / 1000.0, color="crimson", lw=1.2, label=f"makespan {obj / 1000:.2f} s")
    if bound is not None:
        ax.axvline(bound / 1000.0, color="black", lw=1.0, ls="--",
                   label=f"lower bound {bound / 1000:.2f} s")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, top))
    ax.figure.colorbar(sm, ax=ax, label="output tokens", pad=0.01)
    ax.set_xlabel("decode time on the client (s)")
    ax.set_ylabel("client")
    ax.set_ylim(-0.8, clients - 0.2)
    ax.invert_yaxis()
    gap = solution.get("gap")
    gap_text = f", gap {gap:.2%}" if gap is not None else ""
    ax.set_title(
        f"{instance.name}: {solution.get('problem')} by {solution.get('solver')} — "
        f"{solution.get('status')}{gap_text}; {instance.num_requests} requests on "
        f"{clients} clients",
        fontsize=10,
    )
    ax.legend(loc="upper right", bbox_to_anchor=(1.0, -0.09), ncol=2, fontsize=8,
              frameon=False)
    return ax


def save(ax: Axes, path: str | Path, dpi: int = 120) -> Path:
    """Save the figure of ``ax`` atomically as PNG and close it."""
    path = Path(path)
    buf = io.BytesIO()
    figure = ax.figure.figure  # the root figure (an axes may sit on a subfigure)
    figure.savefig(buf, format="png", dpi=dpi)
    plt.close(figure)
    write_atomic(path, buf.getvalue())
    return path


# beside the chart, never over the work
OUTSIDE_LEGEND: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.005, 1.0),
                                  "fontsize": 8, "frameon": False, "borderaxespad": 0.0}
PHASE_COLORS = {"prefill": "#f28e2b", "decode": "#4e79a7", "refill": "#b07aa1"}
MARKERS = ("evict", "hit")  # zero-length segments: an eviction, a prefix-cache hit
EVICT_COLOR = "#e15759"


def plot_gantt(segments, clients_per_instance: int, ax: Axes | None = None,
               title: str | None = None, raster_above: int = 20_000,
               by_request: bool = False, unit: tuple[str, float] | None = None,
               request_order: list[str] | None = None) -> Axes:
    """Gantt chart in the style of Pang et al. 2025, Figs 6–9: one row per client (rows of
    model instance e start at e × J), prefill, refill and decode coloured. With ``by_request``,
    one row per request instead, evictions marked (the style of Kim et al. 2025, Fig. 15).

    Up to ``raster_above`` segments are drawn as rectangles; beyond, the chart is rasterised at
    the figure's pixel resolution (a segment shorter than a pixel may vanish either way)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    evicts = segments[segments["phase"] == "evict"]
    segments = segments[~segments["phase"].isin(MARKERS)]  # zero-length: drawn apart or not
    if by_request:
        present = set(segments["request"])
        names = [r for r in (request_order or []) if r in present] or list(dict.fromkeys(
            segments["request"]))
        order = {r: k for k, r in enumerate(names)}
        rows = max(len(order), 1)
        y = segments["request"].map(order).to_numpy(dtype=np.int64)
    else:
        rows = int(segments["instance"].max() + 1) * clients_per_instance if len(segments) else 1
        y = (segments["instance"].to_numpy() * clients_per_instance
             + segments["client"].to_numpy()).astype(np.int64)
    ax = _axes(ax, rows)
    end_ms = float(segments["end_ms"].max()) if len(segments) else 1.0
    label, div = unit or time_unit(end_ms)
    x0 = segments["start_ms"].to_numpy(dtype=float) / div
    x1 = segments["end_ms"].to_numpy(dtype=float) / div
    xmax = max(float(x1.max()) if len(x1) else 1.0, 1e-3) * 1.01
    phases = list(PHASE_COLORS)
    code = np.array([phases.index(p) + 1 if p in PHASE_COLORS else len(phases) + 1
                     for p in segments["phase"]], dtype=np.int64)
    if len(segments) <= raster_above:
        _draw_rectangles(ax, x0, x1, y, code, rows)
    else:
        _draw_raster(ax, x0, x1, y, code, rows, xmax)
    handles: list[Artist] = [Patch(color=PHASE_COLORS[p], label=p) for p in PHASE_COLORS
                             if p in set(segments["phase"])]
    if by_request and len(evicts):
        ey = evicts["request"].map(order).to_numpy(dtype=float)
        ax.scatter(evicts["start_ms"].to_numpy(dtype=float) / div, ey, marker="X", s=60,
                   color=EVICT_COLOR, zorder=3, linewidths=0.5, edgecolors="white")
        handles.append(Line2D([], [], marker="X", ls="", color=EVICT_COLOR, label="evicted"))
    ax.set_xlim(0, xmax)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlabel(f"time ({label})")
    if by_request:
        ax.set_yticks(range(rows), list(order) if rows <= 40 else None)
        if rows > 40:
            ax.set_yticks([])
        ax.set_ylabel("request")
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("client")
    ax.legend(handles=handles, **OUTSIDE_LEGEND)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def _palette() -> np.ndarray:
    from matplotlib.colors import to_rgb

    colors = ["white", *PHASE_COLORS.values(), "grey"]
    return np.array([to_rgb(c) for c in colors])


def _draw_rectangles(ax: Axes, x0, x1, y, code, rows: int) -> None:
    from matplotlib.collections import PolyCollection

    h = 0.42 if rows <= 40 else 0.5
    verts = np.stack([np.stack([x0, y - h], 1), np.stack([x0, y + h], 1),
                      np.stack([x1, y + h], 1), np.stack([x1, y - h], 1)], 1)
    # matplotlib's stubs want a sequence of polygons; an (N, 4, 2) array is accepted (its fast
    # path)
    ax.add_collection(PolyCollection(verts,  # type: ignore[arg-type]
                                     facecolors=_palette()[code], edgecolors="none",
                                     antialiased=rows <= 60))


def _draw_raster(ax: Axes, x0, x1, y, code, rows: int, xmax: float) -> None:
    figure = ax.figure.figure  # the root figure (an axes may sit on a subfigure)
    width = int(figure.get_size_inches()[0] * figure.dpi * 1.5)
    scale = width / xmax
    p0 = np.clip((x0 * scale).astype(np.int64), 0, width - 1)
    p1 = np.clip(np.maximum((x1 * scale).astype(np.int64), p0 + 1), 1, width)
    # a client's segments never overlap, so the running sum of +code/−code marks is the phase
    diff = np.zeros((rows, width + 1), dtype=np.int64)
    np.add.at(diff, (y, p0), code)
    np.add.at(diff, (y, p1), -code)
    grid = np.clip(np.cumsum(diff, axis=1)[:, :width], 0, len(PHASE_COLORS) + 1)
    # idle pixels transparent: what is drawn beneath the work (waits) shows through them
    rgba = np.concatenate([_palette(), np.ones((len(_palette()), 1))], axis=1)
    rgba[0, 3] = 0.0
    ax.imshow(rgba[grid], aspect="auto", interpolation="nearest",
              extent=(0, width / scale, rows - 0.5, -0.5), zorder=1)


def set_title(ax: Axes, text: str, width: int = 60) -> None:
    """``text`` as the title, wrapped at ``width`` characters (sweep plots and the CDFs are
    narrow)."""
    ax.set_title("\n".join(textwrap.wrap(text, width)), fontsize=10)


def readable_log_ticks(ax: Axes) -> None:
    """Ticks at 1, 2 and 5 of every decade the log axis spans (more within a decade and a
    half, only the powers of ten beyond four decades), labelled as plain numbers: a range
    inside one decade had a single tick."""
    low, high = ax.get_xlim()
    decades = np.log10(high / low) if low > 0 and high > low else 0.0
    subs = ((1.0,) if decades > 4 else (1.0, 2.0, 5.0) if decades > 1.5
            else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0))
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_kv(iterations, capacity: float | None = None, ax: Axes | None = None,
            unit: tuple[str, float] | None = None, shared: bool = False) -> Axes:
    """KV cache in use (tokens) over time, per model instance, with the capacity; each
    iteration's KV count (after it) is drawn over the iteration. ``shared``: with a prefix
    cache the log's count is the running requests' KVs each (a block they share counted once
    per request), which may exceed the capacity their blocks fit in; the axis says so."""
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 2.5), layout="constrained")
    label, div = unit or time_unit(float(iterations["end_ms"].max()))
    for inst, part in iterations.groupby("instance"):
        t = np.concatenate([part["start_ms"].to_numpy(dtype=float),
                            part["end_ms"].to_numpy(dtype=float)[-1:]]) / div
        kv = np.concatenate([part["kv_tokens"].to_numpy(), [0]])
        ax.step(t, kv, where="post", lw=0.8, label=f"instance {inst}")
    if capacity:
        ax.axhline(capacity, color="crimson", lw=1, ls="--", label="capacity")
    ax.set_xlabel(f"time ({label})")
    ax.set_ylabel("KV tokens, per request\n(shared blocks in each)" if shared
                  else "KV tokens")
    ax.legend(**OUTSIDE_LEGEND)
    return ax


def gantt_figure(instance: Instance, segments, iterations=None, *, policy: str = "",
                 metrics: dict[str, Any] | None = None, continuous: bool | None = None,
                 requests=None):
    """Gantt chart with the KV-memory panel beneath (shared time axis). Continuous-batching
    schedules of up to 64 requests get one row per request with evictions marked. Each request's
    arrival is marked on its row (its own, or its first client's) and its wait until first
    scheduled drawn as a light grey line beneath the work. With ``requests`` (a schedule's
    table of request times: ``request, first_token_ms, finish_ms``, e.g. ``Schedule.requests``)
    and an instance with SLO targets, the requests that missed their SLO are outlined in red.
    Charts of more than ``MARKED_REQUESTS_MAX`` requests get no per-request marks."""
    if continuous is None:
        continuous = bool((segments["phase"].isin(["evict", "refill"])).any()) or \
            getattr(instance.profile, "policy_family", "") == "infermax"
    by_request = continuous and instance.num_requests <= 64
    rows = instance.num_requests if by_request else instance.total_clients
    height = min(max(3.0, (0.3 if by_request else 0.045) * rows + 1.5), 13.0)
    with_kv = iterations is not None and len(iterations)
    _, axes = plt.subplots(2 if with_kv else 1, 1, sharex=True, layout="constrained",
                             figsize=(11, height + (2.3 if with_kv else 0)),
                             gridspec_kw={"height_ratios": [height, 2.3]} if with_kv else None)
    ax = axes[0] if with_kv else axes
    unit = time_unit(float(segments["end_ms"].max()) if len(segments) else 1.0)
    plot_gantt(segments, instance.system.clients, ax=ax,
               title=_gantt_title(instance, policy, metrics or {}, unit, continuous),
               by_request=by_request, unit=unit, request_order=list(instance.ids))
    if instance.num_requests <= MARKED_REQUESTS_MAX:
        missed = _missed_slo(instance, requests) if requests is not None else set()
        _mark_requests(ax, instance, segments, by_request, unit, missed)
    if with_kv:
        ax.set_xlabel("")
        plot_kv(iterations, resolve_limits(instance).kv_tokens, ax=axes[1], unit=unit,
                shared=instance.system.prefix_caching)
    return ax


def _gantt_title(instance: Instance, policy: str, metrics: dict[str, Any],
                 unit: tuple[str, float], continuous: bool) -> str:
    title = f"{instance.name}: {policy}"
    if not metrics:
        return title
    parts = [f"makespan {metrics['makespan_ms'] / unit[1]:,.4g} {unit[0]}"]
    parts.append(f"{metrics.get('evictions', 0)} evictions" if continuous
                 else f"utilization {metrics['utilization']:.2%}")
    if metrics.get("attainment") is not None:
        parts.append(f"SLO met {metrics['attainment']:.1%}")
    return f"{title} — {', '.join(parts)}"


MARKED_REQUESTS_MAX = 5000
MISSED_COLOR = "#d62728"
ARRIVAL_COLOR = "#333333"
WAIT_COLOR = "#9e9e9e"


def _missed_slo(instance: Instance, requests) -> set[str]:
    """The ids of the requests whose latencies (from ``requests``' times) miss a target."""
    if not instance.has_slos or not len(requests):
        return set()
    # the request times alone (the chart's schedule may have no segments: no queueing delays)
    times = SimpleNamespace(requests=requests,
                            queueing_delays=lambda: requests["arrival_ms"].iloc[:0])
    # the latencies' table (pandas), loaded when a chart has SLOs to mark
    latencies = load("llmopt.schedule.metrics:request_latencies")(times, instance)
    return set(latencies.loc[~latencies["slo_met"], "request"])


def _mark_requests(ax: Axes, instance: Instance, segments, by_request: bool,
                   unit: tuple[str, float], missed: set[str]) -> None:
    """On each request's row (its own, or its first client's): a tick at its arrival, a light
    grey line from there to its first iteration (its wait; on a client's row it shows only
    where the client was idle), and a red outline around its span when it missed its SLO."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    work = segments[~segments["phase"].isin(MARKERS)]
    if not len(work):
        return
    spans = work.groupby(work["request"].astype(str), observed=True).agg(
        start=("start_ms", "min"), finish=("end_ms", "max"), client=("client", "first"),
        instance=("instance", "first"))
    arrival = dict(zip(instance.ids, instance.arrival_ms, strict=True))
    order = {r: k for k, r in enumerate(instance.ids)}
    present = [r for r in instance.ids if r in spans.index] if by_request else list(spans.index)
    if by_request:
        row_of = {r: k for k, r in enumerate(present)}
        y = np.array([row_of[r] for r in present], dtype=float)
    else:
        J = instance.system.clients
        y = (spans.loc[present, "instance"].to_numpy() * J
             + spans.loc[present, "client"].to_numpy()).astype(float)
    div = unit[1]
    t_arrive = np.array([arrival[r] for r in present], dtype=float) / div
    t_start = spans.loc[present, "start"].to_numpy(dtype=float) / div
    waited = t_start > t_arrive
    if waited.any():
        ax.add_collection(LineCollection(
            [[(a, k), (b, k)] for a, b, k in zip(t_arrive[waited], t_start[waited],
                                                 y[waited], strict=True)],
            colors=WAIT_COLOR, linewidths=2.0, alpha=0.6, zorder=0.5))  # under the work
    h = 0.42 if len(set(y)) <= 40 else 0.5
    ax.vlines(t_arrive, y - h, y + h, colors=ARRIVAL_COLOR, linewidths=1.0, zorder=3)
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend is not None else []
    handles += [Line2D([], [], marker="|", ls="", color=ARRIVAL_COLOR, markersize=8,
                       label="arrival"),
                Line2D([], [], color=WAIT_COLOR, lw=2.0, alpha=0.6, label="waiting")]
    outlined = [k for k, r in enumerate(present) if r in missed]
    for k in outlined:
        r = present[k]
        ax.add_patch(Rectangle((t_start[k], y[k] - 0.46),
                               (spans.loc[r, "finish"] - spans.loc[r, "start"]) / div, 0.92,
                               fill=False, edgecolor=MISSED_COLOR, linewidth=1.6, zorder=4))
    if missed:
        handles.append(Line2D([], [], color=MISSED_COLOR, lw=1.6,
                              label=f"missed SLO ({len(missed)} of {len(order)})"))
    ax.legend(handles=handles, **OUTSIDE_LEGEND)


def plot_comparison(table, bound_ms: float | None = None, ax: Axes | None = None,
                    title: str = "") -> Axes:
    """Total inference time per schedule (bars, utilization on top) with the best lower
    bound as a line; in ms or s by the rule of ``llmopt.report.units``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    names = list(table["schedule"])
    label, div = time_unit(max(float(table["makespan_ms"].max()), bound_ms or 0.0))
    values = table["makespan_ms"].to_numpy(dtype=float) / div
    bars = ax.bar(names, values, color="#4e79a7")
    for bar, util in zip(bars, table["utilization"], strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{util:.1%}",
                ha="center", va="bottom", fontsize=8)
    if bound_ms:
        ax.axhline(bound_ms / div, color="crimson", ls="--", lw=1.2,
                   label=f"lower bound {bound_ms / div:,.2f} {label}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_ylabel(f"total inference time ({label}, axis not from 0)")
    low = min(values.min(), (bound_ms or np.inf) / div)
    high = max(values.max(), (bound_ms or 0) / div)
    ax.set_ylim(low - 0.35 * (high - low) - 1e-9, high + 0.15 * (high - low) + 1e-9)
    ax.set_title(title or "schedules compared (labels: utilization)", fontsize=10)
    ax.tick_params(axis="x", labelrotation=20)
    return ax


def plot_attainment(table, ceiling: float | None = None, ax: Axes | None = None,
                    ceiling_label: str = "no schedule meets more", title: str = "") -> Axes:
    """SLO attainment (share of requests meeting every target) per schedule, with a proven
    ``ceiling`` on it as a line when there is one (``ceiling_label`` says what proves it).
    A table column ``ceiling`` (per schedule: the ceiling that holds for it) draws, over each
    bar whose ceiling differs from the line's, a dotted mark at its own (a schedule ignoring
    the KV memory has a ceiling of its own)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    names = list(table["schedule"])
    shares = table["attainment"].to_numpy(dtype=float)
    bars = ax.bar(names, np.nan_to_num(shares), color="#59a14f")
    for bar, share in zip(bars, shares, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                "not measured" if np.isnan(share) else f"{share:.1%}", ha="center",
                va="bottom", fontsize=8)
    if ceiling is not None:
        ax.axhline(ceiling, color="black", ls="--", lw=1.2,
                   label=f"SLO ceiling {ceiling:.1%}: {ceiling_label}")
    own = table["ceiling"].to_numpy(dtype=float) if "ceiling" in table else shares * np.nan
    marked = False
    for bar, mark in zip(bars, own, strict=True):
        if np.isnan(mark) or (ceiling is not None and abs(mark - ceiling) < 1e-12):
            continue
        ax.hlines(mark, bar.get_x(), bar.get_x() + bar.get_width(), colors="black",
                  linestyles=":", lw=2.0,
                  label="_" if marked else "the ceiling that holds for this schedule")
        marked = True
    if ceiling is not None or marked:
        ax.legend(loc="upper right", fontsize=8)  # in the band above 100 %
    ax.set_ylim(0, 1.25)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("SLO attainment (requests meeting every target)")
    ax.set_title(title or "SLO attainment by schedule", fontsize=10)
    ax.tick_params(axis="x", labelrotation=20)
    return ax


def comparison_figure(table, bound_ms: float | None = None, *, ceiling: float | None = None,
                      ceiling_label: str = "no schedule meets more", title: str = "") -> Axes:
    """The compare chart: total time per schedule (:func:`plot_comparison`) and, when the
    table has SLO attainment, attainment per schedule beside it (:func:`plot_attainment`, with
    the ``ceiling`` when one is known); the first axes, whose figure holds both."""
    with_slos = "attainment" in table and table["attainment"].notna().any()
    if not with_slos:
        return plot_comparison(table, bound_ms, title=title)
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), layout="constrained")
    plot_comparison(table, bound_ms, ax=left, title="total time (labels: utilization)")
    plot_attainment(table, ceiling, ax=right, ceiling_label=ceiling_label)
    if title:
        figure.suptitle(title, fontsize=11)
    return left
