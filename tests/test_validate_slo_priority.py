"""The validator on SLO-aware priority-mapping solutions (Huang et al. 2025): every solver's
answer passes, tampering is caught, and on up to 6 requests every claim is held against the
validator's own enumeration of orders and batch splits."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from conftest import TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.errors import InstanceError
from llmopt.problems.api import solve
from llmopt.validate import check_solution, validate_solution
from llmopt.validate.slo_priority import _Times


def random_instance(seed: int, n: int = 5, max_batch: int = 2, instances: int = 1):
    rng = np.random.default_rng(seed)
    requests = []
    for k in range(n):
        chat = bool(rng.integers(0, 2))
        requests.append({"id": f"r{k}", "input_tokens": int(rng.integers(20, 400)),
                         "output_tokens": int(rng.integers(2, 300)),
                         "slo_class": "chat" if chat else "code"})
    return instance_from_mapping({
        "name": f"huang-{seed}", "model": "huang-qwen25-7b-v100x2",
        "system": {"clients": max_batch, "instances": instances}, "requests": requests,
        "slo": {"classes": [{"name": "chat", "share": 0.5, "ttft_ms": 3000, "tpot_ms": 20},
                            {"name": "code", "share": 0.5, "e2e_ms": 12000}]}})


def solution(inst, solver: str) -> dict:
    return json.loads(json.dumps(solve(inst, "slo-priority", solver, 20).to_dict(inst)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("solver", ["sa", "exhaustive", "cpsat"])
def test_every_solver_is_valid_and_checked_against_the_enumeration(seed, solver):
    inst = random_instance(seed)
    sol = solution(inst, solver)
    verdict = check_solution(inst, sol)
    assert verdict.reasons == []
    if sol["status"] == "optimal":
        assert any("checked independently" in note for note in verdict.notes)


def test_the_bundled_instance_is_valid_for_every_solver():
    inst = load_instance(TOY / "huang-chat-code.yaml")
    for solver in ("sa", "cpsat"):
        assert validate_solution(inst, solution(inst, solver)) == []


def tamper(sol: dict, how: str) -> dict:
    bad = copy.deepcopy(sol)
    if how == "swap-batches":  # the same requests, other batches: other times
        bad["batches"] = bad["batches"][::-1]
        bad["priority"] = [x for b in bad["batches"] for x in b]
    elif how == "drop":
        bad["batches"][0] = bad["batches"][0][1:] or bad["batches"][1]
    elif how == "too-big":
        bad["batches"] = [bad["priority"]]
    elif how == "met":
        bad["requests"][0]["met"] = not bad["requests"][0]["met"]
    elif how == "objective":
        bad["objective"] *= 0.9
    elif how in ("tpot_ms", "batch", "batch_size"):
        row = next(r for r in bad["requests"] if r["tpot_ms"] is not None)
        row[how] += 1
    elif how == "g_per_s":
        bad["g_per_s"] *= 1.01
    elif how == "g_bound_per_s":
        bad["g_bound_per_s"] *= 0.99
    elif how == "rows-dropped":
        bad["requests"] = bad["requests"][:2]
    elif how == "no-rows":
        del bad["requests"]
    elif how == "slo_class":
        bad["requests"][0]["slo_class"] = "nope"
    elif how == "unmeetable":
        bad["unmeetable"] = [bad["requests"][0]["id"]]
    return bad


@pytest.mark.parametrize("how", ["swap-batches", "drop", "too-big", "met", "objective",
                                 "tpot_ms", "batch", "batch_size", "g_per_s", "g_bound_per_s",
                                 "rows-dropped", "no-rows", "slo_class", "unmeetable"])
def test_tampered_solutions_are_refused(how):
    inst = random_instance(1)
    sol = solution(inst, "exhaustive")
    assert len(sol["batches"]) >= 2
    assert validate_solution(inst, tamper(sol, how))


def test_a_false_optimality_claim_is_refused():
    """A worse decision with fields consistent with its own data (filled in by the validator's
    evaluator, so that only the claim is wrong), claimed optimal: the enumeration refutes it."""
    inst = random_instance(2)
    sol = solution(inst, "exhaustive")
    assert validate_solution(inst, sol) == []
    order = [r.id for r in inst.requests][::-1]
    index = {r.id: i for i, r in enumerate(inst.requests)}
    times = _Times(inst, sol["max_batch"])
    met, total, rows = times.evaluate([[index[x]] for x in order])
    assert met and total / met > sol["objective"] * 1.01  # really worse
    worse = dict(sol, batches=[[x] for x in order], priority=order, n_met=met,
                 total_latency_ms=total, objective=total / met, bound=total / met, gap=0.0,
                 g_per_s=1000 * met / total, g_bound_per_s=1000 * met / total,
                 requests=[{"id": x, **rows[index[x]]} for x in order])
    reasons = validate_solution(inst, worse)
    assert any("the optimum is" in r for r in reasons)
    assert not any("recomputed" in r for r in reasons)  # the data themselves are consistent


def test_the_batch_limit_is_the_instances():
    """A plan for larger batches than system.clients cannot run on the instance; one for
    smaller batches is a plan, but not the instance's optimum; and the problem is for one model
    instance."""
    inst = random_instance(1, max_batch=2)
    wide = json.loads(json.dumps(solve(inst, "slo-priority", "sa", 20,
                                       max_batch=4).to_dict(inst)))
    assert any("above the instance's system.clients = 2" in r
               for r in validate_solution(inst, wide))
    narrow = json.loads(json.dumps(solve(inst, "slo-priority", "exhaustive", 20,
                                         max_batch=1).to_dict(inst)))
    assert narrow["status"] == "optimal"
    assert any("not for the instance's system.clients = 2" in r
               for r in validate_solution(inst, narrow))
    assert validate_solution(inst, dict(narrow, status="feasible", bound=None, gap=None,
                                        g_bound_per_s=None)) == []
    with pytest.raises(InstanceError, match=r"system\.instances: value 2"):
        solve(random_instance(1, instances=2), "slo-priority", "sa", 20)
    planned = json.loads(json.dumps(solve(inst, "slo-priority", "sa", 20).to_dict(inst)))
    assert any("for one model instance" in r
               for r in validate_solution(random_instance(1, instances=2), planned))


def test_no_finite_objective_only_when_nothing_can_meet_its_slo():
    """Targets no request can meet even alone: G = 0 for every plan, proven, and t / n has no
    value; the validator accepts a missing objective then, and only then."""
    impossible = instance_from_mapping({
        "name": "imp", "model": "huang-qwen25-7b-v100x2", "system": {"clients": 2},
        "requests": [{"id": k, "input_tokens": 100, "output_tokens": 50} for k in "ab"],
        "slo": {"ttft_ms": 0.001}})
    sol = solution(impossible, "auto")
    assert sol["status"] == "optimal" and sol["objective"] is None and sol["n_met"] == 0
    verdict = check_solution(impossible, sol)
    assert verdict.reasons == [] and any("G = 0 for every plan" in n for n in verdict.notes)
    meetable = random_instance(1)
    good = solution(meetable, "sa")
    claimed = dict(good, objective=None, bound=None, gap=None)
    assert any("objective is None" in r for r in validate_solution(meetable, claimed))


def test_an_exact_clock_is_checked_against_the_coefficients():
    """CP-SAT states its clock and whether it holds every time exactly; the validator holds the
    claim against the profile's decimals (5 for Table 2: 0.00088)."""
    inst = random_instance(0)
    sol = solution(inst, "cpsat")
    assert validate_solution(inst, sol) == []
    assert sol["cpsat"]["exact_clock"] == (sol["cpsat"]["clock_decimals"] >= 5)
    for decimals, valid in ((4, False), (5, True), (6, True)):
        claimed = copy.deepcopy(sol)
        claimed["cpsat"].update(exact_clock=True, clock_decimals=decimals)
        reasons = validate_solution(inst, claimed)
        assert any("exact_clock" in r for r in reasons) != valid, reasons
