"""The status decision, incumbent guard and proof text of llmopt.problems.outcome, branch by
branch (the solvers' own tests check that each one uses it on real instances)."""

from __future__ import annotations

import pytest

from llmopt.errors import InternalError
from llmopt.problems.outcome import (
    Sense,
    decide,
    keep_better,
    meets_bound,
    proof_text,
    tighter_bound,
)

PROOF = "a complete search"


def test_proven_minimum_is_optimal_with_its_proof():
    v = decide(10.0, 10.0, proof=PROOF)
    assert (v.status, v.bound, v.proof) == ("optimal", 10.0, PROOF) and v.optimal


def test_proven_maximum_is_optimal():
    v = decide(7, 7, proof=PROOF, sense=Sense.MAX)
    assert (v.status, v.bound, v.proof) == ("optimal", 7, PROOF)


def test_bound_better_than_incumbent_is_feasible_without_proof():
    v = decide(10.0, 9.0, proof=PROOF)          # minimizing: bound below the incumbent
    assert (v.status, v.bound, v.proof) == ("feasible", 9.0, None)
    v = decide(5, 7, proof=PROOF, sense=Sense.MAX)  # maximizing: bound above it
    assert (v.status, v.bound, v.proof) == ("feasible", 7, None)


def test_within_tolerance_is_optimal_and_the_bound_keeps_its_value():
    v = decide(100.0, 100.0 - 1e-7, proof=PROOF, tol=1e-6)
    assert v.status == "optimal" and v.bound == 100.0 - 1e-7
    assert decide(100.0, 100.0 - 1e-5, proof=PROOF, tol=1e-6).status == "feasible"


def test_a_bound_on_the_wrong_side_within_tolerance_is_clamped_to_the_incumbent():
    v = decide(100.0, 100.0 + 1e-7, proof=PROOF, tol=1e-6)
    assert (v.status, v.bound) == ("optimal", 100.0)
    v = decide(3.0, 3.0 - 1e-9, proof=PROOF, sense=Sense.MAX, tol=1e-6)
    assert (v.status, v.bound) == ("optimal", 3.0)


def test_no_proof_no_optimal():
    v = decide(10.0, 10.0, proof=None)
    assert (v.status, v.proof) == ("feasible", None)


def test_a_proof_holds_when_the_run_was_cut_short_afterwards():
    v = decide(10.0, 10.0, proof=PROOF)
    assert (v.status, v.bound, v.proof) == ("optimal", 10.0, PROOF)


@pytest.mark.parametrize(("sense", "objective", "bound"),
                         [(Sense.MIN, 9.0, 10.0), (Sense.MAX, 11, 10)])
def test_objective_beyond_the_bound_is_a_bug(sense, objective, bound):
    with pytest.raises(InternalError, match="bound"):
        decide(objective, bound, proof=PROOF, sense=sense, tol=0.5)


def test_no_bound_no_incumbent_and_the_back_ends_own_verdicts():
    assert decide(10.0, None, proof=PROOF) == decide(10.0, None, proof=None)
    assert decide(10.0, None, proof=PROOF).status == "feasible"
    v = decide(None, 4.0, proof=PROOF)
    assert (v.status, v.bound, v.proof) == ("time_limit_no_solution", 4.0, None)
    assert decide(None, None, proof=None, ending="infeasible").status == "infeasible"
    assert decide(3.0, 3.0, proof=PROOF, ending="error").status == "error"


def test_keep_better_keeps_the_solvers_plan_unless_worse():
    assert keep_better((10.0, "heuristic"), None) == (10.0, "heuristic")
    assert keep_better((10.0, "heuristic"), (9.0, "solver")) == (9.0, "solver")
    assert keep_better((10.0, "heuristic"), (10.0, "solver")) == (10.0, "solver")  # a tie
    assert keep_better((10.0, "heuristic"), (11.0, "solver")) == (10.0, "heuristic")
    assert keep_better((10.0, "heuristic"), (10.5, "solver"), tol=1.0) == (10.5, "solver")
    assert keep_better((5, "heuristic"), (6, "solver"), Sense.MAX) == (6, "solver")
    assert keep_better((5, "heuristic"), (4, "solver"), Sense.MAX) == (5, "heuristic")


def test_keep_better_with_ties_to_the_incumbent():
    assert keep_better((5, "sa"), (5, "search"), Sense.MAX, ties_to_incumbent=True) == (5, "sa")
    assert keep_better((5, "sa"), (6, "search"), Sense.MAX, ties_to_incumbent=True) == (
        6, "search")


def test_tighter_bound_never_loosens_a_known_bound():
    assert tighter_bound(8.0, 9.0) == 9.0 and tighter_bound(8.0, 7.0) == 8.0
    assert tighter_bound(8.0, 9.0, Sense.MAX) == 8.0 and tighter_bound(8.0, 7.0, Sense.MAX) == 7.0
    assert tighter_bound(None, 7.0) == 7.0 and tighter_bound(8.0, None) == 8.0
    assert tighter_bound(None, None) is None


def test_proof_text_composes_method_claim_and_bound():
    assert proof_text("CP-SAT", "proved no assignment has makespan below 5 tokens") == (
        "CP-SAT proved no assignment has makespan below 5 tokens")
    assert proof_text("bin completion", "packed every request within 5 tokens",
                      bound="5 tokens (mt_l2)") == (
        "bin completion packed every request within 5 tokens; lower bound 5 tokens (mt_l2)")
    assert meets_bound("load 5 tokens", "ceil(sum/J) = 5 tokens") == (
        "incumbent load 5 tokens equals the lower bound ceil(sum/J) = 5 tokens")
