"""The attainment bound's CP-SAT model (``llmopt.problems.infermax.attainment``; its module doc
gives the model): the InferMax state per request and batch (``llmopt.problems.infermax.state``,
with evictions before the batch, as in the replay), the batch times, the SLO obligations, the
energetic cuts on the met variables, the hint from a plan, the plan read back from a solution,
and CP-SAT's run."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from llmopt.backends import cpsat as cpsat_backend
from llmopt.problems.infermax.attainment_data import Data, Plan, walk
from llmopt.problems.infermax.state import Eviction, build_state
from llmopt.progress import SILENT, Progress

# --------------------------------------------------------------------- CP-SAT model

def build_model(data: Data, N: int, H: int):
    """The CP-SAT model of the module doc: N batches, every one ending by H (clock units);
    returns the model and its variables."""
    md = cp_model.CpModel()
    n = data.n
    coef = data.coef
    K = [int(data.I[i] + data.O[i] - 1) for i in range(n)]
    t_min = min(data.T)
    start = [md.new_int_var(t_min, H, f"start{j}") for j in range(N + 1)]
    end = [md.new_int_var(t_min, H, f"end{j}") for j in range(N + 1)]
    md.add(end[0] == t_min)  # nothing runs before the first arrival

    met: list[Any] = [md.new_bool_var(f"met{i}") if data.kind[i] == "model" else None
                      for i in range(n)]
    state = build_state(md, data.I, data.O, data.C, N, Eviction.BEFORE_BATCH)
    has1, done = state.has1, state.done
    tok_j: list[list[Any]] = [[] for _ in range(N + 1)]
    occ_j: list[list[Any]] = [[] for _ in range(N + 1)]
    act_j: list[list[Any]] = [[] for _ in range(N + 1)]
    kv_j: list[list[Any]] = [[] for _ in range(N + 1)]
    units_j: list[list[Any]] = [[] for _ in range(N + 1)]
    chunks_j: list[list[Any]] = [[] for _ in range(N + 1)]
    arrive_j: list[list[Any]] = [[] for _ in range(N + 1)]
    limit_j = n > data.J
    for i in range(n):
        Ki = K[i]
        cmax = min(data.C, Ki)
        for j, x in enumerate(state.cells[i], start=1):
            # prefill attention of a chunk: c² + 2·before·c = c·(occ + before); a decode's
            # 1·(2m + 1) is taken back out
            w = md.new_int_var(0, 2 * Ki, f"w{i}_{j}")
            md.add(w == x.occ + x.before)
            prod = md.new_int_var(0, cmax * 2 * Ki, f"u{i}_{j}")
            md.add_multiplication_equality(prod, [x.c, w])
            tok_j[j].append(x.c)
            occ_j[j].append(x.occ)
            kv_j[j].append(x.kvr)
            units_j[j].append(prod - 2 * x.kvr - x.dec)
            chunks_j[j].append(x.pos - x.dec)
            if data.T[i] > t_min:
                arrive_j[j].append(data.T[i] * x.pos)
            if limit_j:
                a = md.new_bool_var(f"act{i}_{j}")
                md.add(x.occ >= 1).only_enforce_if(a)
                md.add(x.occ == 0).only_enforce_if(a.negated())
                act_j[j].append(a)
    nonempty = []
    top = max(1, sum(K))
    most = (coef["bias_ms"] + coef["per_token_ms"] * data.C + coef["decode_kv_ms"] * top
            + coef["prefill_attention_ms"] * 2 * data.C * top
            + coef["per_prefill_request_ms"] * n)
    for j in range(1, N + 1):
        tok = sum(tok_j[j])
        ne = md.new_bool_var(f"ne{j}")
        md.add(tok <= data.C * ne)                                      # (4) C
        md.add(tok >= ne)
        md.add(sum(occ_j[j]) <= data.M)                                 # (4) M
        if limit_j:
            md.add(sum(act_j[j]) <= data.J)                             # J running
        nonempty.append(ne)
        fine = (coef["bias_ms"] * ne + coef["per_token_ms"] * tok
                + coef["decode_kv_ms"] * sum(kv_j[j])
                + coef["prefill_attention_ms"] * sum(units_j[j])
                + coef["per_prefill_request_ms"] * sum(chunks_j[j]))
        if data.div == 1:
            cost = fine
        else:  # the clock counts whole units: ⌊fine cost / div⌋
            cost = md.new_int_var(0, most // data.div + 1, f"cost{j}")
            md.add(data.div * cost <= fine)
            md.add(fine <= data.div * cost + data.div - 1)
        if arrive_j[j]:
            md.add_max_equality(start[j], [end[j - 1], *arrive_j[j]])
        else:
            md.add(start[j] == end[j - 1])
        md.add(end[j] == start[j] + cost)
    for j in range(len(nonempty) - 1):                                  # empty batches last
        md.add_implication(nonempty[j + 1], nonempty[j])
    # the SLO obligations of the requests in the objective
    completes: list[list[tuple[Any, Any]]] = [[] for _ in range(N + 1)]
    for i in range(n):
        if met[i] is None:
            continue
        dl = data.deadline(i)
        assert dl is not None
        # the batch completing the obligation ends by the deadline, so it is among the first
        # (dl − first arrival) / min_batch batches
        last_j = min(N, (dl - t_min) // data.min_batch())
        obligation = done if data.needs_finish(i) else has1
        if last_j < 1:
            md.add(met[i] == 0)
            continue
        md.add_implication(met[i], obligation[i][last_j])
        first_at = md.new_int_var(t_min, H, f"first{i}") if data.needs_first(i) else None
        finish_at = md.new_int_var(t_min, H, f"finish{i}") if data.needs_finish(i) else None
        for j in range(1, N + 1):
            event = md.new_bool_var(f"ev{i}_{j}")    # the obligation is completed in batch j
            md.add(event == obligation[i][j] - obligation[i][j - 1])
            completes[j].append((met[i], event))
            if first_at is not None:
                f = md.new_bool_var(f"f{i}_{j}")
                md.add(f == has1[i][j] - has1[i][j - 1])
                md.add(first_at == end[j]).only_enforce_if(f)
            if finish_at is not None:
                md.add(finish_at == end[j]).only_enforce_if(event)
        ttft, tpot, e2e = data.ttft[i], data.tpot[i], data.e2e[i]
        if ttft is not None:
            assert first_at is not None
            md.add(first_at <= data.T[i] + ttft).only_enforce_if(met[i])
        if e2e is not None:
            assert finish_at is not None
            md.add(finish_at <= data.T[i] + e2e).only_enforce_if(met[i])
        if tpot is not None:
            assert first_at is not None and finish_at is not None
            md.add(finish_at - first_at <= tpot).only_enforce_if(met[i])
    # the last non-empty batch completes an obligation: the model's batches are the prefix of
    # a schedule up to the last obligation it meets
    for j in range(1, N + 1):
        last = [nonempty[j - 1]] + ([nonempty[j].negated()] if j < N else [])
        witnesses = []
        for mi, ev in completes[j]:
            both = md.new_bool_var("")
            md.add_bool_and([mi, ev]).only_enforce_if(both)
            witnesses.append(both)
        md.add_bool_or([*witnesses, *(lit.negated() for lit in last)])
    # interchangeable requests (same lengths, arrival and targets): the first is met first
    groups: dict[tuple, list[int]] = {}
    for i in range(n):
        if met[i] is not None:
            key = (int(data.I[i]), int(data.O[i]), data.T[i], data.ttft[i], data.tpot[i],
                   data.e2e[i])
            groups.setdefault(key, []).append(i)
    for members in groups.values():
        for first, second in itertools.pairwise(members):
            md.add_implication(met[second], met[first])
    md.maximize(sum(x for x in met if x is not None))
    return md, {"c": state.c, "e": state.e, "dec": state.dec, "met": met, "S": state.S,
                "m": state.m}


@dataclass
class Solved:
    ending: str                  # optimal | feasible | infeasible | no_solution | error
    objective: float | None
    bound: float | None          # a bound only with a solution (see ``run_cpsat``)
    solution: Any = None
    runtime_s: float = 0.0


def run_cpsat(md, time_limit_s: float, workers: int, collect=None,
           progress: Progress = SILENT) -> Solved:
    """CP-SAT on ``md`` (the project's sub-solver settings, with probing off in presolve: on
    these models it took most of a 10 s limit before the search started). Maximization:
    CP-SAT's bound counts only when it has a solution (else it reports 0)."""
    solver = cpsat_backend.subsolver(max(time_limit_s, 0.05), workers)
    solver.parameters.cp_model_probing_level = 0
    if progress.verbose:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = progress.log
    t0 = time.perf_counter()
    status = cpsat_backend.solve_stoppable(solver, md)
    ending = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
              cp_model.INFEASIBLE: "infeasible", cp_model.UNKNOWN: "no_solution"}.get(
                  status, "error")
    found = ending in ("optimal", "feasible")
    return Solved(ending, solver.objective_value if found else None,
                   solver.best_objective_bound if found else None,
                   collect(solver.value) if found and collect is not None else None,
                   time.perf_counter() - t0)


