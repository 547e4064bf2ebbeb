"""slo-priority plans served on the simulation core (Huang et al. 2025): the bilinear predictor
mapped onto iterations (eqs 14-15), static batches in priority order, the continuous FCFS
baseline (the paper's vLLM), G of a replayed schedule, Algorithm 2 on one cluster clock, the
validator's timing of bilinear iterations, the CLI, bad plans. Expected values are written out
from the paper's equations and Table 2's coefficients (read from the profile file), iteration
by iteration, never taken from the code under test."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from conftest import ROOT, TOY
from llmopt.data.cost import load_profile
from llmopt.data.instance import Instance, instance_from_mapping, load_instance
from llmopt.errors import InstanceError, OptionError, SolutionFileError
from llmopt.policies.replay import replay, replay_result
from llmopt.problems.slo_priority.cluster import plan_cluster
from llmopt.problems.slo_priority.model import SloPriorityData, evaluate
from llmopt.problems.slo_priority.solve import solve
from llmopt.problems.workflows.slo_priority import (
    replay_cluster_plan,
    replay_plan,
    replayed_g,
)
from llmopt.report.plot import MISSED_COLOR, gantt_figure
from llmopt.schedule.metrics import request_latencies
from llmopt.validate import validate_solution

PROFILE = "huang-qwen25-7b-v100x2"
COEF = yaml.safe_load((ROOT / "models" / f"{PROFILE}.yaml").read_text())
AP, BP, GP, DP = (COEF["prefill"][k] for k in ("alpha", "beta", "gamma", "delta"))
AD, BD, GD, DD = (COEF["decode"][k] for k in ("alpha", "beta", "gamma", "delta"))


def tp(b: float, length: float) -> float:  # eq 14
    return AP * b * length + BP * b + GP * length + DP


def tau(b: float, length: float) -> float:  # eq 15
    return AD * b * length + BD * b + GD * length + DD


def make(reqs: list[dict], clients: int, **system) -> Instance:
    return instance_from_mapping({"name": "t", "model": PROFILE,
                                  "system": {"clients": clients, **system}, "requests": reqs})


def plan_of(batches: list[list[str]]) -> dict:
    return {"problem": "slo-priority", "batches": batches}


def times(schedule, inst: Instance) -> dict[str, tuple[float, float]]:
    lat = request_latencies(schedule, inst).set_index("request")
    return {rid: (float(lat.loc[rid, "ttft_ms"]), float(lat.loc[rid, "e2e_ms"]))
            for rid in inst.ids}


# --- the mapping of eqs 14-15 onto iterations ----------------------------------------------

def test_iteration_ms_maps_eqs_14_and_15() -> None:
    p = load_profile(PROFILE)
    # a prefill of 2 prompts, 300 tokens: eq 14 at b = 2, l = 150
    assert p.iteration_ms(300, 0, 0, 0, 2) == pytest.approx(
        0.1 * 2 * 150 + 5.7 * 2 + 0.01 * 150 + 43.67, rel=1e-12)
    # 3 decodes reading 600 KVs: eq 15 at b = 3, l_a = 603 / 3 = 201
    assert p.iteration_ms(0, 3, 600, 0, 0) == pytest.approx(
        0.0002 * 3 * 201 + 0.275 * 3 + 0.00088 * 201 + 15.85, rel=1e-12)
    # mixed = the sum; empty = 0; decode_iteration_costs is the same line in K
    assert p.iteration_ms(300, 3, 600, 999, 2) == pytest.approx(
        tp(2, 150) + tau(3, 201), rel=1e-12)
    assert p.iteration_ms(0, 0, 0, 0, 0) == 0.0
    for d in (1, 2, 5):
        per_batch, per_kv = p.decode_iteration_costs(d)
        for kv in (d * 10, d * 333 + 7):
            assert per_batch + per_kv * kv == pytest.approx(p.iteration_ms(0, d, kv, 0, 0),
                                                            rel=1e-12)
    # equal prompts reproduce eq 14 per request
    assert p.iteration_ms(4 * 250, 0, 0, 0, 4) == pytest.approx(p.prefill_ms(4, 250), rel=1e-12)


# --- static batches against the model ------------------------------------------------------

def random_requests(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    reqs = []
    for k in range(n):
        r = {"id": f"r{k}", "input_tokens": rng.randint(50, 700),
             "output_tokens": rng.randint(2, 300)}
        if k % 2:
            r["e2e_slo_ms"] = float(rng.choice([3000, 8000, 15000]))
        else:
            r["ttft_slo_ms"] = float(rng.choice([1000, 4000, 9000]))
            r["tpot_slo_ms"] = rng.choice([16.2, 16.5, 20.0])
        reqs.append(r)
    return reqs


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_one_replay_equals_the_model(seed: int) -> None:
    reqs = random_requests(6, seed)
    inst = make(reqs, 1)
    order = list(range(6))
    random.Random(seed).shuffle(order)
    batches = [[f"r{i}"] for i in order]
    got = times(replay_plan(inst, plan_of(batches)), inst)
    data = SloPriorityData.from_instance(inst)
    ev = evaluate(data, tuple((i,) for i in order))
    start = 0.0
    for i in order:  # by hand: eqs 11, 14, 16 at b = 1, token by token
        li, lo = reqs[i]["input_tokens"], reqs[i]["output_tokens"]
        prefill = tp(1, li)
        decode = sum(tau(1, li + k) for k in range(1, lo + 1))
        e2e = start + prefill + decode
        assert ev.e2e_ms[i] == pytest.approx(e2e, rel=1e-12)
        assert ev.ttft_ms[i] == pytest.approx(start + prefill, rel=1e-12)
        ttft, e2e_replayed = got[f"r{i}"]
        assert e2e_replayed == pytest.approx(e2e, rel=1e-12, abs=1e-9)
        # the core's first token comes from the first of eq 16's l_o decodes
        assert ttft == pytest.approx(start + prefill + tau(1, li + 1), rel=1e-12, abs=1e-9)
        start = e2e
    g = replayed_g(replay_plan(inst, plan_of(batches)), inst)
    assert g.total_ms == pytest.approx(ev.total_ms, rel=1e-12)


def test_batch_of_two_by_hand() -> None:
    # batch 0 = {a: I 100, O 3; b: I 60, O 5}, batch 1 = {c: I 50, O 2}, max batch 2
    reqs = [{"id": "a", "input_tokens": 100, "output_tokens": 3, "e2e_slo_ms": 1e5},
            {"id": "b", "input_tokens": 60, "output_tokens": 5, "e2e_slo_ms": 1e5},
            {"id": "c", "input_tokens": 50, "output_tokens": 2, "e2e_slo_ms": 1e5}]
    inst = make(reqs, 2)
    t = tp(2, 80)  # one prefill iteration: b = 2, mean prompt 80
    first = {}
    for k in range(1, 4):  # a and b decode together: K = 160 + 2(k-1), l_a = (K + 2) / 2
        t += tau(2, (160 + 2 * (k - 1) + 2) / 2)
        first.setdefault("a", t)
    end_a = t
    for k in range(4, 6):  # b alone: K = 60 + k - 1
        t += tau(1, 60 + k)
    end_b = t
    t += tp(1, 50)
    t += tau(1, 51)
    first_c = t
    t += tau(1, 52)
    got = times(replay_plan(inst, plan_of([["a", "b"], ["c"]])), inst)
    assert got["a"] == pytest.approx((first["a"], end_a), rel=1e-12)
    assert got["b"] == pytest.approx((first["a"], end_b), rel=1e-12)
    assert got["c"] == pytest.approx((first_c, t), rel=1e-12)
    # the model gives b its own eq 14 and keeps b = 2 for its whole decode: it differs
    ev = evaluate(SloPriorityData.from_instance(inst), ((0, 1), (2,)))
    model_b = tp(2, 60) + sum(tau(2, 60 + k) for k in range(1, 6))
    assert ev.e2e_ms[1] == pytest.approx(model_b, rel=1e-12)
    assert abs(model_b - end_b) > 1.0


def test_fast_path_equals_iteration_by_iteration() -> None:
    inst = load_instance(TOY / "huang-chat-code.yaml")
    plan = plan_of([["chat-1", "chat-0"], ["code-3"], ["chat-3", "chat-2"],
                    ["code-0", "code-2"], ["code-1"]])
    for fast in (replay_plan(inst, plan), replay(inst, "huang-vllm")):
        slow = (replay_plan(inst, plan, fast=False) if fast.policy == "plan"
                else replay(inst, "huang-vllm", fast=False))
        a, b = times(fast, inst), times(slow, inst)
        for rid in inst.ids:
            assert a[rid] == pytest.approx(b[rid], rel=1e-12)


# --- the continuous FCFS baseline and G ----------------------------------------------------

def test_fcfs_baseline_by_hand_and_its_g() -> None:
    # max batch 2: a and b start together; when a finishes, c is prefilled alone (prefill
    # first, decodes paused), then b and c decode together until both finish
    reqs = [{"id": "a", "input_tokens": 100, "output_tokens": 3, "e2e_slo_ms": 400.0},
            {"id": "b", "input_tokens": 60, "output_tokens": 5, "ttft_slo_ms": 150.0,
             "tpot_slo_ms": 17.0},
            {"id": "c", "input_tokens": 50, "output_tokens": 2, "e2e_slo_ms": 300.0}]
    inst = make(reqs, 2)
    t = tp(2, 80)
    t += tau(2, 81)
    first_ab = t
    t += tau(2, 82) + tau(2, 83)
    end_a = t
    t += tp(1, 50)
    # b has decoded 3 (holds 63 KVs), c none (holds 50): K = 113, then 115
    t += tau(2, (113 + 2) / 2)
    first_c = t
    t += tau(2, (115 + 2) / 2)
    end = t
    schedule = replay(inst, "huang-vllm")
    got = times(schedule, inst)
    assert got["a"] == pytest.approx((first_ab, end_a), rel=1e-12)
    assert got["b"] == pytest.approx((first_ab, end), rel=1e-12)
    assert got["c"] == pytest.approx((first_c, end), rel=1e-12)
    # G by hand: a meets E2E 400? b: TTFT and TPOT; c: E2E 300
    met_a = end_a <= 400.0
    met_b = first_ab <= 150.0 and (end - first_ab) / 4 <= 17.0
    met_c = end <= 300.0
    g = replayed_g(schedule, inst)
    assert g.n_met == met_a + met_b + met_c
    assert 0 < g.n_met < 3  # the SLOs above split the requests
    assert g.total_ms == pytest.approx(end_a + 2 * end, rel=1e-12)
    assert g.g_per_s == pytest.approx(g.n_met / ((end_a + 2 * end) / 1000), rel=1e-12)


def test_toy_replays_are_valid_and_the_validator_times_bilinear_iterations() -> None:
    inst = load_instance(TOY / "huang-chat-code.yaml")
    sa = solve(inst, "sa")
    for policy in ("plan", "huang-vllm"):
        result, _ = replay_result(inst, policy,
                                  plan=sa.to_dict(inst) if policy == "plan" else None)
        sol = json.loads(json.dumps(result.to_dict(inst)))
        assert validate_solution(inst, sol) == []
    # the same schedule against a predictor whose decode step is 1 ms slower
    data = yaml.safe_load((TOY / "huang-chat-code.yaml").read_text())
    profile = dict(COEF, decode=dict(COEF["decode"], delta=COEF["decode"]["delta"] + 1.0))
    slower = instance_from_mapping(dict(data, model=profile))
    reasons = validate_solution(slower, sol)
    assert any("off the bilinear time model" in r for r in reasons), reasons


# --- Algorithm 2 on one cluster clock ------------------------------------------------------

def test_algorithm2_served_per_instance() -> None:
    reqs = random_requests(6, 7)
    inst = make(reqs, 1, instances=2, kv_capacity=2000)
    data = SloPriorityData.from_instance(inst)
    plan = plan_cluster(data, [2000, 2000])
    schedule = replay_cluster_plan(inst, plan)
    got = times(schedule, inst)
    placed = schedule.requests.set_index("request")["instance"]
    for e, (members, batches) in enumerate(zip(plan.members, plan.batches, strict=True)):
        start = 0.0
        for b in batches:  # max batch 1: each instance's requests one after another
            (j,) = b
            i = members[j]
            li, lo = reqs[i]["input_tokens"], reqs[i]["output_tokens"]
            start += tp(1, li) + sum(tau(1, li + k) for k in range(1, lo + 1))
            assert got[f"r{i}"][1] == pytest.approx(start, rel=1e-12)
            assert placed[f"r{i}"] == e
    assert replayed_g(schedule, inst).total_ms == pytest.approx(plan.total_ms, rel=1e-12)


# --- the CLI and bad plans -----------------------------------------------------------------

def test_cli_replays_a_solution_file_and_validates_it(cli, tmp_path: Path) -> None:
    toy = TOY / "huang-chat-code.yaml"
    assert cli("solve", toy, "--solver", "sa", "--out", tmp_path).exit_code == 0
    sol = tmp_path / "huang-chat-code" / "slo-priority-sa.json"
    res = cli("replay", toy, "--policy", "plan,huang-vllm", "--plan", sol, "--out", tmp_path)
    assert res.exit_code == 0, res.output
    for name in ("plan", "huang-vllm"):
        assert (tmp_path / "huang-chat-code" / f"replay-{name}.png").stat().st_size > 0
        res = cli("validate", toy, tmp_path / "huang-chat-code" / f"replay-{name}.json")
        assert res.exit_code == 0, res.output
    # a policy of another family: one line, exit 2
    res = cli("replay", toy, "--policy", "vllm", "--out", tmp_path)
    assert res.exit_code == 2 and "huang-vllm" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(("batches", "match"), [
    ([["chat-0", "nope"]], r"batches\[0\].*unknown request"),
    ([["chat-0"], ["chat-0"]], r"already in an earlier batch"),
    ([["chat-0", "code-0"]], r"6 request\(s\) of the instance in no batch"),
    ([["chat-0", "code-0", "chat-1"], ["code-1", "chat-2", "code-2"], ["chat-3", "code-3"]],
     r"batch 0 has 3 requests, more than the 2 clients"),
    ("chat-0", r"must be a non-empty list"),
])
def test_bad_plans_name_the_field(batches, match: str) -> None:
    inst = load_instance(TOY / "huang-chat-code.yaml")
    with pytest.raises(SolutionFileError, match=match):
        replay(inst, "plan", plan=plan_of(batches))


def test_memory_and_router_and_family_errors() -> None:
    data = yaml.safe_load((TOY / "huang-chat-code.yaml").read_text())
    small = instance_from_mapping(dict(data, system={"clients": 2, "kv_capacity": 1500}))
    with pytest.raises(SolutionFileError, match=r"batch 0 needs 2270 KV tokens"):
        replay(small, "plan", plan=plan_of([["code-0", "code-1"], *[
            [r] for r in small.ids if r not in ("code-0", "code-1")]]))
    with pytest.raises(InstanceError, match=r"request code-3 needs 1620 KV tokens"):
        replay(small, "huang-vllm")
    inst = load_instance(TOY / "huang-chat-code.yaml")
    with pytest.raises(OptionError, match="no router applies"):
        replay(inst, "plan", plan=plan_of([[r] for r in inst.ids]), router="round-robin")
    with pytest.raises(InstanceError, match="family bilinear"):
        replay(load_instance(TOY / "infermax-tiny.yaml"), "huang-vllm")


def test_gantt_outlines_the_requests_that_missed_their_slo() -> None:
    def outlined(ax) -> int:
        red = to_rgba(MISSED_COLOR)
        return sum(isinstance(p, Rectangle) and not p.get_fill() and p.get_edgecolor() == red
                   for p in ax.patches)

    inst = load_instance(TOY / "huang-chat-code.yaml")
    # batches by hand, the code requests last: code-1 and code-3 end beyond their 30 s E2E
    plan = plan_of([["chat-1", "chat-0"], ["chat-3", "chat-2"], ["code-0", "code-2"],
                    ["code-1", "code-3"]])
    schedule = replay_plan(inst, plan)
    lat = request_latencies(schedule, inst).set_index("request")
    assert sorted(lat.index[~lat["slo_met"]]) == ["code-1", "code-3"]
    ax = gantt_figure(inst, schedule.segments, schedule.iterations, policy="plan",
                      requests=schedule.requests)
    assert outlined(ax) == 2
    # every family with SLOs: the InferMax family's chart outlines its misses too
    other = load_instance(TOY / "slo-chat.yaml")
    replayed = replay(other, "vllm")
    missed = int((~request_latencies(replayed, other)["slo_met"]).sum())
    assert missed > 0
    assert outlined(gantt_figure(other, replayed.segments, replayed.iterations,
                                 requests=replayed.requests)) == missed
