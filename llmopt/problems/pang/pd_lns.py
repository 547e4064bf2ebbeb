"""Large-neighbourhood search for the PD-competition problem, driven by CP-SAT.

A window of consecutive bins is re-optimised exactly while everything else stays as it is: the
requests of the window's bins may move to any bin of the window, every bin's decode position
B_k may change (later bins shift with the window), all requests keep the cumulative limits (J
clients, and the KV tokens reserved by requests in flight, ``llmopt.problems.pang.kv``), and the
objective is the whole plan's total under the time model. CP-SAT starts from the current plan,
so a window never makes the plan worse. Windows slide over the plan until the time runs out.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from llmopt.backends.cpsat import subsolver
from llmopt.problems.pang.pd_compact import Weights
from llmopt.problems.pang.pd_plan import PDProblem, Plan, earliest_plan
from llmopt.progress import SILENT, Progress


def _window_model(problem: PDProblem, plan: Plan, lo: int, hi: int, model: str, kv: bool):
    """CP-SAT model of the window [lo, hi): bins before it keep their positions, its requests
    choose among its bins, its positions are free, and the bins after it move together by one
    shift. Requests that finish before the window starts are left out."""
    n = problem.n
    K = len(plan.bins)
    W = Weights.of(problem, model)
    bin_of = plan.bin_of(n)
    old = np.asarray(plan.starts, dtype=np.int64)
    d_end0 = plan.decode_end(problem)
    H = d_end0 + int(problem.out.max()) * 2
    md = cp_model.CpModel()
    win_B = {k: md.new_int_var(int(old[lo - 1]) if lo > 0 else 0, H, f"B{k}")
             for k in range(lo, hi)}
    if lo == 0:
        md.add(win_B[0] == 0)
    for k in range(lo, hi - 1):
        md.add(win_B[k] <= win_B[k + 1])
    shift = md.new_int_var(-H, H, "shift")
    if hi < K:
        md.add(int(old[hi]) + shift >= win_B[hi - 1])

    def position(k: int):
        if k < lo:
            return int(old[k])
        if k < hi:
            return win_B[k]
        return int(old[k]) + shift

    window = list(range(lo, hi))
    free = [int(i) for i in np.flatnonzero((bin_of >= lo) & (bin_of < hi))]
    free_set = set(free)
    horizon_start = int(old[lo])
    choice: dict[int, list[cp_model.IntVar]] = {}
    intervals, demands = [], []
    d_end = md.new_int_var(0, H + int(problem.out.max()), "D_end")
    for i in range(n):
        length = int(problem.out[i])
        if i in free_set:
            bools = [md.new_bool_var(f"b{i}_{k}") for k in window]
            md.add_exactly_one(bools)
            choice[i] = bools
            s = md.new_int_var(0, H, f"s{i}")
            for k, v in zip(window, bools, strict=True):
                md.add(s == win_B[k]).only_enforce_if(v)
        else:
            k = int(bin_of[i])
            if k < lo and old[k] + length <= horizon_start:
                continue  # done before the window: no effect on it
            s = position(k)
        e = md.new_int_var(0, H + length, f"e{i}")
        intervals.append(md.new_interval_var(s, length, e, f"r{i}"))
        demands.append(int(problem.footprint[i]))
        md.add(d_end >= e)
    md.add_cumulative(intervals, [1] * len(intervals), problem.clients)
    if kv and problem.kv_capacity is not None:
        md.add_cumulative(intervals, demands, problem.kv_capacity)
    cost = []
    for k in window:
        members = [(i, choice[i][k - lo]) for i in free]
        tokens = sum(int(problem.inp[i]) * v for i, v in members)
        md.add(tokens <= problem.cap)
        used = md.new_bool_var(f"u{k}")
        for _, v in members:
            md.add_implication(v, used)
        if model == "stage":
            y = [md.new_bool_var(f"y{k}_{lv}") for lv in range(len(problem.levels))]
            md.add_exactly_one(y)
            md.add(tokens <= sum(c * y[lv] for lv, (c, _) in enumerate(problem.levels)))
            md.add(y[0] == used.negated())
            cost.append(sum(c * y[lv] for lv, c in enumerate(W.stage_costs)))
        else:
            cost.append(W.stage_costs[1] * used)
    md.minimize(W.per_round * d_end + sum(cost))
    for k in window:
        md.add_hint(win_B[k], int(old[k]))
    md.add_hint(shift, 0)
    for i, bools in choice.items():
        for k, v in zip(window, bools, strict=True):
            md.add_hint(v, int(bin_of[i] == k))
    return md, choice, window


def improve_plan(problem: PDProblem, plan: Plan, model: str, deadline: float, *,
                 window: int = 6, step: int | None = None, kv: bool = True,
                 window_time_s: float = 2.0, progress: Progress = SILENT
                 ) -> tuple[Plan, bool]:
    """Slide a window of ``window`` bins over ``plan`` (by ``step`` bins) and re-optimise each
    exactly with CP-SAT, keeping improvements, until ``deadline`` (perf_counter seconds). Returns
    the best plan and whether Ctrl-C ended the search (within one window's time)."""
    step = step or max(1, window // 2)
    best = _compact(problem, plan)
    best_total = best.total_ms(problem, model)
    lo = 0
    sweeps_without_gain = 0
    gained = False
    interrupted = False
    try:
        while time.perf_counter() < deadline - 0.5:
            K = len(best.bins)
            if lo >= K - 1:
                lo = 0
                sweeps_without_gain = 0 if gained else sweeps_without_gain + 1
                gained = False
                if sweeps_without_gain >= 2:
                    break
            hi = min(lo + window, K)
            md, choice, win = _window_model(problem, best, lo, hi, model, kv)
            solver = subsolver(max(0.1, min(window_time_s, deadline - time.perf_counter())), 2)
            status = solver.solve(md)
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                bin_of = best.bin_of(problem.n)
                for i, bools in choice.items():
                    bin_of[i] = next(k for k, v in zip(win, bools, strict=True)
                                     if solver.value(v))
                members = [np.flatnonzero(bin_of == k).tolist() for k in range(K)]
                candidate = _compact(problem, earliest_plan(problem, members, None,
                                                            source=best.source))
                total = candidate.total_ms(problem, model)
                if total < best_total - 1e-6 and not candidate.check(problem):
                    best, best_total, gained = candidate, total, True
                    progress.incumbent(best_total, None, " ms")
            lo += step
    except KeyboardInterrupt:
        interrupted = True
    best.source = f"{plan.source} + LNS"
    return best, interrupted


def _compact(problem: PDProblem, plan: Plan) -> Plan:
    """Drop empty bins."""
    keep = [k for k, members in enumerate(plan.bins) if members]
    return Plan([list(plan.bins[k]) for k in keep], [plan.starts[k] for k in keep],
                plan.client.copy(), plan.source, list(plan.notes))
