"""Models too large for the memory limit or for the time left are not built: the solve keeps its
best heuristic schedule, says why, and the answer validates."""

from __future__ import annotations

import math
import time

from conftest import ROOT, TOY
from llmopt.backends.common import MODEL_MEMORY_LIMIT_MB, model_too_large, time_left
from llmopt.data.instance import load_instance
from llmopt.problems.api import solve
from llmopt.problems.pang import pd_original
from llmopt.problems.pang.pd_plan import PDProblem
from llmopt.validate import validate_solution


def test_original_formulation_too_large_keeps_the_heuristic():
    inst = load_instance(TOY / "hard-100x20.yaml")
    problem = PDProblem.from_instance(inst)
    assert pd_original.estimated_size(problem, 38) * pd_original.BYTES_PER_ELEMENT \
        > MODEL_MEMORY_LIMIT_MB * 2**20
    r = solve(inst, "pd-competition", "auto", 30, formulation="original")
    assert r.status == "feasible"
    assert any("not built" in note and "--formulation compact" in note for note in r.notes)
    assert r.objective <= min(r.data["heuristics"].values()) + 1e-3
    assert validate_solution(inst, r.to_dict(inst)) == []


def test_a_model_that_cannot_be_built_in_time_is_not_started():
    assert model_too_large(10, "m", "advice", "v") is None
    late = model_too_large(10, "m", "advice", "v", build_s=5.0,
                           deadline=time.perf_counter() + 1.0)
    assert late is not None and "to build" in late.message and late.solution is None
    huge = model_too_large(MODEL_MEMORY_LIMIT_MB + 1, "m", "advice", "v")
    assert huge is not None and "GB" in huge.message


def test_csp_time_limit_counts_the_model_building(write_yaml):
    trace = ROOT / "instances" / "real" / "azure2023-conv-sample.csv"
    inst = load_instance(write_yaml(
        "name: im10\nmodel: infermax-llama3-70b-4xa100\n"
        "system: {clients: 256, kv_capacity: 20000, max_batch_tokens: 16384}\n"
        f"requests: {{trace: {trace}, format: azure, limit: 10}}\n"))
    r = solve(inst, "infermax-csp", "auto", 2.0)  # 848 batches: built, then little time left
    assert r.status == "feasible"
    assert validate_solution(inst, r.to_dict(inst)) == []


def test_the_solver_gets_the_time_left_after_building_minus_a_reserve():
    now = time.perf_counter()
    assert time_left(now - 1.0, 20.0) is None            # built after the deadline
    left = time_left(now + 10.0, 20.0)                   # reserve: a tenth of 20 s
    assert left is not None and 7.0 < left < 8.0 + 1e-3
    left = time_left(now + 10.0, 200.0)                  # reserve capped at 5 s
    assert left is not None and 4.0 < left <= 5.0 + 1e-3
    assert time_left(math.inf, math.inf) == math.inf     # no limit


def test_binpacking_model_over_the_memory_limit_returns_the_start(monkeypatch):
    inst = load_instance(TOY / "hard-100x20.yaml")
    quick = solve(inst, "binpacking", "heuristic")
    monkeypatch.setattr("llmopt.backends.common.MODEL_MEMORY_LIMIT_MB", 100)
    for solver in ("highs", "cpsat"):
        r = solve(inst, "binpacking", solver, 10)
        assert r.status == "feasible" and r.objective == quick.objective, solver
        assert any("not built" in note for note in r.notes), r.notes
        assert validate_solution(inst, r.to_dict(inst)) == []
