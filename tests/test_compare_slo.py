"""``llmopt compare`` on an instance with SLOs: attainment columns and the exact bound."""

from __future__ import annotations

from llmopt.data.instance import instance_from_mapping
from llmopt.problems.workflows.compare import compare
from llmopt.report.compare import comparison_markdown


def test_compare_shows_attainment_below_the_exact_bound() -> None:
    inst = instance_from_mapping({
        "name": "tiny-slo", "model": "infermax-llama2-7b-a100",
        "system": {"clients": 8, "kv_capacity": 600, "max_batch_tokens": 512},
        "requests": {"generate": {"count": 6, "seed": 2,
                                  "input": {"dist": "uniform", "low": 8, "high": 128},
                                  "output": {"dist": "uniform", "low": 1, "high": 8},
                                  "arrival": {"process": "poisson", "rate_per_s": 200}}},
        "slo": {"multiple": 2, "basis": "each"}})
    result = compare(inst, ["sola", "vllm-v1", "vllm"], time_limit_s=5)
    bound = result.attainment_bound
    assert bound is not None and bound.requests == 6
    replays = result.table[result.table["schedule"].isin(["sola", "vllm-v1", "vllm"])]
    assert len(replays) == 3
    for share in replays["attainment"]:
        assert round(share * 6) <= bound.met_upper
    text = comparison_markdown(result)
    assert "SLO attainment" in text and "attainment bound" in text
    assert "E2E met" not in text  # no request has an E2E target


def test_the_compare_chart_shows_attainment_and_the_ceiling_with_slos() -> None:
    """With SLOs the compare chart has an attainment panel beside the total time: a bar per
    schedule at its attainment and the proven ceiling as a line when one is given; without
    SLOs it is the total time alone."""
    import pandas as pd
    from matplotlib import pyplot as plt

    from llmopt.report.plot import comparison_figure

    table = pd.DataFrame({"schedule": ["a", "b", "exact"], "makespan_ms": [61.7, 65.2, 61.7],
                          "utilization": [0.24, 0.18, 0.24],
                          "attainment": [1.0, 0.5, float("nan")]})
    ax = comparison_figure(table, 57.3, ceiling=0.875, ceiling_label="proven")
    panels = ax.figure.axes
    assert len(panels) == 2
    shares = panels[1]
    assert [round(b.get_height(), 6) for b in shares.patches] == [1.0, 0.5, 0.0]
    assert [line.get_ydata()[0] for line in shares.get_lines()] == [0.875]
    assert "not measured" in [t.get_text() for t in shares.texts]
    assert len(comparison_figure(table.drop(columns="attainment"), 57.3).figure.axes) == 1
    assert not comparison_figure(table, 57.3).figure.axes[1].get_lines()  # no ceiling: no line
    plt.close("all")
