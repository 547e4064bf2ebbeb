"""SLOs in instances, arrival processes, and the attainment metrics (issue 15)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from llmopt.data.arrivals import Arrivals, arrival_times
from llmopt.data.instance import instance_from_mapping
from llmopt.data.slo import single_request_ms
from llmopt.errors import InstanceError, LlmoptWarning
from llmopt.policies.replay import replay, replay_result
from llmopt.schedule.metrics import attainment, attainment_by_class, request_latencies

PROFILE = "infermax-llama2-7b-a100"


def mapping(requests: object, slo: object = None, **system: int) -> dict:
    doc = {"name": "t", "model": PROFILE,
           "system": {"clients": 8, "kv_capacity": 20000, "max_batch_tokens": 4096, **system},
           "requests": requests}
    if slo is not None:
        doc["slo"] = slo
    return doc


def gen(count: int = 40, **arrival: object) -> dict:
    return {"generate": {"count": count, "seed": 3,
                         "input": {"dist": "uniform", "low": 50, "high": 400},
                         "output": {"dist": "uniform", "low": 2, "high": 60},
                         "arrival": arrival or {"process": "poisson", "rate_per_s": 20}}}


def test_fixed_targets_reach_every_request_and_the_hash() -> None:
    plain = instance_from_mapping(mapping(gen()))
    with_slo = instance_from_mapping(mapping(gen(), {"ttft_ms": 300, "tpot_ms": 40}))
    assert not plain.has_slos and with_slo.has_slos
    assert all(r.ttft_slo_ms == 300 and r.tpot_slo_ms == 40 and r.e2e_slo_ms is None
               for r in with_slo.requests)
    assert plain.sha256 != with_slo.sha256
    tighter = instance_from_mapping(mapping(gen(), {"ttft_ms": 300, "tpot_ms": 40,
                                                    "scale": 0.5}))
    assert tighter.requests[0].ttft_slo_ms == 150 and tighter.sha256 != with_slo.sha256


def test_classes_are_drawn_with_their_shares_and_request_fields_win() -> None:
    slo = {"ttft_ms": 500, "tpot_ms": 50, "seed": 7,
           "classes": [{"name": "chat", "share": 0.25, "ttft_ms": 200},
                       {"name": "code", "share": 0.75, "tpot_ms": 20}]}
    inst = instance_from_mapping(mapping(gen(count=2000), slo))
    names = [r.slo_class for r in inst.requests]
    assert abs(names.count("chat") / 2000 - 0.25) < 0.04
    for r in inst.requests:
        if r.slo_class == "chat":
            assert (r.ttft_slo_ms, r.tpot_slo_ms) == (200, 50)
        else:
            assert (r.ttft_slo_ms, r.tpot_slo_ms) == (500, 20)
    listed = [{"id": "a", "input_tokens": 10, "output_tokens": 5, "slo_class": "code"},
              {"id": "b", "input_tokens": 10, "output_tokens": 5, "ttft_slo_ms": 9.0}]
    inst = instance_from_mapping(mapping(listed, slo))
    assert inst.requests[0].slo_class == "code" and inst.requests[0].tpot_slo_ms == 20
    assert inst.requests[1].ttft_slo_ms == 9.0


def test_derived_targets_follow_the_single_request_latency() -> None:
    inst = instance_from_mapping(mapping(gen(), {"multiple": 10, "basis": "each"}))
    profile = inst.profile
    for r in inst.requests[:5]:
        ttft, tpot = single_request_ms(profile, r.input_tokens, r.output_tokens)  # type: ignore[arg-type]
        assert r.ttft_slo_ms == pytest.approx(10 * ttft)
        assert r.tpot_slo_ms == pytest.approx(10 * tpot)
    # by hand from the profile: one prefill of I tokens, decodes at the mean context
    p = profile
    i, o = 100, 11
    expected_ttft = (p.bias_ms + p.per_token_ms * i + p.prefill_attention_ms * i * i  # type: ignore[attr-defined]
                     + p.per_prefill_request_ms)  # type: ignore[attr-defined]
    expected_tpot = p.bias_ms + p.per_token_ms + p.decode_kv_ms * (i + (o - 2) / 2)  # type: ignore[attr-defined]
    assert single_request_ms(profile, i, o) == pytest.approx((expected_ttft, expected_tpot))  # type: ignore[arg-type]


def test_a_request_alone_meets_targets_of_exactly_its_single_latency() -> None:
    one = [{"id": "a", "input_tokens": 300, "output_tokens": 2}]
    inst = instance_from_mapping(mapping(one, {"multiple": 1.0, "basis": "each"}))
    table = request_latencies(replay(inst, "vllm"), inst)
    assert bool(table["slo_met"].iloc[0])
    assert table["ttft_ms"].iloc[0] == pytest.approx(inst.requests[0].ttft_slo_ms)


@pytest.mark.parametrize(("slo", "field"), [
    ({"ttft_ms": 0}, "slo.ttft_ms"),
    ({"ttft_ms": -5}, "slo.ttft_ms"),
    ({"classes": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.4}]},
     "slo.classes[*].share: the shares sum to 0.9"),
    ({"classes": [{"name": "a", "share": 0.5}, {"name": "a", "share": 0.5}]},
     "slo.classes[1].name: value 'a'"),
    ({"classes": []}, "slo.classes"),
    ({"classes": [{"name": "a", "share": 0.5, "ttft_ms": 100}, {"name": "b", "share": 0.5}]},
     "slo.classes[1]: value 'b': the class has no target"),
    ({}, "slo: the section gives no target"),
    ({"scale": 2}, "slo: the section gives no target"),
    ({"multiple": 0}, "slo.multiple"),
    ({"bogus": 1}, "slo.bogus"),
])
def test_bad_slo_sections_name_the_field(slo: dict, field: str) -> None:
    with pytest.raises(InstanceError) as err:
        instance_from_mapping(mapping(gen(), slo))
    assert field in str(err.value)


def test_classes_and_sections_without_targets_of_their_own_take_the_defaults() -> None:
    """A class without targets takes the section's; a section without any scales the
    requests' own."""
    inst = instance_from_mapping(mapping(gen(), {
        "ttft_ms": 300, "classes": [{"name": "a", "share": 0.5},
                                    {"name": "b", "share": 0.5, "ttft_ms": 900}]}))
    assert {(r.slo_class, r.ttft_slo_ms) for r in inst.requests} == {("a", 300), ("b", 900)}
    own = [{"id": "a", "input_tokens": 10, "output_tokens": 5, "ttft_slo_ms": 50}]
    assert instance_from_mapping(mapping(own, {"scale": 2})).requests[0].ttft_slo_ms == 100


