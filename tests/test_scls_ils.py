"""ILS, the iteration-level baseline of Cheng et al. 2024 (section 5.1), on the ``scls`` profile:
eqs 3-4 mapped per request onto the simulation's iterations, the KV capacity of eqs 5-6, the
policy (SARATHI's continuous batching, first token from the first decode, round-robin) and the
validator's ``scls`` time model. Expected values are worked out by hand from the coefficients of
models/scls-llama2-13b-a100.yaml."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import ROOT, TOY
from llmopt.data.cost import load_profile
from llmopt.data.instance import Instance, instance_from_mapping, load_instance
from llmopt.data.limits import resolve_limits
from llmopt.errors import InstanceError
from llmopt.policies.registry import POLICIES
from llmopt.policies.replay import replay, replay_result
from llmopt.policies.slice.ils import section5_metrics
from llmopt.schedule.metrics import request_latencies
from llmopt.validate import validate_solution

PROFILE = "scls-llama2-13b-a100"
COEF = yaml.safe_load((ROOT / "models" / f"{PROFILE}.yaml").read_text())
# p1..p4 = 0.2, 2, 0.02, 30; d1..d4 = 0.002911, 0.3, 0.002, 21.56 (ms)


def make(reqs: list[dict], **system) -> Instance:
    return instance_from_mapping({"name": "t", "model": PROFILE,
                                  "system": {"clients": 16, **system}, "requests": reqs})


def test_iterations_are_eqs_3_and_4_per_request() -> None:
    p = load_profile(PROFILE)
    # eq 3 at N = 1, L = 512: 0.2·512 + 2 + 0.02·512 + 30
    assert p.iteration_ms(512, 0, 0.0, 0.0, 1) == pytest.approx(144.64, abs=1e-9)
    # two chunks of 512 tokens in all, L = 256: 0.2·512 + 2·2 + 0.02·256 + 30
    assert p.iteration_ms(512, 0, 0.0, 0.0, 2) == pytest.approx(141.52, abs=1e-9)
    # 15 decodes reading 9000 KVs, eq 4 at N = 15, l = 9015/15:
    # 0.002911·9015 + 0.3·15 + 0.002·601 + 21.56
    assert p.iteration_ms(0, 15, 9000.0, 0.0, 0) == pytest.approx(53.504665, abs=1e-9)
    assert p.iteration_ms(512, 15, 9000.0, 0.0, 1) == pytest.approx(144.64 + 53.504665,
                                                                     abs=1e-9)
    # per_batch = 0.002911·4 + 0.3·4 + 0.002 + 21.56, per_kv = 0.002911 + 0.002/4
    per_batch, per_kv = p.decode_iteration_costs(4)
    assert (per_batch, per_kv) == pytest.approx((22.773644, 0.003411), abs=1e-12)
    assert p.iteration_ms(0, 0, 0.0, 0.0, 0) == 0.0


def test_kv_capacity_is_eqs_5_and_6_without_zeta() -> None:
    # M_ava = 80 − 24.24 − 4 = 51.76 GiB; 51.76·2^30 / 819200 = 51.76 · 1310.72 = 67842.87
    assert load_profile(PROFILE).kv_capacity == 67842
    inst = make([{"id": "a", "input_tokens": 8, "output_tokens": 2}])
    assert resolve_limits(inst).kv_tokens == 67842
    own = make([{"id": "a", "input_tokens": 8, "output_tokens": 2}], kv_capacity=1000)
    assert resolve_limits(own).kv_tokens == 1000


def test_ils_by_hand() -> None:
    """r0 (600 prompt tokens, 3 output) and r1 (100, 2) at time 0 on one instance. Iteration 1:
    r0's first chunk of P = 512; 2: r0's last 88 tokens and r1's 100 (N = 2, L = 94); 3-4: both
    decode (the first gives the first token, eq 2); 5: r0 alone."""
    inst = make([{"id": "r0", "input_tokens": 600, "output_tokens": 3},
                 {"id": "r1", "input_tokens": 100, "output_tokens": 2}])
    it1 = 0.2 * 512 + 2 + 0.02 * 512 + 30                      # 144.64
    it2 = 0.2 * 188 + 2 * 2 + 0.02 * 94 + 30                   # 73.48
    two = 0.002911 * 2 + 0.3 * 2 + 0.002 + 21.56               # per_batch at d = 2
    it3 = two + (0.002911 + 0.002 / 2) * 700                   # reads 600 + 100 KVs
    it4 = two + (0.002911 + 0.002 / 2) * 702
    it5 = 0.002911 + 0.3 + 0.002 + 21.56 + (0.002911 + 0.002) * 602
    sched = replay(inst, "ils")
    its = sched.iterations
    assert its["end_ms"].tolist() == pytest.approx(
        [it1, it1 + it2, it1 + it2 + it3, it1 + it2 + it3 + it4,
         it1 + it2 + it3 + it4 + it5], abs=1e-9)
    assert its["phase"].astype(str).tolist() == ["prefill", "prefill", "decode", "decode",
                                                 "decode"]
    lat = request_latencies(sched, inst).set_index("request")
    first = it1 + it2 + it3
    assert lat.loc["r0", "ttft_ms"] == pytest.approx(first, abs=1e-9)
    assert lat.loc["r1", "ttft_ms"] == pytest.approx(first, abs=1e-9)
    assert lat.loc["r1", "e2e_ms"] == pytest.approx(first + it4, abs=1e-9)
    assert lat.loc["r0", "e2e_ms"] == pytest.approx(first + it4 + it5, abs=1e-9)
    m = section5_metrics(sched, 1)
    assert m["response_mean_ms"] == pytest.approx((2 * first + 2 * it4 + it5) / 2, abs=1e-5)
    assert m["throughput_rps"] == pytest.approx(2 / ((first + it4 + it5) / 1000), rel=1e-6)
    assert m["completion_std_ms"] == 0.0 and m["pad_tokens_per_request"] == 0.0


def test_mixed_iteration_is_the_sum_and_round_robin_deals_requests() -> None:
    """r1 arrives while r0 decodes: SARATHI puts r0's decode and r1's whole prompt into one
    iteration, timed eq 3 + eq 4. With two instances r1 goes to the other one."""
    reqs = [{"id": "r0", "input_tokens": 50, "output_tokens": 40},
            {"id": "r1", "input_tokens": 300, "output_tokens": 2, "arrival_ms": 100.0}]
    sched = replay(make(reqs), "ils")
    its = sched.iterations
    mixed = its[its["phase"] == "mixed"]
    assert len(mixed) == 1
    row = mixed.iloc[0]
    before = int((its["start_ms"] < row["start_ms"]).sum())
    assert before >= 2  # r0's prefill, then at least one decode before r1 arrives
    # r0 has decoded (before − 1) times: it reads 50 + before − 1 KVs
    prefill = 0.2 * 300 + 2 + 0.02 * 300 + 30
    decode = 0.002911 + 0.3 + 0.002 + 21.56 + (0.002911 + 0.002) * (50 + before - 1)
    assert row["end_ms"] - row["start_ms"] == pytest.approx(prefill + decode, abs=1e-9)
    two = replay(make(reqs, instances=2), "ils")
    placed = two.requests.set_index("request")["instance"]
    assert (int(placed["r0"]), int(placed["r1"])) == (0, 1)
    assert (two.iterations["phase"] != "mixed").all()


def test_bundled_cluster_replay_is_valid_and_a_slower_decode_is_refused() -> None:
    assert POLICIES["ils"].family == "scls" and POLICIES["ils"].mode == "continuous"
    inst = load_instance(TOY / "scls-cluster.yaml")
    assert inst.system.instances == 4
    result, sched = replay_result(inst, "ils")
    assert sorted(set(sched.iterations["instance"])) == [0, 1, 2, 3]
    assert (sched.iterations["phase"] == "mixed").any()  # SplitFuse: hybrid iterations
    sol = json.loads(json.dumps(result.to_dict(inst)))
    assert sol["mode"] == "continuous"
    assert validate_solution(inst, sol) == []
    data = yaml.safe_load((TOY / "scls-cluster.yaml").read_text())
    profile = dict(COEF, decode=dict(COEF["decode"], c4=COEF["decode"]["c4"] + 1.0))
    slower = instance_from_mapping(dict(data, model=profile))
    reasons = validate_solution(slower, sol)
    assert any("off the scls time model" in r for r in reasons), reasons


def test_ils_refuses_other_families_and_requests_beyond_the_cache() -> None:
    with pytest.raises(InstanceError, match="family scls"):
        replay(load_instance(TOY / "quickstart.yaml"), "ils")
    big = make([{"id": "a", "input_tokens": 900, "output_tokens": 200}], kv_capacity=1000)
    with pytest.raises(InstanceError, match="1100 KV tokens") as err:
        replay(big, "ils")
    assert "system.kv_capacity" in str(err.value)
