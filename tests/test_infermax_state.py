"""The InferMax state shared by the CSP and the attainment model (problems/infermax/state.py):
its two eviction semantics and its phases, on one request (I = 2, O = 2) whose batches are fixed
by hand."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from llmopt.problems.infermax.state import Eviction, build_state


def _solve(eviction: Eviction, tokens: list[int], evicted: list[int]):
    """The state of one request (I = 2, O = 2, C = 4) over len(tokens) batches with c_1j fixed to
    ``tokens`` and e_1j to 1 at the batches in ``evicted`` (0 elsewhere); the solver and state,
    or None when infeasible."""
    md = cp_model.CpModel()
    state = build_state(md, [2], [2], 4, len(tokens), eviction)
    for j, (x, c) in enumerate(zip(state.cells[0], tokens, strict=True), start=1):
        md.add(x.c == c)
        if x.e is not None:
            md.add(x.e == int(j in evicted))
        else:
            assert j not in evicted
    md.add(state.done[0][len(tokens)] == 1)
    solver = cp_model.CpSolver()
    status = solver.solve(md)
    return (solver, state) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None


def test_without_evictions_both_semantics_prefill_then_decode():
    for eviction in Eviction:
        solved = _solve(eviction, [2, 1], [])
        assert solved is not None
        solver, state = solved
        first, second = state.cells[0]
        assert [solver.value(x.dec) for x in (first, second)] == [0, 1]   # prefill, decode
        assert solver.value(second.kvr) == 2 and solver.value(first.kvr) == 0
        assert [solver.value(state.S[0][j]) for j in range(3)] == [2, 3, 4]
        assert [solver.value(state.has1[0][j]) for j in range(3)] == [0, 1, 1]
        assert solver.value(second.occ) == 3 and solver.value(state.m[0][2]) == 0   # done


def test_eviction_before_the_batch_lets_the_request_refill_in_it():
    solved = _solve(Eviction.BEFORE_BATCH, [2, 3], [2])
    assert solved is not None
    solver, state = solved
    refill = state.cells[0][1]
    assert solver.value(refill.before) == 0 and solver.value(refill.dec) == 0   # a refill chunk
    assert solver.value(refill.occ) == 3


def test_eviction_at_the_batch_processes_nothing_in_it():
    assert _solve(Eviction.AT_BATCH, [2, 3], [2]) is None         # eq 2 as printed: c = 0
    solved = _solve(Eviction.AT_BATCH, [2, 0, 3], [2])
    assert solved is not None
    solver, state = solved
    assert solver.value(state.cells[0][1].occ) == 0               # eq 1: freed in batch 2


@pytest.mark.parametrize(("eviction", "tokens"), [(Eviction.AT_BATCH, [1, 0, 2, 1]),
                                                   (Eviction.BEFORE_BATCH, [1, 2, 1])])
def test_an_eviction_needs_kvs_to_free(eviction, tokens):
    assert _solve(eviction, tokens, [2]) is not None              # a chunk cached, then freed
    assert _solve(eviction, [0, *tokens[1:]], [2]) is None        # nothing cached before batch 2
    assert _solve(eviction, tokens, []) is None   # without it, the chunks overrun the prompt


def test_no_eviction_before_the_first_batch():
    assert _solve(Eviction.AT_BATCH, [2, 1], [1]) is None
    md = cp_model.CpModel()
    assert build_state(md, [2], [2], 4, 2, Eviction.BEFORE_BATCH).cells[0][0].e is None
