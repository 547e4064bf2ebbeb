"""The ceiling on SLO attainment (llmopt.problems.slo_ceiling): never below what a replayed policy
or the exact model's plan meets on random instances, exactly tight on hand cases, its parts, its
interruption and its refusals."""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest

from llmopt.data.instance import instance_from_mapping
from llmopt.errors import InstanceError, OptionError
from llmopt.experiments.slo_ceiling_check import (
    TINY_PROFILE,
    check_instance,
    infermax_policies,
    met_count,
    random_slo_instance,
)
from llmopt.policies.replay import replay
from llmopt.problems.slo_ceiling.capacity import flow_value, parts
from llmopt.problems.slo_ceiling.ceiling import attainment_ceiling
from llmopt.problems.slo_ceiling.goodput import goodput_ceiling
from llmopt.problems.slo_ceiling.requests import NEVER, SOLO, WINDOW, obligations

PROPERTY_INSTANCES = 1000  # bench/slo_ceiling.py --property 1000 replays every policy on each
PREFIX_INSTANCES = 200     # ... with a prefix cache (random_slo_instance(prefix=True))


def two_requests(ttft_ms: float, instances: int = 1, **extra) -> dict:
    """Two requests of 10 prompt tokens and 1 output token arriving together on the tiny
    profile: alone, a prompt takes 1 + 0.1·10 + 0.01·100 + 0.2 = 3.2 ms; together (one batch)
    5.4 ms, one after the other 3.2 and 6.4 ms."""
    return {"name": "two", "model": TINY_PROFILE,
            "system": {"clients": 4, "kv_capacity": 100, "max_batch_tokens": 64,
                       "instances": instances},
            "requests": [{"id": f"r{k}", "input_tokens": 10, "output_tokens": 1,
                          "arrival_ms": 0.0, "ttft_slo_ms": ttft_ms, **extra}
                         for k in range(2)]}


def best_policy(instance) -> int:
    return max(met_count(instance, replay(instance, name)) for name in
               ("vllm", "sarathi", "sjf"))


def plan_count(instance, batches: list[dict]) -> int:
    """Requests meeting their SLOs when ``batches`` are replayed as a plan."""
    plan = {"mode": "continuous", "plan": [{"evict": [], "prefill": {}, "decode": [], **b}
                                           for b in batches]}
    return met_count(instance, replay(instance, "plan", plan=plan))


ONE_THEN_THE_OTHER = [{"prefill": {"r0": 10}}, {"prefill": {"r1": 10}}]


# --------------------------------------------------------------------- the property

def test_never_below_a_policy_on_random_instances():
    """PROPERTY_INSTANCES seeded instances (2–60 requests, four profiles, loads from light to
    20x, M tight to loose, C and J small to large, one to three replicas with random routers,
    TTFT/TPOT/E2E targets from below the latency alone to 30x, some missing): the ceiling is at
    least what two InferMax-family policies (in turn, so that every policy is checked on about
    PROPERTY_INSTANCES / 13 instances) meet (vllm-unlimited, which ignores M, against the
    ceiling without the KV rule). bench/slo_ceiling.py --property checks every policy on
    each."""
    policies = infermax_policies()
    violations, checked = [], 0
    for seed in range(PROPERTY_INSTANCES):
        instance = random_slo_instance(seed)
        chosen = [policies[(2 * seed) % len(policies)], policies[(2 * seed + 1) % len(policies)]]
        result = check_instance(instance, policies=chosen)
        checked += len(result.counts)
        violations += [f"seed {seed}: {v}" for v in result.violations]
    assert not violations, violations[:5]
    assert checked > 1.3 * PROPERTY_INSTANCES   # most policies run most instances


def test_never_below_the_exact_models_plans():
    """On small instances the exact attainment model's best plan (replayed) meets at most the
    ceiling, and where the model proves its optimum the ceiling is at least that optimum."""
    found = 0
    for seed in range(400):
        instance = random_slo_instance(seed, max_requests=5)
        if instance.system.instances != 1 or instance.profile.name != "tiny":
            continue
        result = check_instance(instance, policies=["vllm"], exact_up_to=5, exact_time_s=1.0)
        assert not result.violations, (seed, result.violations)
        if result.exact_best is not None and result.exact_best == result.exact_upper:
            found += 1
            assert result.ceiling >= result.exact_best
        if found >= 3:
            break
    assert found >= 3


