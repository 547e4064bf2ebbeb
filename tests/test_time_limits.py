"""Models too large for the memory limit or for the time left are not built: the solve keeps its
best heuristic schedule, says why, and the answer validates. Every phase (heuristics, bounds,
models, replays) stops at its deadline or on a stop signal between its units of work, keeping
what it found; these tests use expired deadlines and injected stops, never the clock."""

from __future__ import annotations

import math
import time

import pytest

from conftest import ROOT, TOY
from llmopt.backends.common import (
    MODEL_MEMORY_LIMIT_MB,
    OutOfTime,
    model_too_large,
    time_left,
)
from llmopt.backends.highs import solve_highs
from llmopt.data.instance import load_instance
from llmopt.deadline import Deadline
from llmopt.policies.replay import replay
from llmopt.problems.api import bounds, solve
from llmopt.problems.pang import binpacking, pd_original, solver_bounds
from llmopt.problems.pang.pd_competition import heuristic_plans
from llmopt.problems.pang.pd_plan import PDProblem
from llmopt.problems.workflows import compare as compare_workflow
from llmopt.problems.workflows import simulation
from llmopt.problems.workflows.simulation import ENGINE
from llmopt.progress import SILENT
from llmopt.validate import validate_solution


def test_original_formulation_too_large_keeps_the_heuristic():
    inst = load_instance(TOY / "hard-100x20.yaml")
    problem = PDProblem.from_instance(inst)
    assert pd_original.estimated_size(problem, 38) * pd_original.BYTES_PER_ELEMENT \
        > MODEL_MEMORY_LIMIT_MB * 2**20
    r = solve(inst, "pd-competition", "auto", 30, formulation="original")
    assert r.status == "feasible"
    assert any("not built" in note and "--formulation compact" in note for note in r.notes)
    assert r.objective <= min(r.data.heuristics.values()) + 1e-3
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


# --- deadlines threaded through the phases (issue 30) ---------------------------------------

EXPIRED = Deadline(0.0)  # perf_counter's zero is long past: every check says the time is up


def test_deadline_shares_the_time_left():
    assert Deadline.after(None).seconds() is None and not Deadline.after(None).passed()
    assert EXPIRED.passed() and EXPIRED.left() == 0.0
    later = Deadline(time.perf_counter() + 100.0)
    assert later.share(0.5).at <= later.at
    assert 40.0 < later.share(0.5).left() <= 50.0
    assert later.share(0.5, at_most=1.0).left() <= 1.0
    assert later.share(1.0).at == later.at                  # never past the whole
    assert EXPIRED.share(0.5, at_least=5.0).passed()        # nor revived once passed
    assert later.sooner(10.0).at == later.at - 10.0
    assert Deadline.after(None).share(0.5, at_most=2.0).left() <= 2.0


def hard_problem():
    inst = load_instance(TOY / "hard-100x20.yaml")
    return inst, PDProblem.from_instance(inst)


def test_heuristic_phase_starts_no_replay_after_its_deadline(monkeypatch):
    inst, problem = hard_problem()
    monkeypatch.setattr(binpacking, "_REPRODUCIBLE", {})  # offline/hybrid: no known packing
    found = heuristic_plans(inst, problem, "stage", EXPIRED, grid_time_s=0.1,
                            simulation=ENGINE)
    replayed = {p.source for _, p in found.plans} - {p.source for _, p in found.plans
                                                     if p.source.startswith("grid")}
    assert replayed == {"replay baseline"}                   # the first unit always runs
    assert found.skipped == ["online", "iteration", "offline", "hybrid"]
    assert not found.interrupted and "skipped" in found.note()
    everything = heuristic_plans(inst, problem, "stage", grid_time_s=0.1,
                                 simulation=ENGINE)
    assert not everything.skipped and len(everything.plans) == 6


def test_offline_policies_wait_for_their_bin_packing_within_the_deadline(monkeypatch):
    inst, _ = hard_problem()
    bp = binpacking.BinPacking.from_instance(inst)
    monkeypatch.setattr(binpacking, "_REPRODUCIBLE", {})
    assert binpacking.reproducible_assignment_by(bp, 0.0) is None   # needs a search: cut
    assign, proven = binpacking.reproducible_assignment(bp)          # no deadline: finished
    again = binpacking.reproducible_assignment_by(bp, 0.0)           # known now: no search
    assert again is not None and (again[0] == assign).all() and again[1] == proven
    again[0][:] = -1                                                  # a copy each time
    assert (binpacking.reproducible_assignment(bp)[0] == assign).all()


