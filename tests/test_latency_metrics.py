"""The latency distributions beside p50/p99 (p90, p95), queueing delay, inter-token latency,
requests per second and the run's goodput: by hand on a tiny replay, as identities on replays
with evictions and of every token semantics, recomputed by the validator (which catches them
tampered and accepts files written before them), and in the CLI's tables, charts, compare files
and sweeps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import load_instance
from llmopt.policies.replay import replay_result
from llmopt.schedule.metrics import request_latencies
from llmopt.schedule.schedule import LATENCY_METRICS
from llmopt.sweep.runner import run_sweep
from llmopt.sweep.spec import load_sweep
from llmopt.validate import validate_solution

# replays with evictions (refills), the stage model (first token from the first decode), the
# bilinear and SCLS families (decode-first), chunked prefills and SLOs
CASES = [("infermax-tiny.yaml", "sarathi"), ("infermax-tiny.yaml", "vllm"),
         ("infermax-azure-sample.yaml", "vllm"), ("pd-tiny.yaml", "baseline"),
         ("pd-memory/h16.yaml", "hybrid"), ("huang-chat-code.yaml", "huang-vllm"),
         ("scls-fig11.yaml", "ils"), ("slo-chat.yaml", "sola")]


def test_inter_token_latencies_by_hand() -> None:
    """infermax-tiny under sarathi: iterations end at 4.3198, 7.9922, 11.6651, 15.6841 ms;
    request a decodes in iterations 2 and 3 after its prefill, so its gaps are 7.9922 −
    4.3198 and 11.6651 − 7.9922; c is evicted after its prefill and its refill (iteration 4)
    emits its second token: one gap of 15.6841 − 4.3198."""
    inst = load_instance(TOY / "infermax-tiny.yaml")
    _, schedule = replay_result(inst, "sarathi")
    ends = schedule.iterations["end_ms"].to_numpy()
    assert ends[:4] == pytest.approx([4.319837, 7.992191, 11.665058, 15.684143], abs=1e-6)
    itl = schedule.inter_token_latencies().groupby("request")["itl_ms"].apply(list)
    assert itl["a"] == pytest.approx([ends[1] - ends[0], ends[2] - ends[1]])
    assert itl["c"] == pytest.approx([ends[3] - ends[0]])
    queue = schedule.queueing_delays()
    assert queue["a"] == 0 and queue["d"] == pytest.approx(ends[3])  # d starts in iteration 5


def test_an_eviction_listed_after_its_refill_still_starts_the_refill() -> None:
    """One request (1 token in, 3 out): prefill, a decode, evicted holding 2 KVs and refilled
    with 3 tokens at the same instant, the marker listed after the refill (on another client,
    as a plan replay lists it). The refill emits the third token: gaps of 1 ms and 1 ms."""
    from llmopt.schedule.schedule import ITERATION_COLUMNS, Schedule

    segments = pd.DataFrame(
        [("r", 0, 0, "prefill", 0.0, 1.0, 1), ("r", 0, 0, "decode", 1.0, 2.0, 1),
         ("r", 0, 0, "refill", 2.0, 3.0, 3), ("r", 1, 0, "evict", 2.0, 2.0, 2)],
        columns=["request", "client", "instance", "phase", "start_ms", "end_ms", "tokens"])
    iterations = pd.DataFrame([(0, t, t + 1.0, "prefill", 1, 1, 0, 1, 0, 1) for t in
                               (0.0, 1.0, 2.0)], columns=ITERATION_COLUMNS)
    requests = pd.DataFrame([("r", 0, 0, 1, 3, 0.0, 1.0, 3.0, 1)],
                            columns=["request", "instance", "client", "input_tokens",
                                     "output_tokens", "arrival_ms", "first_token_ms",
                                     "finish_ms", "evictions"])
    schedule = Schedule("hand", segments, iterations, requests, 2)
    assert schedule.inter_token_latencies()["itl_ms"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(("instance", "policy"), CASES, ids=lambda x: str(x))
def test_identities_and_the_validator(instance, policy) -> None:
    inst = load_instance(TOY / instance)
    result, schedule = replay_result(inst, policy)
    req = schedule.requests.set_index(schedule.requests["request"].astype(str))
    gaps = schedule.inter_token_latencies()
    per = gaps.groupby("request")["itl_ms"]
    count = per.size().reindex(req.index).fillna(0)
    # n − 1 gaps per request, summing to E2E − TTFT, so their mean is the TPOT
    assert (count == req["output_tokens"] - 1).all()
    span = (req["finish_ms"] - req["first_token_ms"]).to_numpy()
    assert per.sum().reindex(req.index).fillna(0).to_numpy() == pytest.approx(span, abs=1e-6)
    assert (gaps["itl_ms"] > 0).all()
    queue = schedule.queueing_delays().reindex(req.index)
    ttft = req["first_token_ms"] - req["arrival_ms"]
    assert (queue >= -1e-9).all() and (queue <= ttft + 1e-9).all()
    m = result.metrics
    assert set(LATENCY_METRICS) <= set(m)
    for name in ("ttft", "tpot", "e2e", "queue", "itl"):
        ordered = [m[f"{name}_p{q}_ms"] for q in (50, 90, 95, 99)]
        assert ordered == sorted(ordered)
    assert m["itl_p50_ms"] == pytest.approx(np.percentile(gaps["itl_ms"], 50), abs=1e-6)
    seconds = schedule.makespan_ms / 1000
    assert m["requests_per_s"] == pytest.approx(inst.num_requests / seconds, abs=1e-6)
    if inst.has_slos:
        met = request_latencies(schedule, inst)["slo_met"].sum()
        assert m["goodput_rps"] == pytest.approx(met / seconds, abs=1e-6)
        assert m["goodput_rps"] == pytest.approx(
            m["attainment"] * m["requests_per_s"], abs=1e-5)
    assert validate_solution(inst, result.to_dict(inst)) == []


@pytest.mark.parametrize("key", ["itl_p95_ms", "queue_p50_ms", "ttft_p90_ms", "tpot_p95_ms",
                                 "requests_per_s", "goodput_rps", "attainment"])
def test_the_validator_catches_a_tampered_metric(key) -> None:
    inst = load_instance(TOY / "slo-chat.yaml")
    result, _ = replay_result(inst, "vllm-v1")
    solution = result.to_dict(inst)
    metrics = dict(solution["metrics"])
    metrics[key] = metrics[key] * 1.05 + 0.01
    reasons = validate_solution(inst, {**solution, "metrics": metrics})
    assert any(f"metric {key} " in r for r in reasons), reasons


def test_a_file_written_before_the_new_metrics_stays_valid() -> None:
    inst = load_instance(TOY / "slo-chat.yaml")
    result, _ = replay_result(inst, "sarathi")
    solution = result.to_dict(inst)
    old = {k: v for k, v in solution["metrics"].items()
           if k not in LATENCY_METRICS and k != "goodput_rps"}
    assert validate_solution(inst, {**solution, "metrics": old}) == []
    del old["ttft_p99_ms"]  # one of the first metrics is still required
    assert validate_solution(inst, {**solution, "metrics": old}) == \
        ["metrics lack ttft_p99_ms"]


def test_replay_prints_the_tables_and_draws_the_itl_cdf(cli, tmp_path) -> None:
    done = cli("replay", TOY / "slo-chat.yaml", "--policy", "sarathi,sola", "--out", tmp_path)
    assert done.exit_code == 0, done.output
    for header in ("req/s", "goodput", "queue p95", "ITL p99", "TTFT p90", "E2E p95"):
        assert header in done.output
    assert (tmp_path / "slo-chat" / "itl-cdf.png").stat().st_size > 10_000
    compared = cli("compare", TOY / "infermax-tiny.yaml", "--policy", "sarathi,vllm",
                   "--no-optimize", "--out", tmp_path)
    assert compared.exit_code == 0, compared.output
    table = pd.read_csv(tmp_path / "infermax-tiny" / "compare.csv")
    assert set(LATENCY_METRICS) <= set(table.columns)
    assert (tmp_path / "infermax-tiny" / "itl-cdf.png").is_file()


def test_sweeps_carry_the_new_metrics(tmp_path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"instances: [{TOY / 'slo-chat.yaml'}]\n"
                    "grid: {policy: [sarathi]}\n"
                    "metrics: [itl_p95_ms, queue_p50_ms, ttft_p90_ms, requests_per_s, "
                    "goodput_rps]\n")
    table = run_sweep(load_sweep(path), tmp_path / "out", engine="serial").table
    inst = load_instance(TOY / "slo-chat.yaml")
    direct = replay_result(inst, "sarathi")[0].metrics
    for key in ("itl_p95_ms", "queue_p50_ms", "ttft_p90_ms", "requests_per_s", "goodput_rps"):
        assert table[key].iloc[0] == pytest.approx(direct[key])
