"""The validator on SCLS batching solutions: every solver's answer passes, every tampering is
caught, and an optimality claim is held against the validator's own enumeration."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.problems.api import solve
from llmopt.validate import check_solution, validate_solution


def small_pool(seed: int = 0):
    lengths = [10, 12, 300, 700, 40, 1024, 15, 90][: 8 - seed % 2]
    return instance_from_mapping({
        "name": "scls-small", "model": "scls-llama2-13b-a100", "system": {"clients": 1},
        "requests": [{"id": f"q{k}", "input_tokens": n, "output_tokens": 100}
                     for k, n in enumerate(lengths)]})


def solution(inst, solver: str, **options) -> dict:
    result = solve(inst, "scls-batching", solver, 20, **options)
    return json.loads(json.dumps(result.to_dict(inst)))


@pytest.mark.parametrize("solver", ["dp", "cpsat", "brute"])
def test_every_solver_is_valid_and_the_optimum_is_rechecked(solver):
    inst = small_pool()
    sol = solution(inst, solver)
    verdict = check_solution(inst, sol)
    assert verdict.reasons == []
    assert sol["status"] == "optimal"
    # 8 requests: the claim was held against the validator's own optimum, not taken on trust
    assert not any("not independently checked" in note for note in verdict.notes)


def test_a_batch_size_limit_is_recorded_and_checked():
    inst = small_pool()
    capped = solution(inst, "dp", max_size=2)
    assert capped["max_size"] == 2 and validate_solution(inst, capped) == []
    assert all(b["size"] <= 2 for b in capped["batches"])
    # the same batches claimed without the limit are not the optimum any more
    uncapped = dict(capped, max_size=None)
    assert any("optim" in r or "bound" in r for r in validate_solution(inst, uncapped))


def tamper(sol: dict, how: str) -> dict:
    bad = copy.deepcopy(sol)
    first = bad["batches"][0]
    if how == "serve_ms":
        first["serve_ms"] += 5.0
    elif how == "missing":
        first["requests"] = first["requests"][1:] or bad["batches"][1]["requests"]
    elif how == "pad":
        first["pad_tokens"] += 1
    elif how == "objective":
        bad["objective"] -= 100.0
    elif how == "kv_gib":
        first["kv_gib"] /= 2
    elif how == "max_batch":
        first["max_batch"] += 1
    elif how == "merge":  # every request in one batch: over the memory limit of eqs 5-9
        ids = [i for b in bad["batches"] for i in b["requests"]]
        bad["batches"] = [dict(first, requests=ids, size=len(ids))]
    return bad


@pytest.mark.parametrize("how", ["serve_ms", "missing", "pad", "objective", "kv_gib",
                                 "max_batch"])
def test_tampered_solutions_are_refused(how):
    inst = small_pool()
    sol = solution(inst, "dp")
    assert validate_solution(inst, tamper(sol, how))


def test_a_batch_over_the_memory_limit_is_refused():
    inst = load_instance(TOY / "scls-fig11.yaml")
    sol = solution(inst, "dp")
    heavy = instance_from_mapping({
        "name": "scls-heavy", "model": "scls-llama2-13b-a100", "system": {"clients": 1},
        "requests": [{"id": f"h{k}", "input_tokens": 1024, "output_tokens": 10}
                     for k in range(80)]})
    merged = solution(heavy, "dp")
    assert validate_solution(heavy, merged) == []
    reasons = validate_solution(heavy, tamper(merged, "merge"))
    assert any("do not fit" in r for r in reasons)
    assert validate_solution(inst, sol) == []
