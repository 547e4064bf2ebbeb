"""Charts. Every function draws on a matplotlib ``ax`` (created when not given) and returns it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg", force=False)

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from llmopt._io import write_atomic
from llmopt.instance import Instance


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
        starts = np.concatenate([[0.0], np.cumsum(lengths)[:-1]]) * t_round / 1000.0
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


def save(ax: Axes, path: Path, dpi: int = 120) -> Path:
    """Save the figure of ``ax`` atomically as PNG and close it."""
    import io

    buf = io.BytesIO()
    ax.figure.savefig(buf, format="png", dpi=dpi)
    plt.close(ax.figure)
    write_atomic(path, buf.getvalue())
    return path