def test_an_unknown_class_is_refused() -> None:
    listed = [{"id": "a", "input_tokens": 10, "output_tokens": 5, "slo_class": "batch"}]
    with pytest.raises(InstanceError, match=r"requests\[0\]\.slo_class.*batch"):
        instance_from_mapping(mapping(listed, {"classes": [{"name": "chat", "share": 1,
                                                            "ttft_ms": 100}]}))
    with pytest.raises(InstanceError, match=r"no slo\.classes"):
        instance_from_mapping(mapping(listed))


@pytest.mark.parametrize("arrival", [{"process": "poisson", "rate_per_s": 0},
                                     {"process": "gamma", "rate_per_s": -1, "cv": 2},
                                     {"process": "gamma", "cv": 2}])
def test_bad_arrival_rates_are_refused(arrival: dict) -> None:
    with pytest.raises(InstanceError, match="rate_per_s"):
        instance_from_mapping(mapping(gen(**arrival)))


def test_a_generators_arrivals_take_its_own_seed() -> None:
    with pytest.raises(InstanceError, match=r"requests\.generate\.arrival\.seed: value 5"):
        instance_from_mapping(mapping(gen(process="poisson", rate_per_s=20, seed=5)))


def test_poisson_and_gamma_have_their_rate_and_burstiness() -> None:
    rng = np.random.default_rng(0)
    n = 20000
    poisson = arrival_times(Arrivals(process="poisson", rate_per_s=50), n, rng)
    gamma = arrival_times(Arrivals(process="gamma", rate_per_s=50, cv=3), n, rng)
    for times, cv in ((poisson, 1.0), (gamma, 3.0)):
        gaps = np.diff(times)
        assert times[0] == 0 and np.all(gaps >= 0)
        assert np.mean(gaps) == pytest.approx(20.0, rel=0.08)
        assert np.std(gaps) / np.mean(gaps) == pytest.approx(cv, rel=0.12)


def test_generated_poisson_arrivals_keep_their_old_draws() -> None:
    """The content hash of a generated instance made before Gamma arrivals existed."""
    inst = instance_from_mapping(mapping(gen()))
    rng = np.random.default_rng(3)
    rng.uniform(50, 400, 40)
    rng.uniform(2, 60, 40)
    gaps = rng.exponential(1000.0 / 20, 40)
    expected = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    assert np.allclose(inst.arrival_ms, expected)


def test_duration_keeps_the_requests_arriving_in_time() -> None:
    spec = gen()
    del spec["generate"]["count"]
    spec["generate"]["duration_s"] = 5.0
    inst = instance_from_mapping(mapping(spec))
    assert 60 <= inst.num_requests <= 140  # 20/s for 5 s
    assert inst.arrival_ms.max() < 5000
    both = gen()
    both["generate"]["duration_s"] = 5.0
    with pytest.raises(InstanceError, match="exactly one of count and duration_s"):
        instance_from_mapping(mapping(both))


