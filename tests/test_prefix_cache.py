"""Prefix caching in the simulation core (``system.prefix_caching``): hits checked against the
count from the hash ids alone, shared blocks counted once, evicted requests re-hitting their own
blocks, the block-granular fast path, and the validator's checks of hits. Every replay here is
validated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.data.prefix import ideal_reuse
from llmopt.errors import InstanceError
from llmopt.policies.replay import replay, replay_result
from llmopt.result import Result
from llmopt.schedule import Schedule
from llmopt.sim.decode_stream import DecodeStream
from llmopt.validate import validate_solution

PROFILE = "infermax-llama2-7b-a100"
FCFS = ("vllm", "sarathi", "vllm-v1")


def sessions(n: int = 60, *, kv: int | None = 20000, caching: bool = True, spaced: bool = False,
             replicas: int = 1, seed: int = 3, clients: int = 16):
    """Multi-turn sessions over three shared system prompts; ``spaced``: one request every
    10 s, so each finishes before the next arrives."""
    system = {"clients": clients, "max_batch_tokens": 2048, "prefix_caching": caching,
              "instances": replicas}
    if kv is not None:
        system["kv_capacity"] = kv
    inst = instance_from_mapping({
        "name": "sessions", "model": PROFILE, "system": system,
        "requests": {"generate": {
            "count": n, "seed": seed, "input": {"dist": "uniform", "low": 50, "high": 300},
            "output": {"dist": "uniform", "low": 10, "high": 100},
            "arrival": {"process": "poisson", "rate_per_s": 20},
            "prefix": {"system_prompts": 3, "system_tokens": 512,
                       "turns": {"dist": "uniform", "low": 1, "high": 5},
                       "think_ms": {"dist": "constant", "value": 2000}}}}})
    if spaced:
        inst = inst.with_requests(tuple(r.model_copy(update={"arrival_ms": 10_000.0 * k})
                                        for k, r in enumerate(inst.requests)))
    return inst


def validated(inst, policy: str, **kw) -> tuple[Result, Schedule]:
    result, schedule = replay_result(inst, policy, **kw)
    assert validate_solution(inst, result.to_dict(inst)) == []
    return result, schedule


def cached_per_request(inst, schedule: Schedule) -> np.ndarray:
    by_id = schedule.requests.set_index(schedule.requests["request"].astype(str))
    return by_id["cached_tokens"].reindex(list(inst.ids)).to_numpy()


# ----------------------------------------------------------------------------- off: unchanged

def test_the_flag_off_keeps_the_hash_and_the_schedule():
    on, off = sessions(caching=True), sessions(caching=False)
    plain = off.with_requests(tuple(r.model_copy(update={"hash_ids": None,
                                                         "hash_block_tokens": None})
                                    for r in off.requests))
    assert on.sha256 != off.sha256
    assert "prefix_caching" not in off.system.model_dump(exclude_defaults=True)
    a, b = replay(off, "vllm-v1"), replay(plain, "vllm-v1")
    pd.testing.assert_frame_equal(a.segments, b.segments)
    assert "cached_tokens" not in a.requests and "hit" not in set(a.segments["phase"])


# ----------------------------------------------------------------------------- against the ids

@pytest.mark.parametrize("policy", ["vllm-v1", "vllm", "sarathi", "vllm-unlimited"])
def test_unlimited_memory_one_replica_spaced_arrivals_hit_the_ideal(policy):
    inst = sessions(spaced=True, kv=None if policy == "vllm-unlimited" else 10 ** 6)
    _, schedule = validated(inst, policy)
    ideal = ideal_reuse(inst, 16)
    assert ideal.hit_blocks.sum() > 0
    assert cached_per_request(inst, schedule).tolist() == ideal.hit_tokens.tolist()
    metrics = schedule.metrics()
    assert metrics["prefix_hit_rate_tokens"] == pytest.approx(ideal.token_hit_rate, abs=1e-6)
    assert metrics["prefix_hit_rate_blocks"] == pytest.approx(ideal.block_hit_rate, abs=1e-6)


@pytest.mark.parametrize("policy", FCFS)
@pytest.mark.parametrize("kv", [2500, 6000, 20000])
def test_limited_memory_never_beats_the_ideal(policy, kv):
    # FCFS admits in arrival order: a first admission can only hit blocks of earlier arrivals
    inst = sessions(kv=kv)
    _, schedule = validated(inst, policy)
    cached = cached_per_request(inst, schedule)
    assert (cached <= ideal_reuse(inst, 16).hit_tokens).all()


def test_less_memory_finds_less():
    rates = [validated(sessions(kv=kv), "vllm-v1")[1].metrics()["prefix_hit_rate_tokens"]
             for kv in (2000, 20000)]
    assert rates[0] < rates[1]


# ----------------------------------------------------------------------------- blocks

def twins(caching: bool, kv: int = 1200):
    """Two requests with the same 800-token prompt, the second arriving while the first
    decodes: they fit side by side only if the prompt's blocks are held once."""
    ids = list(range(50))  # 16-token hash blocks
    return instance_from_mapping({
        "name": "twins", "model": PROFILE,
        "system": {"clients": 4, "kv_capacity": kv, "max_batch_tokens": 2048,
                   "prefix_caching": caching},
        "requests": [
            {"id": "a", "input_tokens": 800, "output_tokens": 200, "arrival_ms": 0.0,
             "hash_ids": ids, "hash_block_tokens": 16},
            {"id": "b", "input_tokens": 800, "output_tokens": 200, "arrival_ms": 300.0,
             "hash_ids": ids, "hash_block_tokens": 16}]})


