"""The cluster: replicas advance interleaved on one clock, routers see live replica state, and
the fast path (runs of identical decode iterations) changes nothing for any policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.policies.registry import policy_names
from llmopt.policies.replay import deployment, replay, replay_result
from llmopt.policies.routing import LeastOutstandingTokens
from llmopt.sim.cluster import simulate
from llmopt.validate import validate_solution

PROFILE = "infermax-llama2-7b-a100"


def skewed(n=64, replicas=4):
    """Every fourth request is long: round-robin sends all of them to replica 0."""
    rng = np.random.default_rng(7)
    requests = []
    for k in range(n):
        long = k % replicas == 0
        requests.append({"id": f"r{k}", "input_tokens": 1500 if long else 60,
                         "output_tokens": 600 if long else int(rng.integers(20, 60)),
                         "arrival_ms": float(40 * k)})
    return instance_from_mapping({
        "name": "skewed", "model": PROFILE,
        "system": {"clients": 8, "kv_capacity": 6000, "max_batch_tokens": 4096,
                   "instances": replicas},
        "requests": requests})


def test_a_live_state_router_beats_round_robin_on_a_skewed_instance():
    inst = skewed()
    results = {router: replay_result(inst, "sarathi", router=router)
               for router in ("round-robin", "least-outstanding-tokens")}
    for result, _ in results.values():
        assert validate_solution(inst, result.to_dict(inst)) == []
    rr = results["round-robin"][1].metrics()
    lot = results["least-outstanding-tokens"][1].metrics()
    assert lot["makespan_ms"] < 0.8 * rr["makespan_ms"]
    assert lot["e2e_mean_ms"] < rr["e2e_mean_ms"]
    # round-robin really did pile the long requests onto one replica
    placed = results["round-robin"][1].requests.set_index("request")["instance"]
    assert set(placed[[f"r{k}" for k in range(0, 64, 4)]]) == {0}


class Watching:
    """A router that records, at every arrival, where each replica's clock stands."""

    name = "watching"

    def __init__(self, inner):
        self.inner, self.seen = inner, []
        self.reads_state = inner.reads_state

    def route(self, request, now, replicas):
        self.seen.append((now, [(r.last_start, r.t, r.n_running) for r in replicas]))
        return self.inner.route(request, now, replicas)


@pytest.mark.parametrize("inner", [LeastOutstandingTokens])
def test_replicas_interleave_in_time(inner):
    # a request routed at t by a router that reads state sees every replica at t: none has
    # started an iteration after t, and each busy one is in the iteration in flight at t
    inst = skewed()
    chosen = deployment(inst, "sarathi")
    chosen.router = watching = Watching(inner())
    simulate(inst, chosen)
    busy_elsewhere = 0
    for now, states in watching.seen:
        for last_start, _, _ in states:
            assert last_start <= now + 1e-9
        busy_elsewhere += sum(1 for _, t, running in states if running and t > now)
    assert busy_elsewhere > len(watching.seen)  # replicas really run side by side


def assert_same_schedule(a, b):
    key = ["instance", "client", "start_ms", "request", "phase"]
    seg_a = a.segments.astype({"request": str, "phase": str}).sort_values(key)
    seg_b = b.segments.astype({"request": str, "phase": str}).sort_values(key)
    pd.testing.assert_frame_equal(seg_a.reset_index(drop=True), seg_b.reset_index(drop=True))
    pd.testing.assert_frame_equal(a.iterations, b.iterations)
    pd.testing.assert_frame_equal(a.requests, b.requests)


@pytest.mark.parametrize("policy", [p for p in policy_names("pang_linear") if p != "plan"])
@pytest.mark.parametrize("name", ["gsm8k-small", "azure-sample", "two-clients"])
def test_pd_fast_path_equals_iteration_by_iteration(policy, name):
    inst = load_instance(TOY / f"{name}.yaml")
    assert_same_schedule(replay(inst, policy), replay(inst, policy, fast=False))


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "rank-o", "evict-short"])
def test_multi_replica_fast_path_equals_iteration_by_iteration(policy):
    inst = skewed()
    for router in ("round-robin", "least-outstanding-tokens"):
        assert_same_schedule(replay(inst, policy, router=router),
                             replay(inst, policy, router=router, fast=False))