def test_never_below_a_policy_with_a_prefix_cache():
    """PREFIX_INSTANCES seeded instances with automatic prefix caching (blocks of 1–4 tokens,
    prompts sharing leading hash blocks in one to three groups): the ceiling is at least what
    two InferMax-family policies (in turn) meet, and on some of them a policy meets more than
    the ceiling computed as if every prompt token were computed (the cache is what allows it)."""
    policies = infermax_policies()
    violations, checked, beyond_uncached = [], 0, 0
    for seed in range(PREFIX_INSTANCES):
        instance = random_slo_instance(seed, prefix=True)
        chosen = [policies[(2 * seed) % len(policies)], policies[(2 * seed + 1) % len(policies)]]
        result = check_instance(instance, policies=chosen)
        checked += len(result.counts)
        violations += [f"seed {seed}: {v}" for v in result.violations]
        if result.counts:
            uncached = attainment_ceiling(instance.with_system(prefix_caching=False),
                                          iterations=False)
            beyond_uncached += max(result.counts.values()) > uncached.met_max
    assert not violations, violations[:5]
    assert checked > 1.3 * PREFIX_INSTANCES
    assert beyond_uncached >= 1


def test_a_shared_prefix_lets_both_meet_their_ttft():
    """Two 10-token prompts sharing their first 8 tokens (blocks of 1 token), one prompt per
    batch (C = 10), TTFT target 5 ms on the tiny profile: without a cache the second prompt ends
    at 6.4 ms, so at most one meets it; with one the second computes 2 tokens after 8 cached
    (1 + 0.1·2 + 0.01·(100 − 64) + 0.2 = 1.76 ms) and ends at 4.96 ms: both can, and vllm
    meets both."""
    data = two_requests(ttft_ms=5.0)
    data["system"].update(max_batch_tokens=10, block_size=1)
    for k, r in enumerate(data["requests"]):
        r["hash_ids"], r["hash_block_tokens"] = [*range(8), 100 + 10 * k, 101 + 10 * k], 1
    uncached = instance_from_mapping(data)
    assert attainment_ceiling(uncached).met_max == 1
    data["system"]["prefix_caching"] = True
    cached = instance_from_mapping(data)
    ceiling = attainment_ceiling(cached)
    assert ceiling.met_max == 2 == met_count(cached, replay(cached, "vllm"))
    assert list(obligations(cached).cached_tokens) == [8, 8]
    assert "prefix caching" in ceiling.valid_under


# --------------------------------------------------------------------- hand cases

def test_two_requests_that_cannot_both_meet_their_ttft():
    inst = instance_from_mapping(two_requests(ttft_ms=4.0))
    ceiling = attainment_ceiling(inst)
    assert ceiling.met_max == 1 and ceiling.method == "capacity"
    assert plan_count(inst, ONE_THEN_THE_OTHER) == 1   # exactly tight
    assert best_policy(inst) == 0                      # the policies batch both: 5.4 ms
    assert ceiling.bounds["alone"] == 2


def test_both_meet_when_the_targets_allow_it():
    inst = instance_from_mapping(two_requests(ttft_ms=6.5))
    assert attainment_ceiling(inst).met_max == 2 == best_policy(inst)


def test_two_replicas_serve_both():
    """On two model instances each request can have one to itself: the ceiling allows both,
    and round-robin routing meets both."""
    inst = instance_from_mapping(two_requests(ttft_ms=4.0, instances=2))
    assert attainment_ceiling(inst).met_max == 2
    assert met_count(inst, replay(inst, "vllm", router="round-robin")) == 2


def test_a_request_that_cannot_meet_its_target_alone():
    """3.2 ms is the least TTFT of a 10-token prompt alone: a target of 3 ms is never met."""
    inst = instance_from_mapping(two_requests(ttft_ms=3.0))
    ob = obligations(inst)
    assert list(ob.kind) == [NEVER, NEVER]
    ceiling = attainment_ceiling(inst)
    assert ceiling.met_max == 0 and ceiling.method == "alone"
    assert best_policy(inst) == 0


def test_the_tolerance_of_the_metrics_counts():
    """A target equal to the latency alone is met (up to 1e-6 ms): one of the two meets it."""
    inst = instance_from_mapping(two_requests(ttft_ms=3.2))
    assert attainment_ceiling(inst).met_max == 1 == plan_count(inst, ONE_THEN_THE_OTHER)


