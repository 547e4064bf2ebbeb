"""Issue 15's baselines as the papers and today's users know them: SOLA's vLLM-D, vLLM-S (vLLM
v0.4.2 chunked prefill with its whole-step token budget) and SJF (true and predicted output
lengths), and vLLM V1's scheduler. Every schedule passes the independent validator."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.registry import POLICIES, default_policies
from llmopt.policies.replay import replay, replay_result
from llmopt.policies.routing import RoundRobin
from llmopt.policies.slo.baselines import SOLA_BASELINES, V1_SCHEDULERS
from llmopt.policies.slo.vllm_v1 import VllmV1
from llmopt.result import Result
from llmopt.sim.cluster import Deployment, simulate
from llmopt.validate import validate_solution

PROFILE = "infermax-llama2-7b-a100"
NEW = [*SOLA_BASELINES, *V1_SCHEDULERS]


def make(requests, M, C=4096, clients=None, instances=1, name="t"):
    """Requests (input, output, arrival_ms) on the Llama-2-7B profile."""
    return instance_from_mapping({
        "name": name, "model": PROFILE,
        "system": {"clients": clients or len(requests), "kv_capacity": M,
                   "max_batch_tokens": C, "instances": instances},
        "requests": [{"id": f"r{k}", "input_tokens": i, "output_tokens": o, "arrival_ms": t}
                     for k, (i, o, t) in enumerate(requests)]})


def contended(seed=3, n=120, clients=20, span_ms=2000.0, instances=1):
    """Random lengths and arrivals with little KV memory: preemptions, refills, waiting."""
    rng = np.random.default_rng(seed)
    inputs, outputs = rng.integers(1, 500, n), rng.integers(1, 200, n)
    arrivals = np.sort(rng.uniform(0, span_ms, n))
    return make([(int(i), int(o), float(t))
                 for i, o, t in zip(inputs, outputs, arrivals, strict=True)],
                M=3000, C=1024, clients=clients, instances=instances, name="contended")


def validated(inst, policy, **kw):
    """Replay a registered policy; its solution must pass the validator."""
    result, sched = replay_result(inst, policy, **kw)
    reasons = validate_solution(inst, result.to_dict(inst))
    assert reasons == [], (policy, reasons[:3])
    return sched


def run_validated(inst, policy):
    """Simulate an unregistered policy object and validate its schedule as a replay."""
    t0 = time.perf_counter()
    sched = simulate(inst, Deployment(policy.name, [policy], RoundRobin()))
    result = Result(problem="replay", solver=policy.name, status="feasible",
                    objective=round(sched.metrics()["makespan_ms"], 3), bound=None,
                    runtime_s=time.perf_counter() - t0, time_limit_s=None,
                    solver_version="test", schedule=sched,
                    data={"mode": "continuous", "clients": inst.total_clients,
                          "metrics": sched.metrics()})
    reasons = validate_solution(inst, result.to_dict(inst))
    assert reasons == [], reasons[:3]
    return sched


def assert_same_schedule(a, b):
    key = ["instance", "client", "start_ms", "request", "phase"]
    seg_a = a.segments.astype({"request": str, "phase": str}).sort_values(key)
    seg_b = b.segments.astype({"request": str, "phase": str}).sort_values(key)
    pd.testing.assert_frame_equal(seg_a.reset_index(drop=True), seg_b.reset_index(drop=True))
    pd.testing.assert_frame_equal(a.iterations, b.iterations)
    pd.testing.assert_frame_equal(a.requests, b.requests)


def starts(sched, phase="prefill"):
    """Each request's first segment of ``phase`` (start_ms), in start order."""
    seg = sched.segments[sched.segments["phase"] == phase]
    return seg.groupby("request", observed=True)["start_ms"].min().sort_values()


def admissions(sched):
    """(start_ms, request) of every chunk that starts a request's run: its first prefill, or
    the first refill after an eviction."""
    seg = sched.segments.astype({"request": str, "phase": str}).sort_values(
        ["request", "start_ms", "end_ms"])
    out, prev = [], {}
    for row in seg.itertuples():
        if row.phase in ("prefill", "refill") and prev.get(row.request) in (None, "evict"):
            out.append((row.start_ms, row.request))
        prev[row.request] = row.phase
    return out


