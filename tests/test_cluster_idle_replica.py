"""A replica that runs nothing (every request routed elsewhere) leaves the schedule's tables
typed: the solution file is written and valid (it failed to write: ArrowTypeError on the
empty replica's untyped iteration table)."""

from __future__ import annotations

from conftest import TOY
from llmopt.data.instance import load_instance
from llmopt.policies.replay import replay_result
from llmopt.result import read_solution
from llmopt.validate import validate_solution


def test_a_replica_that_runs_nothing(tmp_path):
    inst = load_instance(TOY / "quickstart.yaml").with_system(instances=2)
    # no KV capacity: every replica has unlimited free memory, so the first takes everything
    result, schedule = replay_result(inst, "baseline", router="most-free-memory")
    assert set(schedule.segments["instance"]) == {0}
    assert schedule.iterations["start_ms"].dtype == float
    path = result.write(tmp_path / "r.json", inst)
    assert validate_solution(inst, read_solution(path)) == []