def test_shared_blocks_count_once():
    _, on = validated(twins(True), "vllm-v1")
    _, off = validated(twins(False), "vllm-v1")
    req = on.requests.set_index(on.requests["request"].astype(str))
    assert req.loc["b", "cached_tokens"] == 784  # 49 blocks: the last token is recomputed
    # with the prompt's blocks held once both decode side by side, without a preemption
    assert on.metrics()["evictions"] == 0
    assert req.loc["b", "arrival_ms"] < req.loc["a", "finish_ms"]
    assert req.loc["b", "first_token_ms"] < req.loc["a", "finish_ms"]
    assert on.iterations["running"].max() == 2
    # without the cache 2 × 800 KVs do not fit 1200: the second waits or preempts
    off_req = off.requests.set_index(off.requests["request"].astype(str))
    assert (off.metrics()["evictions"] > 0
            or off_req.loc["b", "first_token_ms"] >= off_req.loc["a", "finish_ms"])


def test_an_evicted_request_hits_its_own_blocks_again():
    # two different 496-token prompts fit 1200 KVs side by side, their 400 decodes do not
    inst = twins(True, kv=1200).with_requests(tuple(
        r.model_copy(update={"hash_ids": tuple(range(k * 100, k * 100 + 31)),
                             "input_tokens": 496, "output_tokens": 400, "arrival_ms": 0.0})
        for k, r in enumerate(twins(True).requests)))
    _, schedule = validated(inst, "vllm-v1")
    req = schedule.requests
    evicted = req[req["evictions"] > 0]
    assert len(evicted)
    assert (evicted["refill_cached_tokens"] > 0).all()
    assert schedule.metrics()["prefill_tokens_saved"] == int(
        req["cached_tokens"].sum() + req["refill_cached_tokens"].sum())


def test_mooncake_sample_preempts_far_less_with_caching():
    base = load_instance(TOY / "slo-mooncake-sample.yaml")
    base = base.with_requests(base.requests[:40])
    evictions = {}
    for caching in (False, True):
        inst = base.with_system(prefix_caching=caching)
        evictions[caching] = validated(inst, "vllm-v1")[1].metrics()["evictions"]
    # measured: 487 without the cache, 17 with it
    assert evictions[True] * 10 < evictions[False]