def _own_work(data: Data, i: int) -> tuple[int, int]:
    """Fine units request i adds, at the least, to the batches up to its first token and to
    those of its later tokens, besides their bias: its prompt (⌈I/C⌉ chunks whose c² + 2mc sum
    to I²), then per later token a decode or the end of a refill, whichever costs less."""
    I, O = int(data.I[i]), int(data.O[i])
    prompt = data.chunk_cost(I, 0) + data.coef["per_prefill_request_ms"] * (
        math.ceil(I / data.C) - 1)
    later = sum(min(data.decode_cost(I + t - 1), data.chunk_cost(I + t, 0))
                for t in range(1, O))
    return prompt, later


def _energy_cuts(md, data: Data, met: list[Any]) -> None:
    """Redundant cuts on the met variables (energetic reasoning). For a window [a, b], a from
    the arrivals and b from the deadlines, the batches that take a met request whose arrival
    and obligation deadline lie in the window to that obligation lie in the window too: their
    times add up to at most b − a, and each is its bias plus what its requests add
    (``_own_work``; request k takes ⌈I/C⌉ batches to its first token and O − 1 more to its last
    at least). On the clock a batch may lose up to one unit (floor)."""
    chosen = [i for i in range(data.n) if met[i] is not None]
    if len(chosen) < 2:
        return
    bias = data.coef["bias_ms"] - data.div + 1   # what a batch's bias is worth on the clock
    work = {i: _own_work(data, i) for i in chosen}
    first_dl = {i: data.T[i] + t for i in chosen if (t := data.ttft[i]) is not None}
    last_dl = {i: d for i in chosen
               if data.needs_finish(i) and (d := data.deadline(i)) is not None}
    starts = sorted({data.T[i] for i in chosen})
    ends = sorted({*first_dl.values(), *last_dl.values()})
    for a in starts:
        for b in ends:
            terms: list[tuple[int, int, Any]] = []   # (fine units, batches, met)
            for i in chosen:
                prompt = math.ceil(int(data.I[i]) / data.C)
                if data.T[i] < a:
                    continue
                if i in last_dl and last_dl[i] <= b:
                    terms.append((sum(work[i]), prompt + int(data.O[i]) - 1, met[i]))
                elif i in first_dl and first_dl[i] <= b:
                    terms.append((work[i][0], prompt, met[i]))
            if len(terms) < 2:
                continue
            lhs = sum(w * m for w, _, m in terms)
            if bias > 0:
                batches = md.new_int_var(0, max(k for _, k, _ in terms), "")
                for _, k, m in terms:
                    md.add(batches >= k * m)
                lhs += bias * batches
            md.add(lhs <= data.div * (b - a))