def test_a_tpot_only_request_counts_if_it_can_meet_it_alone():
    """No deadline: served last and alone. Decode t of a 10-token prompt alone takes 1 + 0.1 +
    0.05·(9 + t) ms, so 1.6 ms per token is met by 3 output tokens (1.6 and 1.65: mean 1.625 >
    1.6 fails) — with 2 output tokens, 1.6 ms: met by each decoding alone (together 2.2 ms)."""
    data = two_requests(ttft_ms=4.0)
    for r in data["requests"]:
        del r["ttft_slo_ms"]
        r["output_tokens"] = 2
        r["tpot_slo_ms"] = 1.6
    inst = instance_from_mapping(data)
    assert list(obligations(inst).kind) == [SOLO, SOLO]
    assert attainment_ceiling(inst).met_max == 2 == plan_count(
        inst, [{"prefill": {"r0": 10}}, {"decode": ["r0"]}, {"prefill": {"r1": 10}},
               {"decode": ["r1"]}])
    data["requests"][0]["output_tokens"] = 3
    inst = instance_from_mapping(data)
    assert list(obligations(inst).kind) == [NEVER, SOLO]
    assert attainment_ceiling(inst).met_max == 1


def test_the_bias_charge_makes_the_bound_tight():
    """Three requests of 1 prompt token arriving together, TTFT target 1.31 ms: alone 1 + 0.1
    + 0.01 + 0.2 = 1.31 ms, so each needs the first batch and C = 1 lets one in: one meets. The
    work alone (0.31 ms each) would allow four in 1.31 ms; the c/C charge (the bias over C = 1
    token: 1 ms) makes each cost 1.31 ms."""
    data = {"name": "three", "model": TINY_PROFILE,
            "system": {"clients": 4, "kv_capacity": 100, "max_batch_tokens": 1},
            "requests": [{"id": f"r{k}", "input_tokens": 1, "output_tokens": 1,
                          "arrival_ms": 0.0, "ttft_slo_ms": 1.31} for k in range(3)]}
    inst = instance_from_mapping(data)
    ceiling = attainment_ceiling(inst)
    assert ceiling.met_max == 1 == best_policy(inst)
    assert "c/C" in ceiling.proof


def test_counting_batches_makes_the_bound_tight():
    """Two requests of 1 prompt token arriving together, TTFT target 1.31 ms (their least time
    alone): together a batch takes 1.62 ms, so one meets. The bias charges (1/J with J = 4:
    0.25 ms each) let both fit in the flow; the iteration LP counts the batch: bias·n + 0.31
    (x_1 + x_2) ≤ 1.31 with n ≥ x_1, x_2 gives x_1 + x_2 ≤ 1.62, floored to 1."""
    data = two_requests(ttft_ms=1.31)
    for r in data["requests"]:
        r["input_tokens"] = 1
    inst = instance_from_mapping(data)
    ceiling = attainment_ceiling(inst)
    assert ceiling.bounds["capacity"] == 2 and ceiling.bounds["iterations"] == 1
    assert ceiling.met_max == 1 and ceiling.method == "iterations"
    assert plan_count(inst, [{"prefill": {"r0": 1}}, {"prefill": {"r1": 1}}]) == 1


# --------------------------------------------------------------------- the flow and its parts

def test_the_flow_is_the_fractional_optimum():
    """One slot of 10 ticks; works 4, 5, 6 (one window each): the greedy serves 4 and 5 whole
    and 1/6 of the third: 2 + 1/6."""
    zeros = np.zeros(3, dtype=np.int64)
    value = flow_value(zeros, np.full(3, 10), np.full(3, 10), np.array([4, 5, 6]), zeros, 1)
    assert value == pytest.approx(2 + 1 / 6)
    # a later window for the 6: it fits there, all three whole
    value = flow_value(np.array([0, 0, 10]), np.array([10, 10, 20]), np.array([10, 10, 20]),
                       np.array([4, 5, 6]), zeros, 1)
    assert value == pytest.approx(3)


def test_the_late_share_is_capped():
    """Work 2 + 8 whose 2 must come by tick 2, and another request filling ticks 0–2: the
    first can only do its later 8 after tick 2, so it is served 8/10 (the other whole)."""
    value = flow_value(np.array([0, 0]), np.array([2, 2]), np.array([10, 2]),
                       np.array([2, 2]), np.array([8, 0]), 1)
    assert value == pytest.approx(1 + 8 / 10)


def test_independent_parts():
    groups = parts(np.array([0, 5, 20, 1]), np.array([10, 12, 30, 3]))
    assert [sorted(g.tolist()) for g in groups] == [[0, 1, 3], [2]]


