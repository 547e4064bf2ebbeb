"""SLO charts (TTFT/TPOT CDFs with the targets marked) and goodput sweeps over a real trace's
lengths: the bundled Mooncake sample with generated arrivals."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from matplotlib import pyplot as plt

from conftest import ROOT, TOY
from llmopt.data.instance import load_instance
from llmopt.policies.replay import replay_result
from llmopt.report.slo_plot import plot_latency_cdf
from llmopt.schedule.metrics import request_latencies
from llmopt.sweep.cell import build_instance
from llmopt.sweep.spec import load_sweep

MOONCAKE = TOY / "slo-mooncake-sample.yaml"


def _share_at(line, x: float) -> float:
    """The height of a step CDF (``where="post"``) at ``x``."""
    xs, ys = line.get_xdata(), line.get_ydata()
    below = np.flatnonzero(np.asarray(xs) <= x)
    return float(ys[below[-1]]) if below.size else 0.0


@pytest.mark.parametrize(("metric", "share_key"), [("ttft_ms", "attainment_ttft"),
                                                   ("tpot_ms", "attainment_tpot")])
def test_cdf_crosses_the_target_at_the_attainment(metric, share_key) -> None:
    inst = load_instance(TOY / "slo-chat.yaml")
    # TPOT targets halved, so that both targets cut the curves
    inst = inst.with_requests(tuple(r.model_copy(update={"tpot_slo_ms": r.tpot_slo_ms / 2})
                                    for r in inst.requests))
    latencies, shares = {}, {}
    for policy in ("sarathi", "vllm-d"):  # each misses some TTFT and some halved TPOT targets
        result, schedule = replay_result(inst, policy)
        latencies[policy] = request_latencies(schedule, inst)
        shares[policy] = result.metrics[share_key]
    ax = plot_latency_cdf(latencies, metric)
    target = float(inst.slo_targets(metric.replace("_ms", "_slo_ms"))[0])
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert float(lines[next(k for k in lines if "target" in k)].get_xdata()[0]) == target
    # a request with one output token has no TPOT and meets its TPOT target: the attainment
    # counts it, the TPOT curve does not
    no_tpot = int((inst.output_tokens <= 1).sum()) if metric == "tpot_ms" else 0
    n = inst.num_requests
    for policy, share in shares.items():
        crossing = _share_at(lines[policy], target)
        assert crossing == pytest.approx((share * n - no_tpot) / (n - no_tpot))
        assert 0 < crossing < 1
    plt.close("all")


def test_cdf_of_mixed_targets_is_relative_to_each_target() -> None:
    inst = load_instance(TOY / "slo-chat.yaml")
    doubled = inst.with_requests(tuple(
        r.model_copy(update={"ttft_slo_ms": r.ttft_slo_ms * (2 if k % 2 else 1)})
        for k, r in enumerate(inst.requests)))
    result, schedule = replay_result(doubled, "sarathi")
    ax = plot_latency_cdf({"sarathi": request_latencies(schedule, doubled)}, "ttft_ms")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert ax.get_xlabel() == "TTFT / its target"
    assert float(lines["TTFT target"].get_xdata()[0]) == 1.0
    assert _share_at(lines["sarathi"], 1.0) == pytest.approx(
        result.metrics["attainment_ttft"])
    plt.close("all")


def test_replay_writes_the_cdf_chart_only_with_slos(cli, tmp_path) -> None:
    assert cli("replay", TOY / "slo-chat.yaml", "--policy", "sarathi,sola",
               "--out", tmp_path).exit_code == 0
    assert (tmp_path / "slo-chat" / "slo-cdf.png").stat().st_size > 10_000
    assert cli("replay", TOY / "infermax-tiny.yaml", "--policy", "sarathi",
               "--out", tmp_path).exit_code == 0
    assert not (tmp_path / "infermax-tiny" / "slo-cdf.png").exists()


def test_the_mooncake_sample_is_the_traces_first_requests_that_fit() -> None:
    inst = load_instance(MOONCAKE)
    assert inst.num_requests == 300 and inst.has_slos
    total = inst.input_tokens + inst.output_tokens
    assert total.max() <= 32_768 and inst.input_tokens.mean() > 8_000
    assert np.all(np.diff(inst.arrival_ms) >= 0)
    source = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation.jsonl"
    if not source.exists():
        pytest.skip("../shared/data is absent")
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    kept = [r for r in rows if r["input_length"] + r["output_length"] <= 32_768][:300]
    assert [r["input_length"] for r in kept] == inst.input_tokens.tolist()
    assert [r["timestamp"] for r in kept] == pytest.approx(inst.arrival_ms.tolist())


def test_rate_per_s_on_a_trace_replaces_its_timestamps(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(f"""
        instances: [{MOONCAKE}]
        grid: {{policy: [sarathi], count: [50], rate_per_s: [0.5, 2]}}
        """))
    cells = {c.params["rate_per_s"]: build_instance(c) for c in load_sweep(path).cells}
    trace = load_instance(MOONCAKE)
    for rate, inst in cells.items():
        assert inst.num_requests == 50
        assert inst.input_tokens.tolist() == trace.input_tokens[:50].tolist()
        gaps = np.diff(inst.arrival_ms)
        assert 1000 / rate / 2 < gaps.mean() < 1000 / rate * 2  # Poisson at the rate
        assert not np.allclose(inst.arrival_ms, trace.arrival_ms[:50])


def test_gantt_marks_arrivals_waits_and_misses_and_names_the_makespan(cli, tmp_path) -> None:
    """A continuous-batching replay with SLOs: an arrival tick per request, a wait line per
    request that waited, a red outline per request that missed its SLO (as the latencies
    say), the makespan named as such; ``llmopt gantt`` of the file draws the same marks."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle

    from llmopt.report.plot import MISSED_COLOR, gantt_figure

    text = (TOY / "slo-chat.yaml").read_text().replace("count: 200", "count: 30")
    path = tmp_path / "slo30.yaml"
    path.write_text(text.replace("multiple: 10", "multiple: 3").replace("name: slo-chat",
                                                                        "name: slo30"))
    inst = load_instance(path)
    result, schedule = replay_result(inst, "vllm-v1")
    lat = request_latencies(schedule, inst)
    missed = int((~lat["slo_met"]).sum())
    assert 0 < missed < inst.num_requests
    ax = gantt_figure(inst, schedule.segments, schedule.iterations, policy="vllm-v1",
                      metrics=result.metrics, requests=schedule.requests)
    title = ax.get_title()
    assert "makespan" in title and "total latency" not in title and "SLO met" in title
    red = to_rgba(MISSED_COLOR)
    assert sum(isinstance(p, Rectangle) and not p.get_fill() and p.get_edgecolor() == red
               for p in ax.patches) == missed
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    ticks = sum(len(c.get_segments()) for c in lines if len(c.get_segments()[0]) == 2
                and c.get_segments()[0][0][0] == c.get_segments()[0][1][0])  # vertical
    assert ticks == inst.num_requests
    first = schedule.segments.groupby(schedule.segments["request"].astype(str),
                                      observed=True)["start_ms"].min()
    waited = int((first.reindex(inst.ids).to_numpy() > inst.arrival_ms).sum())
    assert sum(len(c.get_segments()) for c in lines) == inst.num_requests + waited
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "arrival" in labels and f"missed SLO ({missed} of 30)" in labels
    plt.close("all")
    # the command draws a solution file with the same marks (request times from the validator)
    assert cli("replay", path, "--policy", "vllm-v1", "--out", tmp_path).exit_code == 0
    png = tmp_path / "slo30" / "replay-vllm-v1.png"
    again = tmp_path / "again.png"
    assert cli("gantt", path, tmp_path / "slo30" / "replay-vllm-v1.json", "--out",
               again).exit_code == 0
    assert again.read_bytes() == png.read_bytes()
