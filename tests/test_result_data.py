"""Result.data: typed per family, written as the same solution keys (the fingerprint checks
every bundled instance's files); a plugin's plain dict still works."""

from __future__ import annotations

import pytest

from llmopt.errors import InternalError
from llmopt.policies.replay import ReplayData
from llmopt.problems.pang.binpacking import PackingData
from llmopt.result import Fields, Result


def result(data):
    return Result("p", "s", "feasible", 1.0, None, 0.0, None, "v", data=data)


def test_a_plugins_dict_is_kept_as_fields_and_written_unchanged():
    r = result({"order": ["b", "a"], "metrics": {"makespan_ms": 2.0}})
    assert r.data == Fields({"order": ["b", "a"], "metrics": {"makespan_ms": 2.0}})
    assert r.metrics == {"makespan_ms": 2.0}
    assert result({}).metrics is None


def test_metrics_of_a_schedule_and_of_a_result_without_one():
    replay = result(ReplayData(mode="continuous", metrics={"makespan_ms": 5.0}, clients=2))
    assert replay.metrics == replay.schedule_metrics() == {"makespan_ms": 5.0}
    packing = result(PackingData(0.5, {"r0": 0}, [1.0], "ceil(sum/J)", 2))
    assert packing.metrics is None
    with pytest.raises(InternalError, match="no schedule metrics"):
        packing.schedule_metrics()


def test_keys_are_the_solution_files():
    packing = PackingData(0.5, {"r0": 0, "r1": 1}, [1.0, 0.5], "mt_l2", 2)
    assert list(packing.to_json().items()) == [
        ("t_round_ms", 0.5), ("assignment", {"r0": 0, "r1": 1}), ("loads", [1.0, 0.5]),
        ("lower_bound", {"name": "mt_l2", "tokens": 2})]
    plain = ReplayData(mode="continuous", metrics={}, clients=1)
    assert list(plain.to_json()) == ["mode", "clients", "metrics"]
    routed = ReplayData(mode="continuous", metrics={}, clients=1, router="round-robin",
                        unlimited_memory=True)
    assert routed.to_json()["router"] == "round-robin"
    assert routed.to_json()["unlimited_memory"] is True
    out = result(packing).to_dict(type("I", (), {"name": "i", "sha256": "x"})())
    assert out["lower_bound"] == {"name": "mt_l2", "tokens": 2} and out["loads"] == [1.0, 0.5]


def test_no_optimal_result_without_a_proof():
    with pytest.raises(ValueError, match="without a proof"):
        Result("p", "s", "optimal", 1.0, 1.0, 0.0, None, "v")
    assert Result("p", "s", "optimal", 1.0, 1.0, 0.0, None, "v", proof="enumeration").proof
