"""Instances load from every request source, deterministically, with content hashes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SHARED_DATA, TOY
from llmopt.data.cost import BilinearProfile, PangLinearProfile, load_profile
from llmopt.data.instance import load_instance
from llmopt.errors import InstanceError

HEAD = "name: t\nmodel: pang-llama65b-ascend8\nsystem: {clients: 4}\n"


def test_inline_requests_and_defaults(write_yaml):
    inst = load_instance(write_yaml(
        HEAD + "requests:\n  - {id: a, input_tokens: 3, output_tokens: 4, arrival_ms: 2.5}\n"
        "  - {id: b, input_tokens: 7, output_tokens: 1}\n"))
    assert inst.ids == ["a", "b"]
    assert list(inst.input_tokens) == [3, 7] and list(inst.output_tokens) == [4, 1]
    assert list(inst.arrival_ms) == [2.5, 0.0]
    assert inst.system.instances == 1 and inst.system.kv_capacity is None
    assert isinstance(inst.profile, PangLinearProfile)


def test_generator_is_deterministic_and_respects_bounds(write_yaml):
    text = HEAD + ("requests: {generate: {count: 500, seed: 11,"
                   " input: {dist: normal, mean: 68.43, std: 25.04, min: 1},"
                   " output: {dist: normal, mean: 344.83, std: 187.99, min: 1, max: 512}}}\n")
    a = load_instance(write_yaml(text, "a.yaml"))
    b = load_instance(write_yaml(text, "b.yaml"))
    assert a.ids[:3] == ["r0", "r1", "r2"] and len(a.ids) == 500
    assert np.array_equal(a.output_tokens, b.output_tokens)
    assert a.sha256 == b.sha256
    assert a.output_tokens.min() >= 1 and a.output_tokens.max() <= 512
    assert 60 < a.input_tokens.mean() < 77
    other = load_instance(write_yaml(text.replace("seed: 11", "seed: 12"), "c.yaml"))
    assert other.sha256 != a.sha256


def test_poisson_arrivals(write_yaml):
    inst = load_instance(write_yaml(HEAD + (
        "requests: {generate: {count: 2000, seed: 3, input: {dist: constant, value: 10},"
        " output: {dist: uniform, low: 1, high: 9}, arrival: {process: poisson, rate_per_s: 4}}}\n"
    )))
    gaps = np.diff(inst.arrival_ms)
    assert inst.arrival_ms[0] == 0 and (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(250, rel=0.1)
    assert set(np.unique(inst.input_tokens)) == {10}


def test_vidur_and_raw_azure_columns_give_the_same_requests(write_yaml, tmp_path):
    (tmp_path / "vidur.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n10.0,374,44\n14.5,396,109\n")
    (tmp_path / "azure.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0000000,374,44\n2023-11-16 18:15:50.5000000,396,109\n")
    v = load_instance(write_yaml(HEAD + "requests: {trace: vidur.csv, format: azure}\n", "v.yaml"))
    a = load_instance(write_yaml(HEAD + "requests: {trace: azure.csv}\n", "a.yaml"))
    for inst in (v, a):
        assert inst.ids == ["r0", "r1"]
        assert list(inst.input_tokens) == [374, 396] and list(inst.output_tokens) == [44, 109]
        assert list(inst.arrival_ms) == pytest.approx([0.0, 4500.0])


def test_jsonl_trace_with_start_and_limit(write_yaml, tmp_path):
    lines = [json.dumps({"id": f"q{i}", "input_tokens": 5 + i, "output_tokens": 2,
                         "arrival_ms": 100.0 * i}) for i in range(6)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    inst = load_instance(write_yaml(HEAD + "requests: {trace: t.jsonl, start: 2, limit: 3}\n"))
    assert inst.ids == ["q2", "q3", "q4"]
    assert list(inst.arrival_ms) == [0.0, 100.0, 200.0]


def test_mooncake_jsonl_is_recognised_and_read(write_yaml, tmp_path):
    lines = [json.dumps({"timestamp": 3000 + 250 * i, "input_length": 6000 + i,
                         "output_length": 400 + i, "hash_ids": [0, 10 + i]}) for i in range(3)]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    auto = load_instance(write_yaml(HEAD + "requests: {trace: m.jsonl}\n", "auto.yaml"))
    named = load_instance(write_yaml(HEAD + "requests: {trace: m.jsonl, format: mooncake}\n",
                                     "named.yaml"))
    for inst in (auto, named):
        assert list(inst.input_tokens) == [6000, 6001, 6002]
        assert list(inst.output_tokens) == [400, 401, 402]
        assert list(inst.arrival_ms) == [0.0, 250.0, 500.0]


def test_length_table_without_arrivals_arrives_at_zero(write_yaml, tmp_path):
    (tmp_path / "lengths.csv").write_text(
        "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n3772,54,3826,69.8\n"
        "2015,156,2171,12.9\n")
    inst = load_instance(write_yaml(HEAD + "requests: {trace: lengths.csv, format: vidur}\n"))
    assert list(inst.input_tokens) == [3772, 2015] and list(inst.arrival_ms) == [0.0, 0.0]


def test_unknown_trace_format_names_the_known_ones(write_yaml, tmp_path):
    (tmp_path / "m.jsonl").write_text('{"input_tokens": 3, "output_tokens": 2}\n')
    with pytest.raises(InstanceError, match=r"requests\.format.*one of: auto, azure, vidur"):
        load_instance(write_yaml(HEAD + "requests: {trace: m.jsonl, format: moon}\n"))


@pytest.mark.parametrize("name", ["mooncake_conversation.jsonl", "mooncake_synthetic.jsonl",
                                  "arxiv_summarization_lengths_vidur.csv"])
def test_shared_traces_load(write_yaml, name):
    trace = SHARED_DATA / "traces" / name
    if not trace.exists():
        pytest.skip("../shared/data is not beside the project")
    inst = load_instance(write_yaml(HEAD + f"requests: {{trace: {trace}, limit: 50}}\n"))
    assert inst.num_requests == 50 and inst.input_tokens.min() >= 1


def test_shared_azure_trace_sample(write_yaml):
    trace = SHARED_DATA / "traces" / "azure2023_conv_vidur.csv"
    if not trace.exists():
        pytest.skip("../shared/data is not beside the project")
    inst = load_instance(write_yaml(HEAD + f"requests: {{trace: {trace}, limit: 100}}\n"))
    assert inst.num_requests == 100 and inst.input_tokens[0] == 374


def test_profiles_name_their_source_and_compute_times():
    pang = load_profile("pang-llama65b-ascend8")
    assert "Pang" in pang.source
    assert pang.decode_round_ms(200) == pytest.approx(71.0)
    assert pang.prefill_stage_ms(5000) == pytest.approx(675.0)  # the paper's worked example
    assert pang.prefill_stage_ms(0) == 0.0
    huang = load_profile("huang-qwen25-7b-v100x2")
    assert isinstance(huang, BilinearProfile) and "Table 2" in huang.source
    assert huang.prefill_ms(2, 100) == pytest.approx(0.1 * 200 + 5.7 * 2 + 0.01 * 100 + 43.67)
    per_step = sum(huang.decode_step_ms(4, 100 + k) for k in range(1, 51))
    assert huang.request_decode_ms(4, 100, 50) == pytest.approx(per_step)


def test_inline_profile_mapping(write_yaml):
    inst = load_instance(write_yaml(
        "name: t\nmodel: {family: pang_linear, source: test, prefill: {overhead_ms: 1,"
        " per_token_ms: 0.5}, decode: {overhead_ms: 2, per_client_ms: 1}}\n"
        "system: {clients: 2}\nrequests: [{id: a, input_tokens: 1, output_tokens: 1}]\n"))
    assert inst.profile.decode_round_ms(2) == 4.0


def test_toy_instances_all_load():
    paths = sorted(TOY.glob("*.yaml"))
    assert paths
    for path in paths:
        assert load_instance(path).num_requests > 0