# ----------------------------------------------------------------------------- every policy

@pytest.mark.parametrize("policy", NEW)
@pytest.mark.parametrize("name", ["infermax-tiny", "infermax-azure-sample"])
def test_every_baseline_replays_the_toy_instances_validly(policy, name):
    inst = load_instance(TOY / f"{name}.yaml")
    sched = validated(inst, policy)
    assert set(sched.requests["request"]) == set(inst.ids)
    assert sched.metrics()["kv_tokens_max"] <= inst.system.kv_capacity


@pytest.mark.parametrize("policy", NEW)
def test_fast_path_equals_iteration_by_iteration(policy):
    for inst in (contended(), contended(seed=17, clients=64, span_ms=500.0),
                 load_instance(TOY / "infermax-azure-sample.yaml")):
        fast = replay(inst, policy)
        assert_same_schedule(fast, replay(inst, policy, fast=False))
        if inst.name == "contended":
            assert fast.metrics()["evictions"] > 0, policy  # the runs meet preemptions


@pytest.mark.parametrize("policy", ["vllm-v1", "sjf-predicted", "vllm-s"])
def test_multi_replica_fast_path_and_validity(policy):
    inst = contended(seed=5, n=160, clients=8, instances=3)
    for router in ("round-robin", "least-outstanding-tokens"):
        sched = validated(inst, policy, router=router)
        assert set(sched.segments["instance"]) == {0, 1, 2}
        assert_same_schedule(sched, replay(inst, policy, router=router, fast=False))


def test_registry_lists_the_baselines_with_their_papers_and_keeps_the_defaults():
    for name in SOLA_BASELINES:
        assert POLICIES[name].paper == "Hong et al. 2025 (SOLA)"
        assert POLICIES[name].family == "infermax" and POLICIES[name].mode == "continuous"
    for name in V1_SCHEDULERS:
        assert POLICIES[name].paper == "vLLM V1 (v0.11)"
    infermax = list(SCHEDULERS)  # InferMax's own
    assert default_policies("infermax", "replay") == infermax
    assert default_policies("infermax", "compare") == infermax
    assert POLICIES["sarathi"].paper == "Kim et al. 2025 (InferMax)"


# ----------------------------------------------------------------------------- SOLA's

def test_vllm_d_is_vllm():
    for inst in (contended(), load_instance(TOY / "infermax-azure-sample.yaml")):
        assert_same_schedule(validated(inst, "vllm-d"), replay(inst, "vllm"))


@pytest.mark.parametrize(("policy", "budget"), [("vllm-s", 512), ("vllm-s-1024", 1024),
                                                ("vllm-s-4096", 4096)])
def test_vllm_s_budget_counts_decodes_too(policy, budget):
    # vLLM v0.4.2's chunk size is max_num_batched_tokens: a step's tokens, decodes included
    for inst in (load_instance(TOY / "infermax-azure-sample.yaml"),
                 contended(seed=17, clients=64, span_ms=500.0)):
        it = validated(inst, policy).iterations
        total = it["prefill_tokens"] + it["decode_tokens"]
        assert total.max() <= budget
        if budget < inst.system.max_batch_tokens and inst.name != "contended":
            assert total.max() == budget  # the budget binds
        mixed = it[(it["prefill_tokens"] > 0) & (it["decode_tokens"] > 0)]
        assert len(mixed)  # chunked prefills ride with decodes (SplitFuse)
    # SARATHI's P = 512 is a prompt budget only: with the decodes its batches go beyond 512
    it = replay(load_instance(TOY / "infermax-azure-sample.yaml"), "sarathi").iterations
    assert (it["prefill_tokens"] + it["decode_tokens"]).max() > 512


def test_sjf_admits_the_shortest_output_first():
    # one slot: requests run one after another, in the order the scheduler admits them
    inst = make([(20, 10, 0.0), (20, 2, 0.0), (20, 5, 0.0), (20, 1, 0.0)], M=200,
                clients=1)
    assert list(starts(validated(inst, "sjf")).index) == ["r3", "r1", "r2", "r0"]
    assert list(starts(validated(inst, "vllm-d")).index) == ["r0", "r1", "r2", "r3"]