def test_fast_path_equals_iteration_by_iteration():
    for inst in (sessions(kv=2500), sessions(kv=20000, replicas=2)):
        for policy in ("vllm-v1", "vllm", "sarathi", "rank-org"):
            fast = replay(inst, policy)
            slow = replay(inst, policy, fast=False)
            pd.testing.assert_frame_equal(fast.segments, slow.segments)
            pd.testing.assert_frame_equal(fast.iterations, slow.iterations)


@pytest.mark.parametrize("seed", range(40))
def test_stream_block_counts_match_a_brute_force(seed):
    rng = np.random.default_rng(seed)
    B = int(rng.choice([1, 4, 16]))
    n = int(rng.integers(1, 12))
    m = rng.integers(1, 200, n).tolist()
    reserve = [B * int(rng.integers(0, 15)) for _ in range(n)]
    stream = DecodeStream(list(m), list(m), [1] * n, reserve, [10 ** 6] * n, block=B)
    for i in range(n):
        stream.join(i, i)
    for _ in range(int(rng.integers(0, 40))):
        stream.step(0.0, 1.0)
    now = [stream.m_of(i) for i in range(n)]
    growing = [i for i in range(n) if now[i] >= reserve[i]]

    def new_blocks(rounds):  # decodes at m, ..., m + rounds − 1 of the growing members
        return sum(sum(1 for t in range(now[i], now[i] + rounds) if t % B == 0)
                   for i in growing)

    assert stream.block_needs() == new_blocks(1)
    for rounds in range(3 * B + 2):
        assert stream.blocks_over(rounds) == new_blocks(rounds)
    if growing:
        free = int(rng.integers(0, 30))
        best = max(r for r in range(40 * B + 2) if new_blocks(r) <= free)
        assert stream.rounds_within(free) == best


# ----------------------------------------------------------------------------- routing

def test_several_replicas_are_validated_under_every_router():
    inst = sessions(kv=6000, replicas=2)
    for router in ("round-robin", "least-outstanding-tokens", "most-free-memory"):
        validated(inst, "vllm-v1", router=router)


# ----------------------------------------------------------------------------- refusals

def test_what_cannot_run_with_a_cache_is_refused():
    pang = instance_from_mapping({
        "name": "p", "model": "pang-llama65b-ascend8",
        "system": {"clients": 2, "prefix_caching": True, "max_prefill_tokens": 4096},
        "requests": [{"id": "a", "input_tokens": 50, "output_tokens": 5}]})
    with pytest.raises(InstanceError, match="prefix_caching"):
        replay(pang, "baseline")
    from llmopt.problems.api import solve
    with pytest.raises(InstanceError, match="prefix_caching"):
        solve(sessions(n=4), "infermax-csp")


# ----------------------------------------------------------------------------- the validator

def _solution(inst, policy="vllm-v1"):
    result, _ = validated(inst, policy)
    sol = result.to_dict(inst)
    seg = pd.DataFrame(sol["segments"])
    return sol, seg


def _with(sol, seg):
    return {**sol, "segments": seg.to_dict("records")}


def test_validator_rejects_a_tampered_hit():
    inst = sessions(kv=20000)
    sol, seg = _solution(inst)
    hits = seg.index[seg["phase"] == "hit"]
    k = hits[0]
    rid, start = seg.loc[k, "request"], seg.loc[k, "start_ms"]
    chunk = seg.index[(seg["request"] == rid) & (seg["start_ms"] == start)
                      & (seg["phase"] == "prefill")][0]
    # one more block claimed cached, one block less computed: the token counts still add up
    tampered = seg.copy()
    tampered.loc[k, "tokens"] += 16
    tampered.loc[chunk, "tokens"] -= 16
    reasons = validate_solution(inst, _with(sol, tampered))
    assert any("hit" in r for r in reasons), reasons
    # a hit where nothing was computed before
    first = seg.index[seg["phase"] == "prefill"][0]
    fake = seg.loc[[first]].assign(phase="hit", end_ms=seg.loc[first, "start_ms"], tokens=16)
    forged = seg.copy()
    forged.loc[first, "tokens"] -= 16
    forged = pd.concat([fake, forged], ignore_index=True)
    reasons = validate_solution(inst, _with(sol, forged))
    assert any("computed before" in r for r in reasons), reasons


