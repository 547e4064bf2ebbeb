"""The PD-competition replay engine: hand-checked timings, validity of every policy's schedule,
bounds below every schedule, plans respected, multi-instance routing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TOY, make_instance
from llmopt.data.instance import load_instance
from llmopt.policies.registry import policy_names
from llmopt.policies.replay import replay, replay_result
from llmopt.problems.api import solve
from llmopt.problems.pang.bounds import pang_bounds
from llmopt.validate import validate_solution

POLICIES = [p for p in policy_names("pang_linear") if p != "plan"]


def prefill(tokens: int) -> float:  # the Pang profile, section V.A
    return 25 + 0.13 * tokens


def round_ms(clients: int) -> float:
    return 29 + 0.21 * clients


def test_one_client_serves_requests_back_to_back():
    inst = make_instance([3, 2], clients=1, inputs=[10, 20])
    sched = replay(inst, "baseline")
    expected = prefill(10) + 3 * round_ms(1) + prefill(20) + 2 * round_ms(1)
    assert sched.makespan_ms == pytest.approx(expected)
    req = sched.requests.set_index("request")
    assert req.loc["r0", "first_token_ms"] == pytest.approx(prefill(10) + round_ms(1))
    assert req.loc["r0", "finish_ms"] == pytest.approx(prefill(10) + 3 * round_ms(1))
    m = sched.metrics()
    busy = expected  # the single client is never idle
    assert m["utilization"] == pytest.approx(busy / expected)
    assert m["tokens_per_s"] == pytest.approx(5 / (expected / 1000))


def test_prefill_first_interrupts_decoding():
    """Two clients; r2 waits for a free client and its prefill interrupts r1's decode."""
    inst = make_instance([2, 4, 1], clients=2, inputs=[10, 10, 30])
    sched = replay(inst, "baseline")
    t = prefill(20)                      # r0 and r1 prefill together
    t += 2 * round_ms(2)                 # r0 finishes after two rounds
    t += prefill(30)                     # r2 takes client 0, r1 waits
    t += 1 * round_ms(2)                 # r1's third token and r2's only token
    t += 1 * round_ms(1)                 # r1's fourth token
    assert sched.makespan_ms == pytest.approx(t)
    seg = sched.segments
    r1 = seg[seg["request"] == "r1"]
    assert list(r1["phase"]) == ["prefill", "decode", "decode"]
    assert list(r1["tokens"]) == [10, 2, 2]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", ["quickstart", "gsm8k-small", "azure-sample", "two-clients"])
def test_every_policy_gives_a_valid_schedule(policy, name):
    inst = load_instance(TOY / f"{name}.yaml")
    result, sched = replay_result(inst, policy)
    sol = json.loads(json.dumps(result.to_dict(inst)))
    assert validate_solution(inst, sol) == []
    assert sol["objective"] == pytest.approx(sched.makespan_ms, abs=1e-3)
    assert set(sched.requests["request"]) == set(inst.ids)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 80)), min_size=1, max_size=25),
       st.integers(1, 5))
def test_replay_bound_lies_below_every_policy(requests, clients):
    inputs = [a for a, _ in requests]
    outputs = [b for _, b in requests]
    inst = make_instance(outputs, clients, inputs=inputs)
    bound = next(b for b in pang_bounds(inst, 10) if b.name == "pd_replay_rounds")
    for policy in POLICIES:
        result, _ = replay_result(inst, policy)
        assert result.objective >= bound.value_ms - 1e-6, policy
        assert validate_solution(inst, result.to_dict(inst)) == []


def test_plan_policy_follows_the_assignment_and_order(tmp_path):
    inst = load_instance(TOY / "gsm8k-small.yaml")
    sol = solve(inst, "binpacking", "auto").to_dict(inst)
    sched = replay(inst, "plan", plan=sol)
    placed = sched.segments.groupby("request")["client"].first().to_dict()
    assert placed == sol["assignment"]
    # an explicit order is followed: reverse each client's queue
    order = {}
    for rid, c in sol["assignment"].items():
        order.setdefault(c, []).append(rid)
    order = {c: ids[::-1] for c, ids in order.items()}
    sched = replay(inst, "plan", plan={**sol, "order": order})
    starts = sched.segments[sched.segments["phase"] == "prefill"].set_index("request")["start_ms"]
    for ids in order.values():
        times = [starts[r] for r in ids]
        assert times == sorted(times)


def test_offline_policy_uses_the_bin_packing_assignment():
    inst = load_instance(TOY / "quickstart.yaml")
    sol = solve(inst, "binpacking", "auto").to_dict(inst)
    sched = replay(inst, "offline")
    placed = sched.segments.groupby("request")["client"].first().to_dict()
    loads = {}
    for rid, c in placed.items():
        loads[c] = loads.get(c, 0) + next(r.output_tokens for r in inst.requests if r.id == rid)
    assert max(loads.values()) * 29.84 == pytest.approx(sol["objective"])


def test_two_model_instances_share_the_work():
    inst = make_instance([50] * 12, clients=2, instances=2)
    for policy in ("baseline", "hybrid"):
        result, sched = replay_result(inst, policy)
        assert set(sched.segments["instance"]) == {0, 1}
        assert validate_solution(inst, result.to_dict(inst)) == []
    # twice the capacity: the same work takes half the decode rounds
    single = replay(make_instance([50] * 12, clients=2), "baseline").makespan_ms
    double = replay(inst, "baseline").makespan_ms
    assert double < 0.6 * single


def test_lagrangian_rule_gathers_prompts_into_fewer_prefill_stages():
    inst = load_instance(TOY / "gsm8k-small.yaml")
    eager = replay(inst, "baseline").iterations
    lagr = replay(inst, "iteration").iterations
    assert (lagr["phase"] == "prefill").sum() < (eager["phase"] == "prefill").sum()


def test_kv_admission_respects_the_capacity():
    inst = make_instance([100] * 6, clients=6, inputs=[100] * 6, kv_capacity=450)
    result, sched = replay_result(inst, "baseline")
    assert sched.iterations["kv_tokens"].max() <= 450
    assert validate_solution(inst, result.to_dict(inst)) == []
    # two requests (400 KV tokens reserved) fit at a time
    assert sched.iterations["batch_size"].max() == 2