def test_a_stop_in_the_heuristic_phase_keeps_the_plans_found(monkeypatch):
    """Ctrl-C (or SIGTERM) during the third replay: the two plans found are kept, nothing
    else runs (no bin packing, no model), and the answer is written from the best."""
    inst, _ = hard_problem()
    calls = []

    def replay_then_stop(instance, policy, **kwargs):
        calls.append(policy)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return replay(instance, policy, **kwargs)

    monkeypatch.setattr(simulation, "replay", replay_then_stop)
    r = solve(inst, "pd-competition", "auto", 60)
    assert r.interrupted and r.status == "feasible"
    assert calls[:3] == ["baseline", "online", "iteration"]
    assert set(r.data.heuristics) == {"baseline", "online"}
    assert r.objective == pytest.approx(min(r.data.heuristics.values()), abs=1e-3)
    assert "K_max = not computed" in r.notes[0]
    assert any("interrupted during the heuristic plans" in n for n in r.notes)
    assert validate_solution(inst, r.to_dict(inst)) == []


def test_a_stop_before_any_heuristic_plan_writes_nothing(monkeypatch):
    inst, _ = hard_problem()

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(simulation, "replay", stop)
    with pytest.raises(KeyboardInterrupt):
        solve(inst, "pd-competition", "auto", 60)


def test_solver_bounds_do_not_build_a_model_too_large():
    """The LP relaxation of eqs 1–25 on hard-100x20 at K_max = 52 has 5.9 million variables and
    constraints (about 5 GB): ``llmopt bound`` used to build it."""
    _, problem = hard_problem()
    assert pd_original.estimated_size(problem, 52) * pd_original.BYTES_PER_ELEMENT \
        > MODEL_MEMORY_LIMIT_MB * 2**20
    assert solver_bounds._lp_bound(problem, 52, solver_bounds.SIZE_LIMIT, Deadline(),
                                   SILENT) is None
    assert solver_bounds._lp_bound(problem, 52, solver_bounds.SIZE_LIMIT, EXPIRED,
                                   SILENT) is None


def test_bounds_of_an_online_instance_skip_the_pd_models():
    """azure-sample has arrivals after 0: the PD-competition models do not apply, the
    closed-form bounds do (``llmopt bound`` used to fail with exit 2)."""
    inst = load_instance(TOY / "azure-sample.yaml")
    names = [b.name for b in bounds(inst, 5.0)]
    assert names == ["pang_eq32", "pang_eq32_levels", "pd_replay_rounds"]


def test_compare_replays_no_policy_after_its_deadline(monkeypatch):
    inst = load_instance(TOY / "pd-tiny.yaml")
    monkeypatch.setattr(compare_workflow.Deadline, "after", classmethod(lambda cls, s: EXPIRED))
    comp = compare_workflow.compare(inst, ["baseline", "online", "hybrid"], 60.0)
    assert list(comp.table["schedule"]) == ["baseline", "pd-competition"]
    assert any("not replayed: online, hybrid" in note for note in comp.notes)
    assert comp.best_bound is not None   # the closed-form bounds, at once


def test_model_building_stops_at_its_deadline(caplog):
    """The original MIP checks its deadline inside its largest constraint families (no error
    logged by Pyomo); HiGHS is not started once the time is up after loading."""
    inst = load_instance(TOY / "gsm8k-small.yaml")
    problem = PDProblem.from_instance(inst)
    with pytest.raises(OutOfTime):
        pd_original.build(problem, 22, deadline=EXPIRED.at)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    small = pd_original.build(load_pd_tiny(), 2)
    with pytest.raises(OutOfTime):
        solve_highs(small, time_limit_s=10.0, deadline=EXPIRED.at)


def load_pd_tiny() -> PDProblem:
    return PDProblem.from_instance(load_instance(TOY / "pd-tiny.yaml"))