def test_validator_rejects_a_wrong_hit_rate_and_hits_without_a_cache():
    inst = sessions(kv=20000)
    sol, _ = _solution(inst)
    wrong = {**sol, "metrics": {**sol["metrics"], "prefix_hit_rate_tokens":
                                sol["metrics"]["prefix_hit_rate_tokens"] + 0.01}}
    assert any("prefix_hit_rate_tokens" in r for r in validate_solution(inst, wrong))
    off = inst.with_system(prefix_caching=False)
    reasons = validate_solution(off, {**sol, "instance_sha256": off.sha256})
    assert any("without a prefix cache" in r for r in reasons), reasons


def test_validator_counts_shared_blocks_once_and_no_more():
    # the twins fit 1200 KVs only by sharing; the same schedule on 1000 does not fit
    inst = twins(True)
    sol, _ = _solution(inst)
    small = inst.with_system(kv_capacity=900)
    reasons = validate_solution(small, {**sol, "instance_sha256": small.sha256})
    assert any("KV blocks held" in r for r in reasons), reasons


def conversations(replicas: int = 4):
    """Three conversations of four turns, each turn's prompt the conversation so far: dealt
    in turn to four replicas, no turn lands where the one before ran."""
    requests = []
    for t in range(4):
        for s in range(3):
            prompt = 1024 + 512 * t
            requests.append({"id": f"s{s}t{t}", "input_tokens": prompt, "output_tokens": 50,
                             "arrival_ms": 5000.0 * t + 10.0 * s, "hash_block_tokens": 16,
                             "hash_ids": [s * 1000 + j for j in range(prompt // 16)]})
    return instance_from_mapping({
        "name": "conversations", "model": PROFILE,
        "system": {"clients": 8, "kv_capacity": 40000, "max_batch_tokens": 4096,
                   "prefix_caching": True, "instances": replicas},
        "requests": requests})


def test_prefix_affinity_beats_round_robin_by_construction():
    inst = conversations()
    rr = validated(inst, "vllm-v1", router="round-robin")[1]
    pa = validated(inst, "vllm-v1", router="prefix-affinity")[1]
    assert rr.metrics()["prefill_tokens_saved"] == 0
    # every later turn finds its conversation so far: 1024 + 512 (t − 1) + ... tokens
    assert pa.metrics()["prefill_tokens_saved"] == 3 * sum(1024 + 512 * t for t in range(3))
    assert pa.metrics()["ttft_mean_ms"] < rr.metrics()["ttft_mean_ms"]
    placed = pa.requests.set_index(pa.requests["request"].astype(str))["instance"]
    for s in range(3):
        assert len({placed[f"s{s}t{t}"] for t in range(4)}) == 1


def test_prefix_affinity_load_guard_sends_to_the_least_loaded():
    from llmopt.policies.routing import PrefixAffinity

    class View:
        def __init__(self, load, hit):
            self.outstanding_tokens, self.hit, self.I = load, hit, [1000]

        def prefix_hit(self, i):
            return self.hit

    router = PrefixAffinity()
    # affine replica 1 (hit 800) with 3000 outstanding tokens vs 900 on replica 0: 3000 >
    # 2 × 900 + 1000, so the least loaded takes it; at 2800 it stays affine
    assert router.route(0, 0.0, [View(900, 0), View(3000, 800)]) == 0
    assert router.route(0, 0.0, [View(900, 0), View(2800, 800)]) == 1
    # without hits anywhere: the least loaded
    assert router.route(0, 0.0, [View(900, 0), View(100, 0)]) == 1


# ----------------------------------------------------------------------------- bounds

def test_the_cache_aware_work_bound_holds_and_the_plain_one_does_not():
    from llmopt.problems.api import bounds

    broken = 0
    for inst in (sessions(kv=20000), sessions(kv=6000, replicas=4), twins(True),
                 conversations(replicas=1)):
        found = {b.name: b for b in bounds(inst, 5)}
        cached, plain = found["infermax_work_cached"], found["infermax_work"]
        assert cached.holds_with_prefix_cache and not plain.holds_with_prefix_cache
        assert "infermax_csp" not in found  # the CSP models no cache
        for policy in ("vllm-v1", "sarathi"):
            for router in ((None, "prefix-affinity") if inst.system.instances > 1 else (None,)):
                makespan = validated(inst, policy, router=router)[1].makespan_ms
                assert cached.value_ms <= makespan + 1e-6
                broken += plain.value_ms > makespan + 1e-6
    assert broken  # a cached replay beats the bound that computes every prompt token


def test_compare_measures_cached_replays_against_the_cache_aware_bound_only():
    from llmopt.problems.workflows.compare import compare
    from llmopt.report.compare import comparison_markdown

    inst = sessions(kv=20000)
    comparison = compare(inst, ["vllm-v1", "sarathi"], optimize=False)
    assert comparison.best_bound.name == "infermax_work_cached"
    assert (comparison.table["gap_to_bound"] >= 0).all()
    assert "not with a prefix cache" in comparison_markdown(comparison)


@pytest.mark.parametrize("seed", range(30))
def test_attention_spared_is_the_brute_force_maximum(seed):
    import itertools

    from llmopt.problems.infermax.bounds import _most_attention_spared

    rng = np.random.default_rng(seed)
    reach = rng.integers(0, 4, int(rng.integers(1, 5)))
    budget = int(rng.integers(0, reach.sum() + 2))
    best = max(sum(16 * 16 * (2 * r * t - t * t) for r, t in zip(reach, ts, strict=True))
               for ts in itertools.product(*(range(r + 1) for r in reach))
               if sum(ts) <= budget)
    assert _most_attention_spared(reach, 16, budget) == best


def test_the_slo_ceiling_holds_with_a_prefix_cache():
    """The cached Mooncake sample: the ceiling counts only the prompt tokens no cache can
    supply, so it is above the one without a cache, and no policy exceeds it (the property
    on random instances is in tests/test_slo_ceiling.py)."""
    from llmopt.problems.slo_ceiling.ceiling import attainment_ceiling
    from llmopt.schedule.metrics import request_latencies

    inst = load_instance(TOY / "slo-mooncake-sample-cached.yaml")
    ceiling = attainment_ceiling(inst, time_limit_s=30)
    uncached = attainment_ceiling(inst.with_system(prefix_caching=False), time_limit_s=30)
    assert ceiling.met_max > uncached.met_max      # 195 and 149 of 300 (docs/guide.md)
    assert "prefix cache" in ceiling.proof and "prefix caching" in ceiling.valid_under
    for policy in ("vllm-v1", "sarathi"):
        met = request_latencies(replay(inst, policy), inst)["slo_met"].sum()
        assert met <= ceiling.met_max


def test_the_router_sweep_file_reads():
    from conftest import ROOT
    from llmopt.sweep.spec import load_sweep

    sweep = load_sweep(ROOT / "instances" / "sweeps" / "prefix-routing.yaml")
    assert len(sweep.cells) == 2 * 3 * 2
    assert {c.params["router"] for c in sweep.cells} == {"round-robin",
                                                       "least-outstanding-tokens",
                                                       "prefix-affinity"}
    assert "prefix_hit_rate_tokens" in sweep.metrics
