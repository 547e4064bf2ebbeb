"""The PD-competition problem (Pang et al. eqs 1–25): the faithful MIP, the compact models and a
brute-force enumerator of stage sequences agree on random tiny instances; plans replay to the
times they promise; the validator accepts every schedule and rejects broken timing."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from conftest import TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.policies.replay import replay
from llmopt.problems.api import solve
from llmopt.problems.pang.pd_grid import grid_plan
from llmopt.problems.pang.pd_lns import improve_plan
from llmopt.problems.pang.pd_plan import PDProblem, plan_from_schedule
from llmopt.validate import validate_solution
from llmopt.validate.pd_exact import optimal_total

PROFILE = {"family": "pang_linear", "source": "Pang et al. 2025 V.A, small level step for tests",
           "prefill": {"overhead_ms": 25, "per_token_ms": 0.13},
           "decode": {"overhead_ms": 29, "per_client_ms": 0.21}, "prefill_level_step": 32}


def stage_model_total(inp, out, clients, levels, cap, t_round, kv=None):
    """Optimum under the original MIP's stage model (level times, T_d per round)."""
    return optimal_total(inp, out, clients, cap,
                         lambda tokens: next(ms for c, ms in levels if tokens <= c), t_round, kv)


def replay_model_total(inp, out, clients, cap, prefill, decode, kv=None):
    """Optimum under the replay engine's model (prefill/decode are (overhead, per-unit))."""
    return decode[1] * sum(out) + optimal_total(
        inp, out, clients, cap, lambda tokens: prefill[0] + prefill[1] * tokens, decode[0], kv)


def tiny(seed: int, n_range=(2, 5), clients_range=(1, 4)):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(*n_range))
    clients = int(rng.integers(*clients_range))
    inp = rng.integers(5, 70, n).tolist()
    out = rng.integers(1, 9, n).tolist()
    data = {"name": f"tiny{seed}", "model": PROFILE,
            "system": {"clients": clients, "max_prefill_tokens": 128},
            "requests": [{"id": f"r{i}", "input_tokens": a, "output_tokens": b}
                         for i, (a, b) in enumerate(zip(inp, out, strict=True))]}
    return instance_from_mapping(data), inp, out, clients


def as_file(result, inst):
    return json.loads(json.dumps(result.to_dict(inst)))


@pytest.mark.parametrize("seed", range(22))
def test_faithful_compact_and_brute_force_agree(seed):
    inst, inp, out, clients = tiny(seed)
    problem = PDProblem.from_instance(inst)
    optimum = stage_model_total(inp, out, clients, problem.levels, problem.cap, problem.t_round)
    n = len(inp)
    runs = [("compact", "cpsat"), ("compact", "highs"), ("original", "highs")]
    for formulation, solver in runs:
        r = solve(inst, "pd-competition", solver, 120, formulation=formulation, bins=n)
        assert r.status == "optimal", (formulation, solver, r.notes)
        assert r.objective == pytest.approx(optimum, abs=1e-3), (formulation, solver)
        assert validate_solution(inst, as_file(r, inst)) == []


@pytest.mark.parametrize("seed", range(100, 108))
def test_compact_cpsat_matches_brute_force_on_larger_tiny_cases(seed):
    inst, inp, out, clients = tiny(seed, n_range=(5, 7))
    problem = PDProblem.from_instance(inst)
    optimum = stage_model_total(inp, out, clients, problem.levels, problem.cap, problem.t_round)
    r = solve(inst, "pd-competition", "cpsat", 120, bins=len(inp))
    assert r.status == "optimal" and r.objective == pytest.approx(optimum, abs=1e-3)


@pytest.mark.parametrize("seed", range(200, 210))
def test_replay_time_model_matches_brute_force_and_the_engine(seed):
    inst, inp, out, clients = tiny(seed, n_range=(2, 6))
    optimum = replay_model_total(inp, out, clients, 128, (25, 0.13), (29, 0.21))
    r = solve(inst, "pd-competition", "cpsat", 120, time_model="replay", bins=len(inp))
    assert r.status == "optimal"
    assert r.objective == pytest.approx(optimum, abs=1e-3)
    sol = as_file(r, inst)
    assert sol["objective_replay_ms"] == pytest.approx(r.objective, abs=1e-3)
    assert validate_solution(inst, sol) == []


def test_fewer_bins_than_k_max_is_not_called_optimal():
    inst, *_ = tiny(7, n_range=(5, 6), clients_range=(2, 3))
    r = solve(inst, "pd-competition", "cpsat", 60, bins=1)
    assert r.status == "feasible"
    assert r.bound <= r.objective


def test_literal_reading_gives_a_valid_schedule_and_no_proof():
    inst, inp, *_ = tiny(3)
    intent = solve(inst, "pd-competition", "highs", 60, formulation="original", bins=len(inp))
    literal = solve(inst, "pd-competition", "highs", 60, formulation="original",
                    bins=len(inp), literal=True)
    assert literal.status == "feasible" and literal.proof is None
    assert literal.objective >= intent.objective - 1e-6
    assert validate_solution(inst, as_file(literal, inst)) == []


def test_stage_plans_replay_to_their_promised_time():
    inst = load_instance(TOY / "gsm8k-small.yaml")
    problem = PDProblem.from_instance(inst)
    for policy in ("baseline", "hybrid"):
        plan = plan_from_schedule(problem, replay(inst, policy))
        assert plan.check(problem) == []
        again = replay(inst, "plan", plan=plan.to_data(problem))
        assert again.makespan_ms == pytest.approx(plan.total_ms(problem, "replay"))
    for G in (4, 16, 64):
        plan = grid_plan(problem, G, deadline=float("inf"))
        assert plan.check(problem) == []
        again = replay(inst, "plan", plan=plan.to_data(problem))
        assert again.makespan_ms == pytest.approx(plan.total_ms(problem, "replay"))


def test_window_lns_never_worsens_a_plan():
    import time

    inst = load_instance(TOY / "gsm8k-small.yaml")
    problem = PDProblem.from_instance(inst)
    start = plan_from_schedule(problem, replay(inst, "baseline"))
    better, interrupted = improve_plan(problem, start, "replay", time.perf_counter() + 10,
                                       window=4)
    assert not interrupted and better.check(problem) == []
    assert better.total_ms(problem, "replay") <= start.total_ms(problem, "replay") + 1e-6


def test_validator_rejects_wrong_stage_timing():
    inst, inp, *_ = tiny(11)
    r = solve(inst, "pd-competition", "cpsat", 60, bins=len(inp))
    sol = as_file(r, inst)
    assert validate_solution(inst, sol) == []
    bad = copy.deepcopy(sol)
    its = bad["iterations"]
    k = its["phase"].index("decode")
    shift = 5.0
    for col in ("start_ms", "end_ms"):
        for r2 in range(len(its[col])):
            if r2 > k or (r2 == k and col == "end_ms"):
                its[col][r2] -= shift
    for s in bad["segments"]:
        if s["start_ms"] > its["start_ms"][k] + 1e-6:
            s["start_ms"] -= shift
        if s["end_ms"] > its["start_ms"][k] + 1e-6:
            s["end_ms"] -= shift
    bad["objective"] -= shift
    bad["bound"] = min(bad["bound"], bad["objective"])
    bad["status"] = "feasible"
    bad["gap"] = (bad["objective"] - bad["bound"]) / bad["objective"]
    reasons = validate_solution(inst, bad)
    assert any("time model" in r for r in reasons), reasons
    other = dict(sol, time_model="replay")
    assert any("time model" in r for r in validate_solution(inst, other))
