"""Gantt chart of a slice-level replay (:class:`llmopt.sim.slices.SliceReplay`, Cheng et al.
2024): one lane per model instance on one time axis; every padded static batch (one slice) is a
box from its start to its end, as tall as its batch size (relative to the largest batch), its
prefill part (re-prefill included) and its decode part coloured apart; within the prefill part
the share of pad tokens (Σ pad / (N·L_i)) and within the decode part the share of invalid tokens
(Σ invalid / (N·L_o)) is hatched grey at the top of the box. Instance 0 is the lowest lane;
a black bar marks each instance's completion time."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from llmopt.report.plot import PHASE_COLORS
from llmopt.report.units import time_unit
from llmopt.sim.slices import SliceReplay

WASTE_COLOR = "#bab0ac"


def plot_slices(replay: SliceReplay, ax: Axes | None = None, title: str | None = None,
                until_ms: float | None = None) -> Axes:
    """Draw ``replay``'s batches on ``ax`` (created when not given); ``until_ms`` cuts the time
    axis (batches starting later are left out)."""
    return plot_slice_frames(replay.batches, replay.members, replay.completion_ms,
                             replay.workers, replay.policy, ax=ax, title=title,
                             until_ms=until_ms)


def plot_slice_frames(bat: pd.DataFrame, mem: pd.DataFrame, completion_ms: Sequence[float],
                      workers: int, policy: str, ax: Axes | None = None,
                      title: str | None = None, until_ms: float | None = None) -> Axes:
    """The chart of :func:`plot_slices` from its parts: ``bat`` with ``batch, instance,
    start_ms, end_ms, prefill_ms, size, padded_length, iterations`` per batch, ``mem`` with
    ``batch, pad_tokens, invalid_tokens`` per request per batch, each instance's completion
    time (ms) and the number of instances."""
    total = len(bat)
    if until_ms is not None:
        bat = bat[bat["start_ms"] < until_ms]
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 1.0 + 0.9 * workers), layout="constrained")
    end = float(bat["end_ms"].max()) if len(bat) else 1.0
    label, div = time_unit(end if until_ms is None else min(end, until_ms))
    per_batch = mem.groupby("batch")[["pad_tokens", "invalid_tokens"]].sum()
    pad = per_batch["pad_tokens"].reindex(bat["batch"]).to_numpy(dtype=float)
    invalid = per_batch["invalid_tokens"].reindex(bat["batch"]).to_numpy(dtype=float)
    size = bat["size"].to_numpy(dtype=float)
    length = bat["padded_length"].to_numpy(dtype=float)
    iters = bat["iterations"].to_numpy(dtype=float)
    start = bat["start_ms"].to_numpy(dtype=float) / div
    mid = start + bat["prefill_ms"].to_numpy(dtype=float) / div
    stop = bat["end_ms"].to_numpy(dtype=float) / div
    top = max(float(size.max()) if len(size) else 1.0, 1.0)
    height = 0.84 * size / top
    bottom = bat["instance"].to_numpy(dtype=float) - 0.42
    ax.bar(start, height, width=mid - start, bottom=bottom, align="edge",
           color=PHASE_COLORS["prefill"], edgecolor="white", linewidth=0.3)
    ax.bar(mid, height, width=stop - mid, bottom=bottom, align="edge",
           color=PHASE_COLORS["decode"], edgecolor="white", linewidth=0.3)
    pad_share = np.divide(pad, size * length, out=np.zeros_like(pad), where=size * length > 0)
    bad_share = np.divide(invalid, size * iters, out=np.zeros_like(invalid),
                          where=size * iters > 0)
    ax.bar(start, height * pad_share, width=mid - start, bottom=bottom + height * (1 - pad_share),
           align="edge", color=WASTE_COLOR, hatch="////", edgecolor="white", linewidth=0)
    ax.bar(mid, height * bad_share, width=stop - mid, bottom=bottom + height * (1 - bad_share),
           align="edge", color=WASTE_COLOR, hatch="\\\\\\\\", edgecolor="white", linewidth=0)
    done = np.asarray(completion_ms, dtype=float) / div
    for w, t in enumerate(done):
        ax.plot([t, t], [w - 0.46, w + 0.46], color="black", lw=1.2)
    ax.set_yticks(range(workers), [f"instance {w}" for w in range(workers)])
    ax.set_ylim(-0.5, workers - 0.5)
    ax.set_xlim(0, (float(stop.max()) if len(stop) else 1.0) * 1.01)
    ax.set_xlabel(f"time ({label})")
    ax.legend(handles=[Patch(color=PHASE_COLORS["prefill"], label="prefill (re-prefill)"),
                       Patch(color=PHASE_COLORS["decode"], label="decode (one slice)"),
                       Patch(facecolor=WASTE_COLOR, hatch="////", label="pad share"),
                       Patch(facecolor=WASTE_COLOR, hatch="\\\\\\\\", label="invalid share")],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7, ncols=4,
              frameon=False)
    lanes = "instance" if workers == 1 else "instances"
    ax.set_title(title or f"{policy}: {total} batches on "
                 f"{workers} {lanes} (box height = batch size, largest "
                 f"{int(top)}; bar = instance completion)", fontsize=10, pad=18)
    return ax


__all__ = ["plot_slices"]
