"""The independent validator accepts produced solutions and rejects corrupted ones."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import make_instance
from llmopt.problems.api import solve
from llmopt.validate import validate_solution


@pytest.fixture(scope="module")
def case():
    inst = make_instance([310, 512, 95, 228, 447, 160, 381, 59, 276, 403], 3)
    sol = solve(inst, "binpacking", "auto", time_limit_s=20).to_dict(inst)
    assert validate_solution(inst, sol) == []
    return inst, sol


def corrupt(sol, fn):
    bad = copy.deepcopy(sol)
    fn(bad)
    return bad


def _drop_one(s):
    s["assignment"].pop("r3")


def _client_out_of_range(s):
    s["assignment"]["r0"] = 3


def _negative_client(s):
    s["assignment"]["r0"] = -1


def _unknown_request(s):
    s["assignment"]["ghost"] = 0


def _wrong_objective(s):
    s["objective"] += 71.0


def _wrong_load(s):
    s["loads"][0] += 1.0


def _bound_above_objective(s):
    s["bound"] = s["objective"] + 100
    s["gap"] = 0.0


def _optimal_without_proof(s):
    s["bound"] = s["objective"] - 100
    s["gap"] = 100 / s["objective"]


def _wrong_gap(s):
    s["gap"] = 0.5


def _other_instance(s):
    s["instance_sha256"] = "0" * 64


def _bad_status(s):
    s["status"] = "great"


def _moved_request_loads_stale(s):
    rid = next(iter(s["assignment"]))
    s["assignment"][rid] = (s["assignment"][rid] + 1) % 3


CORRUPTIONS = {
    "request dropped": (_drop_one, "not assigned"),
    "client out of range": (_client_out_of_range, "outside 0..2"),
    "negative client": (_negative_client, "outside 0..2"),
    "unknown request": (_unknown_request, "unknown request"),
    "wrong objective": (_wrong_objective, "objective"),
    "wrong load": (_wrong_load, "load"),
    "bound above objective": (_bound_above_objective, "exceeds objective"),
    "optimal without proof": (_optimal_without_proof, "no proof"),
    "wrong gap": (_wrong_gap, "gap"),
    "other instance": (_other_instance, "instance_sha256"),
    "unknown status": (_bad_status, "status"),
    "request moved, loads stale": (_moved_request_loads_stale, "load"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_validator_rejects_corrupted_solutions(case, name):
    inst, sol = case
    fn, fragment = CORRUPTIONS[name]
    reasons = validate_solution(inst, corrupt(sol, fn))
    assert reasons, name
    assert any(fragment in r for r in reasons), reasons


def test_cli_validate_exit_codes(case, cli, tmp_path):
    inst, sol = case
    inst_path = tmp_path / "inst.yaml"
    import yaml

    inst_path.write_text(yaml.safe_dump({
        "name": "test", "model": "pang-llama65b-ascend8",
        "system": {"clients": 3, "max_prefill_tokens": 4096},
        "requests": [r.model_dump() for r in inst.requests],
    }))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(sol))
    result = cli("validate", inst_path, good)
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(corrupt(sol, _drop_one)))
    result = cli("validate", inst_path, bad)
    assert result.exit_code == 1
    assert "not assigned" in result.output