def test_sjf_head_of_line_blocking_applies():
    # r1 (shortest output) does not fit while r0 runs; r2 would fit but waits behind it
    inst = make([(10, 20, 0.0), (30, 1, 0.001), (2, 10, 0.002)], M=32, clients=4)
    sched = validated(inst, "sjf")
    first = starts(sched)
    finish = sched.requests.set_index("request")["finish_ms"]
    assert first["r1"] >= finish["r0"] - 1e-9
    assert first["r2"] >= first["r1"]


def test_sjf_predicted_uses_input_length_then_bucket_medians():
    # nothing finished: the prediction is the input length, so r1 (8 tokens) goes first
    inst = make([(50, 3, 0.0), (8, 30, 0.0)], M=200, clients=1)
    assert list(starts(validated(inst, "sjf-predicted")).index) == ["r1", "r0"]
    # a (I = 8, bucket 4) finishes with 30 outputs; b, c, d wait: every prediction is 30
    # (b and d by the fallback), so b goes first by arrival; b (I = 100, bucket 7) finishes
    # with 2 outputs: d (I = 110, bucket 7) is now predicted 2 and overtakes c (bucket 4: 30)
    inst = make([(8, 30, 0.0), (100, 2, 1.0), (9, 20, 1.0), (110, 3, 1.0)], M=400,
                clients=1)
    sched = validated(inst, "sjf-predicted")
    assert list(starts(sched).index) == ["r0", "r1", "r3", "r2"]
    assert list(starts(validated(inst, "vllm-d")).index) == ["r0", "r1", "r2", "r3"]
    # the predictor never read r3's true output: with r3's output 50 the order is the same
    longer = make([(8, 30, 0.0), (100, 2, 1.0), (9, 20, 1.0), (110, 50, 1.0)], M=400,
                  clients=1)
    assert list(starts(validated(longer, "sjf-predicted")).index) == ["r0", "r1", "r3", "r2"]
    assert list(starts(validated(longer, "sjf")).index) == ["r0", "r1", "r2", "r3"]


# ----------------------------------------------------------------------------- vLLM V1

def test_v1_schedules_running_decodes_before_waiting_prefills():
    # C = 8: r0 prefills its 4 tokens alone; r1 (20-token prompt) arrives meanwhile; the next
    # step decodes r0 first and gives r1 the 7 tokens left, and so on
    inst = make([(4, 5, 0.0), (20, 2, 0.001)], M=100, C=8)
    it = validated(inst, "vllm-v1").iterations
    assert list(it["prefill_tokens"][:4]) == [4, 7, 7, 6]
    assert list(it["decode_tokens"][:4]) == [0, 1, 1, 1]
    assert (it["prefill_tokens"] + it["decode_tokens"]).max() <= 8


def test_v1_token_budget_is_respected_every_step():
    inst = load_instance(TOY / "infermax-azure-sample.yaml")
    it = validated(inst, "vllm-v1").iterations
    assert (it["prefill_tokens"] + it["decode_tokens"]).max() <= 8192  # < C = 16384
    small = run_validated(contended(), VllmV1("v1-256", max_num_batched_tokens=256))
    total = small.iterations["prefill_tokens"] + small.iterations["decode_tokens"]
    assert total.max() == 256
    seqs = run_validated(contended(), VllmV1("v1-seqs", max_num_seqs=3))
    assert seqs.iterations["running"].max() <= 3


def test_v1_preempts_the_newest_and_admits_nothing_in_that_step():
    # M = 10: r0, r1, r2 start together (8 KVs); the next step's decodes need 3 of the 2 left:
    # r0 and r1 get theirs and r2, the newest, preempts itself. Two steps later r0's decode
    # finds no KV (r0 and r1 hold 5 each): r1, the newest, is preempted; 4 KVs are then free
    # and r2's refill (3 tokens) would fit, but nothing is admitted in a step that preempted.
    # Later r1, put back at the head of the queue, blocks r2 until both fit
    inst = make([(3, 6, 0.0), (3, 6, 0.0), (2, 2, 0.0)], M=10, C=64, clients=4)
    sched = validated(inst, "vllm-v1")
    it = sched.iterations
    assert list(it["evictions"][:4]) == [0, 1, 0, 1]
    evicts = sched.segments[sched.segments["phase"] == "evict"].sort_values("start_ms")
    assert list(evicts["request"].astype(str)) == ["r2", "r1"]
    assert list(it["prefill_tokens"][1:4]) == [0, 0, 0]
    assert list(it["decode_tokens"][1:4]) == [2, 2, 1]
    refill = starts(sched, "refill")
    assert refill["r2"] == refill["r1"] > evicts["start_ms"].iloc[1]


