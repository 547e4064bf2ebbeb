"""A CP-SAT decision for P||Cmax at a target makespan T with cardinality reasoning.

"Do the jobs fit on ``machines`` machines with makespan ≤ T?" as an assignment model (x_ij = job
i on machine j, Σ_j x_ij = 1, load_j = Σ_i p_i x_ij ≤ T) strengthened by the pigeonhole class:
a machine holds at most k jobs longer than T/(k+1) (k + 1 of them exceed T). For the largest k
whose class K (the jobs with p·(k+1) > T) is larger than machines·(k − 1), so that machines must
take k of them and the makespan depends on which:

- c_j = the number of class-K jobs on machine j, c_j ≤ k;
- symmetry: machines are interchangeable, so c_1 ≥ c_2 ≥ … ≥ c_m loses no packing;
- for r = 1..m: load_1 + … + load_r ≥ the sum of the (c_1 + … + c_r) shortest class-K jobs (any
  r machines hold that many class-K jobs, and nothing has negative length).

On the non-uniform classes of França et al. (1994), where most jobs are near the top of the range
and n/m of them fill a machine, the cumulative inequalities let CP-SAT see at once which machines
must take the shortest long jobs, and it packs at the bound where bin completion and plain CP-SAT
time out. Every added constraint holds for every packing within T, so "infeasible" is a proof.

References
----------
- P. M. França, M. Gendreau, G. Laporte, F. M. Müller (1994). A composite heuristic for the
  identical parallel machine scheduling problem with minimum makespan objective. Computers &
  Operations Research 21(2):205–210 (the non-uniform class).
- M. Dell'Amico, S. Martello (1995). Optimal scheduling of tasks on identical parallel
  processors. ORSA Journal on Computing 7(2):191–200 (the pigeonhole reasoning on long jobs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from llmopt import plugins
from llmopt.problems.pang.pcmax_search import Decision

MAX_CELLS = 20_000  # jobs × machines above which the model is not built ("unknown")


def pigeonhole_class(weights: Sequence[int] | np.ndarray, machines: int, capacity: int
                     ) -> tuple[int, list[int]] | None:
    """(k, the indices of the jobs longer than capacity/(k+1)) for the largest k whose class has
    more than machines·(k − 1) jobs, or None when no class does."""
    w = np.asarray(weights, dtype=np.int64)
    found = None
    for k in range(1, len(w) + 1):
        members = np.flatnonzero(w * (k + 1) > capacity)
        if len(members) > machines * (k - 1):
            found = (k, members.tolist())
        elif machines * (k - 1) >= len(w):
            break
    return found


def fits(weights: Sequence[int] | np.ndarray, machines: int, capacity: int,
         deadline: float, workers: int = 2) -> Decision:
    """Whether the jobs fit on ``machines`` machines of capacity ``capacity`` (see the module
    doc), deciding by ``deadline`` (``time.perf_counter()`` seconds) or answering "unknown"."""
    order = np.argsort(-np.asarray(weights, dtype=np.int64), kind="stable")
    w = [int(weights[int(i)]) for i in order]  # longest first: CP-SAT branches on them first
    n = len(w)
    if n == 0:
        return Decision("feasible", np.zeros(0, dtype=np.int64), 0)
    if max(w) > capacity or sum(w) > machines * capacity:
        return Decision("infeasible", None, 0)
    left = deadline - time.perf_counter()
    if n * machines > MAX_CELLS or left <= 0:
        return Decision("unknown", None, 0)
    from ortools.sat.python import cp_model  # OR-Tools (and pandas): loaded when a model runs

    model = cp_model.CpModel()
    x = [[model.new_bool_var("") for _ in range(machines)] for _ in range(n)]
    for row in x:
        model.add_exactly_one(row)
    loads = [model.new_int_var(0, capacity, "") for _ in range(machines)]
    for j, load in enumerate(loads):
        model.add(load == sum(w[i] * x[i][j] for i in range(n)))
    found = pigeonhole_class(w, machines, capacity)
    if found is not None:
        k, members = found
        counts = [model.new_int_var(0, k, "") for _ in range(machines)]
        for j, count in enumerate(counts):
            model.add(count == sum(x[i][j] for i in members))
        for j in range(machines - 1):
            model.add(counts[j] >= counts[j + 1])
        shortest = np.concatenate([[0], np.cumsum(np.sort([w[i] for i in members]))])
        table = [int(v) for v in shortest]
        for r in range(1, machines + 1):
            held = model.new_int_var(0, len(members), "")
            model.add(held == sum(counts[:r]))
            least = model.new_int_var(0, table[-1], "")
            model.add_element(held, table, least)
            model.add(sum(loads[:r]) >= least)
    solver = plugins.load("llmopt.backends.cpsat:subsolver")(left, workers)
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assign = np.empty(n, dtype=np.int64)
        assign[order] = [next(j for j, v in enumerate(row) if solver.value(v)) for row in x]
        return Decision("feasible", assign, 0)
    if status == cp_model.INFEASIBLE:
        return Decision("infeasible", None, 0)
    return Decision("unknown", None, 0)
