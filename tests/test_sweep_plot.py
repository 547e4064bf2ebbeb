"""The sweep plots: a search's default plot shows the searched metric against its target, a
search's probes of different seeds are never averaged, titles fit the figure; the CDF's log
axis has readable ticks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib import pyplot as plt

from llmopt.cli.sweep import _default_plot
from llmopt.report.slo_plot import plot_latency_cdf
from llmopt.report.sweep_plot import plot_lines
from llmopt.sweep.search import Target

# a search's probes: each (policy, seed) group bisects rate_per_s at its own values
PROBES = pd.DataFrame([
    {"policy": p, "seed": s, "rate_per_s": r, "attainment": a, "ttft_p99_ms": 100.0 * r,
     "cell_status": "ok", "probe": True}
    for p, s, runs in [("sola", 0, [(5, 1.0), (400, 0.0), (44.7, 0.95), (133.7, 0.2)]),
                       ("sola", 1, [(5, 1.0), (400, 0.0), (44.7, 0.5), (15.0, 0.99)]),
                       ("vllm", 0, [(5, 1.0), (400, 0.05), (44.7, 0.97), (77.3, 0.4)])]
    for r, a in runs])


def test_a_searchs_default_plot_is_its_metric_against_the_target() -> None:
    target = Target.parse("attainment >= 0.9")
    assert target == Target("attainment", ">=", 0.9) and str(target) == "attainment >= 0.9"
    ax = _default_plot(PROBES, "goodput", ("rate_per_s", target))
    assert "attainment" in ax.get_ylabel().lower() and "arrival rate" in ax.get_xlabel()
    flat = [line for line in ax.get_lines() if len(set(line.get_ydata())) == 1
            and len(line.get_ydata()) == 2]
    assert [line.get_ydata()[0] for line in flat] == [0.9]  # the target, dashed
    plt.close("all")


def test_probes_of_different_seeds_are_separate_lines_never_a_mean() -> None:
    ax = plot_lines(PROBES, "rate_per_s", "attainment", "policy")
    drawn = sorted((tuple(line.get_xdata()), tuple(line.get_ydata()))
                   for line in ax.get_lines())
    expected = sorted((tuple(g["rate_per_s"]), tuple(g["attainment"]))
                      for _, g in (PROBES.sort_values("rate_per_s")
                                   .groupby(["policy", "seed"])))
    assert drawn == expected  # one line per (policy, seed), each its own probes
    assert not ax.collections  # no band: nothing was averaged
    plt.close("all")


def test_a_grid_over_seeds_is_a_mean_with_a_band() -> None:
    grid = pd.DataFrame([{"policy": "a", "seed": s, "rate_per_s": r, "ttft_p99_ms": r + s,
                          "cell_status": "ok"} for s in (0, 1, 2) for r in (10, 20, 40)])
    ax = plot_lines(grid, "rate_per_s", "ttft_p99_ms", "policy")
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == [11.0, 21.0, 41.0] and len(ax.collections) == 1
    plt.close("all")


def test_the_titles_fit_the_figure() -> None:
    ax = _default_plot(PROBES, "a-sweep-with-a-rather-long-name",
                       ("rate_per_s", Target("attainment", ">=", 0.9)))
    figure = ax.figure
    figure.canvas.draw()
    box = ax.title.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= figure.bbox.width
    plt.close("all")


@pytest.mark.parametrize("high", [45.0, 900.0])
def test_the_cdfs_log_axis_has_readable_ticks(high) -> None:
    values = np.geomspace(6.0, high, 50)
    table = pd.DataFrame({"tpot_ms": values, "tpot_slo_ms": 41.0})
    ax = plot_latency_cdf({"x": table}, "tpot_ms")
    ax.figure.canvas.draw()
    low, top = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if low <= t <= top]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(shown) >= 3 and len(labels) >= 3
    plt.close("all")
