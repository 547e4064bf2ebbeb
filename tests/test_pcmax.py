"""P||Cmax bounds and bin completion (issue 13): every bound ≤ the brute-force optimum, the
solver's bounds and the validator's independent recomputation agree, bin completion decides
exactly, and the binpacking solve carries a bound certificate the validator re-checks."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_binpacking import brute_force_makespan, search_makespan

from conftest import make_instance
from llmopt.errors import OptionError
from llmopt.problems.api import solve
from llmopt.problems.pang import pcmax_arcflow, pcmax_cardinality, pcmax_search
from llmopt.problems.pang import pcmax_bounds as pb
from llmopt.validate import validate_solution
from llmopt.validate.pcmax_bounds import recompute_bound

small = st.tuples(st.lists(st.integers(1, 40), min_size=1, max_size=7), st.integers(1, 3))
medium = st.tuples(
    st.one_of(st.lists(st.integers(1, 100), min_size=1, max_size=40),
              # the non-uniform shape of Frangioni et al. 2004: near-equal long jobs, a few short
              st.lists(st.integers(90, 100), min_size=1, max_size=30).map(lambda x: [*x, 7])),
    st.integers(1, 9),
)


def bound_values(weights: list[int], machines: int) -> dict[str, int]:
    w = pb.sorted_weights(weights)
    return {name: f(w, machines) for name, f in pb.FUNCTIONS.items()}


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(small)
def test_every_bound_is_at_most_the_brute_force_optimum(case):
    weights, machines = case
    optimum = brute_force_makespan(weights, machines)
    for name, value in bound_values(weights, machines).items():
        assert value <= optimum, (name, weights, machines, value, optimum)


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(medium)
def test_solver_bounds_and_independent_recheck_agree(case):
    weights, machines = case
    for name, value in bound_values(weights, machines).items():
        assert recompute_bound(name, weights, machines) == value, name


def test_recheck_knows_no_search_proofs():
    for name in ("complete search", "highs", "cpsat", "no such bound"):
        assert recompute_bound(name, [3, 2, 1], 2) is None


# Hand-computed values (the arithmetic is in the comments, not in the code under test).

def test_pigeonhole_uses_every_prefix():
    # m = 3, p = 16 16 10 10 10: the 5 = 1·3 + 2 longest jobs leave 2 machines holding ≥ 4 of
    # them, at least the 4 shortest, 16+10+10+10 = 46, so one carries ≥ 23; the classic k·m + 1
    # prefix gives p3 + p4 = 20 and the average ceil(62/3) = 21
    w = pb.sorted_weights([10, 16, 10, 16, 10])
    assert pb.pigeonhole(w, 3) == 23
    assert pb.ceil_average(w, 3) == 21 and pb.longest(w, 3) == 16


def test_mt_l2_refutes_capacities_the_closed_forms_allow():
    # m = 2, p = 12 7 5 4: closed forms give 14 (ceil(28/2)). At C = 14, α = 4: J1 = {12}
    # (> 10), J3 = {7, 5, 4} (sum 16, no J2 room) → 1 + ceil(16/14) = 3 bins > 2; C = 15 the
    # same (J1 = {12} > 11, ceil(16/15) = 2); at C = 16 12 drops to J2 (room 4) → 1 +
    # ceil(12/16) = 2 bins. Gallop 14, 15 refuted, 17 not; bisect 16 not → 16 (= the optimum
    # {12, 4}, {7, 5}).
    w = pb.sorted_weights([12, 7, 5, 4])
    assert max(pb.ceil_average(w, 2), pb.longest(w, 2), pb.pigeonhole(w, 2)) == 14
    assert pb.l2_bins(w, 14) == 3 and pb.l2_bins(w, 16) == 2
    assert pb.mt_l2(w, 2) == 16


def test_mt_l3_reduction_closes_what_l2_leaves_open():
    # m = 2, p = 10 10 3 3 3: at C = 15 L2 needs 2 bins (J2 = {10, 10} with room 10 ≥ 9), but
    # no two 3s fit beside a 10 (3 + 3 > 5): each 10 gets the bin {10, 3}, the last 3 a third
    # bin → refuted; the same at 14 is implied; at 16 two 3s fit beside a 10 and nothing is
    # reduced. So mt_l2 = 15, mt_l3 = 16 = the optimum ({10, 3, 3}, {10, 3}).
    w = pb.sorted_weights([10, 3, 10, 3, 3])
    assert pb.mt_l2(w, 2) == 15
    assert pb.l3_bins(w, 15) == 3
    assert pb.mt_l3(w, 2) == 16


def test_lifting_bounds_the_subproblem_the_fullest_machines_carry():
    # m = 3, p = 16 16 10 10 10: the lifted prefixes are j = 4 (pigeonhole 20) and j = 5 (23).
    # j = 5 = 1·3 + 2: 2 machines carry at least {16, 10, 10, 10}; on 2 bins L2 refutes 23, 24
    # and 25 (α = 10: J1 = {16}, J3 = 30 → 1 + ceil(30/C) = 3) but not 26 (16 joins J2 with
    # room 10 → 1 + ceil(20/26) = 2): lifting = 26, the optimum ({16, 10}, {16, 10}, {10}).
    w = pb.sorted_weights([16, 16, 10, 10, 10])
    assert pb.lifting_prefixes(w, 3) == [4, 5]
    sub, r = pb.lifting_subproblem(w, 3, 5)
    assert list(sub) == [16, 10, 10, 10] and r == 2
    assert pb.lifting(w, 3) == 26


def test_best_bound_names_the_first_bound_reaching_the_best_value():
    value, name, values = pb.best_bound(pb.sorted_weights([12, 7, 5, 4]), 2)
    assert (value, name) == (16, "mt_l2") and values["ceil(sum/J)"] == 14
    value, name, values = pb.best_bound(pb.sorted_weights([12, 7, 5, 4]), 2, stop_at=14)
    assert (value, name) == (14, "ceil(sum/J)") and list(values) == ["ceil(sum/J)"]


def assert_decides_exactly(fits, weights: list[int], machines: int) -> int:
    """``fits`` packs at the brute-force optimum and refutes one below it; the optimum."""
    optimum = brute_force_makespan(weights, machines)
    far = time.perf_counter() + 30
    yes = fits(weights, machines, optimum, far)
    assert yes.status == "feasible"
    loads = np.bincount(yes.assign, weights=weights, minlength=machines)
    assert len(loads) == machines and loads.max() <= optimum
    if optimum > 1:
        assert fits(weights, machines, optimum - 1, far).status == "infeasible"
    return optimum


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(small)
def test_bin_completion_decides_exactly(case):
    assert_decides_exactly(pcmax_search.fits, *case)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(small)
def test_cardinality_model_decides_exactly(case):
    assert_decides_exactly(pcmax_cardinality.fits, *case)


def test_pigeonhole_class_by_hand():
    # capacity 19: the three jobs above 19/3 cannot share a machine three at a time (k = 2,
    # 3 > 2·(2 − 1)); the job above 19/2 alone is the k = 1 class, superseded
    assert pcmax_cardinality.pigeonhole_class([10, 9, 9, 2], 2, 19) == (2, [0, 1, 2])
    assert pcmax_cardinality.pigeonhole_class([3, 3, 3], 3, 9) is None


def test_non_uniform_shape_is_packed_at_the_bound():
    """Frangioni et al.'s non-uniform class, n = 100, m = 5, [1, 1000] (the two instances of
    bench/pcmax_classes.py that bin completion and plain CP-SAT left at a gap of 1 and 4
    tokens): the cardinality model packs them at the closed-form bound."""
    for seed in (3, 8):
        rng = np.random.default_rng([13, True, 2, 100, 5, seed])
        big = [int(x) for x in rng.integers(899, 1001, 98)]
        weights = big + [int(x) for x in rng.integers(1, 200, 2)]
        inst = make_instance(weights, 5)
        r = solve(inst, "binpacking", "auto", time_limit_s=60)
        assert r.status == "optimal" and "cardinality CP-SAT" in r.proof
        assert max(r.data.loads) == pytest.approx(r.bound)
        assert r.data.lower_bound_name in pb.BOUNDS
        assert validate_solution(inst, r.to_dict(inst)) == []


def test_minimize_climbs_from_the_bound_to_the_optimum():
    # quickstart outputs on 4 clients: closed forms give 838, the optimum is 847
    weights = [512, 447, 403, 381, 344, 310, 276, 228, 160, 137, 95, 59]
    found, proven, _ = pcmax_search.minimize(weights, 4, 838, 900, time.perf_counter() + 60)
    assert proven == 847 == search_makespan(weights, 4)
    assert np.bincount(found, weights=weights, minlength=4).max() == 847


# --------------------------------------------------------------------------- solve + validate

def test_solution_names_its_bound_and_the_validator_rechecks_it():
    # near-equal long jobs and one short one (Frangioni's non-uniform shape): the prefix
    # pigeonhole bound is what proves the optimum here
    rng = np.random.default_rng(11)
    outputs = [*(int(x) for x in rng.integers(450, 501, 29)), 20]
    inst = make_instance(outputs, 6)
    r = solve(inst, "binpacking", "auto", time_limit_s=30)
    name, tokens = r.data.lower_bound_name, r.data.lower_bound_tokens
    assert r.status == "optimal" and r.proof
    assert name in (*pb.BOUNDS, "complete search")
    assert r.bound == pytest.approx(tokens * r.data.t_round_ms)
    if name in pb.BOUNDS:
        assert recompute_bound(name, outputs, 6) == tokens
    assert max(r.data.loads) == pytest.approx(r.bound)
    sol = r.to_dict(inst)
    assert validate_solution(inst, sol) == []
    assert sol["lower_bound"] == {"name": name, "tokens": tokens}  # the file's keys
    sol["lower_bound"] = {"name": name, "tokens": tokens + 1}
    reasons = validate_solution(inst, sol)
    assert reasons and any("lower_bound" in x for x in reasons)


def test_time_limit_zero_returns_lpt_and_the_closed_form_bound_at_once():
    inst = make_instance([512, 447, 403, 381, 344, 310, 276, 228, 160, 137, 95, 59], 4)
    r = solve(inst, "binpacking", "auto", time_limit_s=0)
    # LPT: 512 447 403 381 one per client; 344→381, 310→403, 276→447, 228→512, 160→713,
    # 137→723, 95→725, 59→740: loads 799 860 873 820, makespan 873 > ceil(3352/4) = 838
    assert r.status == "feasible"
    assert (r.data.lower_bound_name, r.data.lower_bound_tokens) == ("ceil(sum/J)", 838)
    assert max(r.data.loads) == pytest.approx(873 * r.data.t_round_ms)
    assert validate_solution(inst, r.to_dict(inst)) == []
    with pytest.raises(OptionError, match="0 or positive"):
        solve(inst, "binpacking", "auto", time_limit_s=-1)
    with pytest.raises(OptionError, match="positive"):
        solve(inst, "pd-competition", "auto", time_limit_s=0)


def test_complete_search_proof_is_named_as_such():
    inst = make_instance([512, 447, 403, 381, 344, 310, 276, 228, 160, 137, 95, 59], 4)
    r = solve(inst, "binpacking", "auto", time_limit_s=60)
    assert r.status == "optimal"
    assert (r.data.lower_bound_name, r.data.lower_bound_tokens) == ("complete search", 847)
    assert "bin completion" in r.proof
    assert validate_solution(inst, r.to_dict(inst)) == []


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(small)
def test_arc_flow_decides_exactly_and_its_lp_bound_is_valid(case):
    weights, machines = case
    optimum = assert_decides_exactly(pcmax_arcflow.fits, weights, machines)
    far = time.perf_counter() + 30
    lower = max(1, -(-sum(weights) // machines), max(weights))
    assert lower <= pcmax_arcflow.lp_bound(weights, machines, lower, optimum, far) <= optimum


def test_arc_flow_graph_has_one_item_arc_per_reachable_load_and_size():
    # sizes 3 and 2, capacity 6: size 3 from loads 0, 3 (arcs 0→3, 3→6); size 2 from loads
    # reachable with sizes ≥ 2 so far, 0 3 and then its own chain: 0→2, 2→4, 3→5, 4→6 → 6 item
    # arcs; loss arcs from the reachable loads 2 3 4 5 (not 0, not 6) → 4: 10 in all
    assert pcmax_arcflow.arc_count([3, 2, 2, 3], 6) == 10