# --------------------------------------------------------------------- interruption, refusals

def test_an_interrupted_ceiling_keeps_the_best_bound_so_far():
    inst = instance_from_mapping(two_requests(ttft_ms=4.0))
    ceiling = attainment_ceiling(inst, stop=lambda: True)
    assert ceiling.interrupted and ceiling.met_max == 2 and ceiling.method == "alone"
    ceiling = attainment_ceiling(inst, time_limit_s=1e-9)
    assert ceiling.interrupted and ceiling.met_max == 2
    assert not attainment_ceiling(inst).interrupted


def test_refusals():
    data = two_requests(ttft_ms=4.0)
    for r in data["requests"]:
        del r["ttft_slo_ms"]
    with pytest.raises(InstanceError, match="needs SLO targets"):
        attainment_ceiling(instance_from_mapping(data))
    inst = instance_from_mapping(two_requests(ttft_ms=4.0))
    for bad in (0, -1.0, math.inf, True):
        with pytest.raises(OptionError):
            attainment_ceiling(inst, time_limit_s=bad)
    pang = {"name": "pang", "model": "pang-llama65b-ascend8",
            "system": {"clients": 2, "max_prefill_tokens": 4096},
            "requests": [{"id": "r0", "input_tokens": 5, "output_tokens": 2,
                          "ttft_slo_ms": 100.0}]}
    with pytest.raises(InstanceError, match="infermax profile"):
        attainment_ceiling(instance_from_mapping(pang))


def test_window_requests_and_sentence():
    inst = instance_from_mapping(two_requests(ttft_ms=4.0))
    assert list(obligations(inst).kind) == [WINDOW, WINDOW]
    text = attainment_ceiling(inst).sentence()
    assert text.startswith("at most 1 of 2 requests (50.0 %) can meet their SLOs")


# --------------------------------------------------------------------- goodput ceiling

GENERATED = {"name": "gen", "model": "infermax-llama3-8b-a100", "system": {"clients": 64},
             "requests": {"generate": {
                 "count": 60, "seed": 3,
                 "input": {"dist": "lognormal", "mean": 161, "std": 161, "min": 4, "max": 2048},
                 "output": {"dist": "lognormal", "mean": 60, "std": 60, "min": 2, "max": 400},
                 "arrival": {"process": "poisson", "rate_per_s": 1.0}}},
             "slo": {"multiple": 3}}


def generated_at(rate: float):
    data = copy.deepcopy(GENERATED)
    data["requests"]["generate"]["arrival"]["rate_per_s"] = rate
    return instance_from_mapping(data)


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_no_policy_reaches_the_level_above_the_goodput_ceiling(level):
    """The generator draws the same gaps at every rate (``scaled``); above the lowest rate
    where the ceiling forbids the level, no policy reaches it (probed up to 8x), and where the
    ceiling allows it at rate r its (monotone) bound allows it at every lower probed rate."""
    found = goodput_ceiling(generated_at, level, 1.0, 2000.0, rel_tol=0.02)
    assert found.scaled and found.rate is not None and found.forbidden_at is not None
    assert found.rate < found.forbidden_at <= found.rate * 1.03
    for factor in (1.0, 1.5, 3.0, 8.0):
        inst = generated_at(found.forbidden_at * factor)
        for name in ("vllm", "sarathi", "sjf", "vllm-v1", "sola", "vllm-s-1024"):
            share = met_count(inst, replay(inst, name)) / inst.num_requests
            assert share < level, (name, factor, share)
    allowed = sorted((rate, met) for rate, met, _ in found.probes)
    for (r1, m1), (r2, m2) in itertools.pairwise(allowed):
        assert m1 >= m2, (r1, m1, r2, m2)   # the monotone bound never grows with the rate


def test_the_goodput_ceiling_notices_draws_that_are_not_scaled():
    def reseeded(rate: float):
        data = copy.deepcopy(GENERATED)
        data["requests"]["generate"]["arrival"]["rate_per_s"] = rate
        data["requests"]["generate"]["seed"] = int(rate)
        return instance_from_mapping(data)
    assert not goodput_ceiling(reseeded, 0.9, 1.0, 2000.0, steps=3).scaled


def test_goodput_refusals():
    with pytest.raises(OptionError):
        goodput_ceiling(generated_at, 1.5, 1.0, 10.0)
    with pytest.raises(OptionError):
        goodput_ceiling(generated_at, 0.9, 10.0, 1.0)