def test_trace_time_scale_and_replaced_arrivals(tmp_path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                     "0,10,5\n1,20,5\n3,30,5\n")
    base = {"trace": str(trace), "format": "vidur"}
    plain = instance_from_mapping(mapping(base))
    fast = instance_from_mapping(mapping({**base, "time_scale": 0.5}))
    assert list(plain.arrival_ms) == [0, 1000, 3000]
    assert list(fast.arrival_ms) == [0, 500, 1500]
    cut = instance_from_mapping(mapping({**base, "duration_s": 2}))
    assert cut.num_requests == 2
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("num_prefill_tokens,num_decode_tokens\n10,5\n20,5\n30,5\n")
    offline = instance_from_mapping(mapping({"trace": str(pairs), "format": "vidur"}))
    assert list(offline.arrival_ms) == [0, 0, 0]
    poisson = instance_from_mapping(mapping({"trace": str(pairs), "format": "vidur",
                                             "arrival": {"process": "poisson",
                                                         "rate_per_s": 2, "seed": 1}}))
    assert poisson.arrival_ms[0] == 0 and np.all(np.diff(poisson.arrival_ms) > 0)


def test_attainment_counts_by_hand() -> None:
    listed = [{"id": "a", "input_tokens": 100, "output_tokens": 3},
              {"id": "b", "input_tokens": 100, "output_tokens": 1},
              {"id": "c", "input_tokens": 3000, "output_tokens": 4, "arrival_ms": 1.0}]
    inst = instance_from_mapping(mapping(listed, {"ttft_ms": 1e6, "tpot_ms": 1e6}))
    sched = replay(inst, "vllm")
    table = request_latencies(sched, inst)
    req = sched.requests.assign(request=sched.requests["request"].astype(str)).set_index("request")
    for _, row in table.iterrows():
        r = req.loc[row["request"]]
        ttft = r["first_token_ms"] - r["arrival_ms"]
        e2e = r["finish_ms"] - r["arrival_ms"]
        assert row["ttft_ms"] == pytest.approx(ttft)
        assert row["e2e_ms"] == pytest.approx(e2e)
        if r["output_tokens"] > 1:
            assert row["tpot_ms"] == pytest.approx((e2e - ttft) / (r["output_tokens"] - 1))
        else:
            assert math.isnan(row["tpot_ms"])
    assert attainment(table)["attainment"] == 1.0
    # a TTFT target between the fastest and slowest request splits them
    ttfts = sorted(table["ttft_ms"])
    cut = (ttfts[0] + ttfts[-1]) / 2
    tight = instance_from_mapping(mapping(listed, {"ttft_ms": cut, "tpot_ms": 1e6}))
    got = attainment(request_latencies(replay(tight, "vllm"), tight))
    expected = sum(1 for t in table["ttft_ms"] if t <= cut) / 3
    assert got["attainment"] == pytest.approx(expected)
    assert got["attainment_ttft"] == got["attainment"]
    assert 0 < got["attainment"] < 1
    by_class = attainment_by_class(request_latencies(replay(tight, "vllm"), tight))
    assert list(by_class["requests"]) == [3]


def test_schedule_metrics_given_the_instance_have_the_attainment_of_the_cli() -> None:
    """``Schedule.metrics(instance)`` has the attainment ``llmopt replay`` prints and the
    solution file stores; without the instance (no targets to read) it has none."""
    listed = [{"id": "a", "input_tokens": 100, "output_tokens": 3},
              {"id": "c", "input_tokens": 3000, "output_tokens": 4, "arrival_ms": 1.0}]
    inst = instance_from_mapping(mapping(listed, {"ttft_ms": 1e6, "tpot_ms": 1e-3}))
    result, sched = replay_result(inst, "vllm")
    with_slos = sched.metrics(inst)
    by_hand = attainment(request_latencies(sched, inst))
    assert with_slos["attainment"] == by_hand["attainment"] == 0.0  # TPOT 1 µs: no one meets it
    assert with_slos["attainment_ttft"] == 1.0
    assert with_slos == result.metrics
    assert "attainment" not in sched.metrics()


def test_requests_left_without_a_target_are_said_to_meet_it_always() -> None:
    """A class without targets is fine when its requests carry their own; a request left with
    no target at all is warned about (it meets its SLO in every schedule)."""
    listed = [{"id": "a", "input_tokens": 10, "output_tokens": 5, "ttft_slo_ms": 50,
               "slo_class": "chat"},
              {"id": "b", "input_tokens": 10, "output_tokens": 5, "slo_class": "code"}]
    slo = {"classes": [{"name": "chat", "share": 0.5}, {"name": "code", "share": 0.5}]}
    with pytest.warns(LlmoptWarning, match=r"1 of 2 requests have no SLO target .*requests\[1\]"):
        inst = instance_from_mapping(mapping(listed, slo))
    assert [r.ttft_slo_ms for r in inst.requests] == [50, None]
    listed[1]["e2e_slo_ms"] = 900
    with warnings.catch_warnings():
        warnings.simplefilter("error", LlmoptWarning)
        instance_from_mapping(mapping(listed, slo))