def energy_bound(data: Data, time_limit_s: float, workers: int) -> int | None:
    """The most requests the energetic cuts alone allow to be met (``_energy_cuts`` on the met
    variables only: a small model); None when not proven in time."""
    md = cp_model.CpModel()
    met: list[Any] = [md.new_bool_var(f"met{i}") if data.kind[i] == "model" else None
                      for i in range(data.n)]
    _energy_cuts(md, data, met)
    md.maximize(sum(m for m in met if m is not None))
    out = run_cpsat(md, time_limit_s, workers)
    return None if out.bound is None else math.floor(out.bound + 1e-6)


def hint_plan(md, data: Data, var: dict, N: int, plan: Plan, met: np.ndarray) -> bool | None:
    """Hint the model with ``plan`` (at most N batches), completed into a full assignment by a
    short solve with those values fixed; False when the plan does not fit the model (the
    completion is infeasible), None when the completion did not finish in its 2 s (the model
    is left without hints)."""
    for j, state in enumerate(walk(data, plan), start=1):
        for i in range(data.n):
            md.add_hint(var["c"][i][j], int(state["c"][i]))
            md.add_hint(var["S"][i][j], int(state["S"][i]))
            md.add_hint(var["m"][i][j], int(state["m"][i]))
            if var["e"][i][j] is not None:
                md.add_hint(var["e"][i][j], int(state["e"][i]))
    for j in range(len(plan) + 1, N + 1):
        for i in range(data.n):
            md.add_hint(var["c"][i][j], 0)
    for i in range(data.n):
        if var["met"][i] is not None:
            md.add_hint(var["met"][i], int(bool(met[i])))
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.max_time_in_seconds = 2.0
    solver.parameters.num_workers = 1
    status = solver.solve(md)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        md.clear_hints()
        return False if status in (cp_model.INFEASIBLE, cp_model.MODEL_INVALID) else None
    md.clear_hints()
    for k in range(len(md.proto.variables)):
        v = md.get_int_var_from_proto_index(k)
        md.add_hint(v, solver.value(v))
    return True


def plan_from_values(data: Data, var: dict, N: int, value) -> Plan:
    plan = []
    for j in range(1, N + 1):
        batch: dict[str, Any] = {"evict": [], "prefill": {}, "decode": []}
        for i in range(data.n):
            rid = data.ids[i]
            if var["e"][i][j] is not None and value(var["e"][i][j]):
                batch["evict"].append(rid)
            tokens = int(value(var["c"][i][j]))
            if tokens and value(var["dec"][i][j]):
                batch["decode"].append(rid)
            elif tokens:
                batch["prefill"][rid] = tokens
        if batch["evict"] or batch["prefill"] or batch["decode"]:
            plan.append(batch)
    return plan