@pytest.mark.parametrize("seed", [3, 17])
def test_v1_never_admits_in_a_step_that_preempted(seed):
    inst = contended(seed=seed)
    sched = validated(inst, "vllm-v1")
    it = sched.iterations.set_index("start_ms")
    preempting = set(it.index[it["evictions"] > 0])
    assert preempting
    assert not [a for a in admissions(sched) if a[0] in preempting]


class ByKey(VllmV1):
    """vLLM V1 in priority mode with given priorities (lower runs first)."""

    def __init__(self, keys, **kw):
        super().__init__("v1-keys", priority=True, **kw)
        self.keys = np.asarray(keys, dtype=float)

    def priority_keys(self, instance):
        return self.keys


def test_v1_priority_preempts_the_lowest_priority_even_if_already_scheduled():
    # M = 10: x (low priority) runs first, y (high) joins in the next step. When KVs run
    # out, x's decode is scheduled first (running order), then y finds no KV: FCFS preempts
    # y, the newest (itself); priority mode preempts x, gives its step back, and y decodes
    inst = make([(4, 6, 0.0), (4, 6, 0.001)], M=10, C=64)
    fcfs = validated(inst, "vllm-v1")
    prio = run_validated(inst, ByKey([2, 0]))
    for sched, victim, decoding in ((fcfs, "r1", "r0"), (prio, "r0", "r1")):
        evicts = sched.segments[sched.segments["phase"] == "evict"].sort_values("start_ms")
        first = evicts.iloc[0]
        assert str(first["request"]) == victim
        seg, t = sched.segments, first["start_ms"]
        dec = seg[(seg["phase"] == "decode") & (seg["start_ms"] <= t) & (seg["end_ms"] > t)]
        assert list(dec["request"].astype(str)) == [decoding]
    # the registered variant's placeholder priority is the arrival time
    validated(inst, "vllm-v1-priority")


def test_v1_reserves_only_the_chunk_it_computes():
    # vLLM V1 allocates KVs as tokens are scheduled. M = 20, C = 8: r0 (6-token prompt)
    # starts alone; r1 (16-token prompt) arrives. In the next step r0 decodes (7 KVs) and r1
    # starts with a 7-token chunk, although its whole prompt (16) would not fit in the 13 KVs
    # left; a scheduler reserving whole prompts (vLLM-S, SARATHI) makes r1 wait
    inst = make([(6, 10, 0.0), (16, 2, 0.001)], M=20, C=8)
    v1 = validated(inst, "vllm-v1")
    it = v1.iterations
    assert starts(v1)["r1"] == it["start_ms"][1]
    assert list(it["prefill_tokens"][:2]) == [6, 7]
    assert list(it["kv_tokens"][:2]) == [6, 14]
    # its next chunk (7) does not fit beside r0's decode: r1, the newest, preempts itself,
    # is admitted again in the next step, and so on until r0 has finished (V1's recompute)
    assert v1.metrics()["evictions"] == 4
    assert starts(validated(inst, "vllm-s"))["r1"] > it["start_ms"][1]


def test_v1_priority_step_that_preempts_everything_is_followed_at_once():
    # M = 9: x (low priority, first in running order) finds no KV for its decode and is the
    # lowest priority: it preempts itself and the running loop ends with nothing scheduled
    # (vLLM runs an empty step); the next step, at the same time, decodes y
    inst = make([(4, 6, 0.0), (4, 6, 0.001)], M=9, C=64)
    sched = run_validated(inst, ByKey([2, 0]))
    it = sched.iterations
    assert list(it["evictions"][:3]) == [0, 0, 1]
    assert it["decode_tokens"][2] == 1 and it["prefill_tokens"][2] == 0
    evicts = sched.segments[sched.segments["phase"] == "evict"]
    assert list(evicts["request"].astype(str)) == ["r0"]
    assert evicts["start_ms"].iloc[0] == it["start_ms"][2]
