"""Optimal scheduling of continuous batching as a CSP: InferMax, Kim et al. 2025, section 5.

Requests i with input I_i, output O_i and arrival T_i; batches j = 1..N (j = 0 the initial
state). Variables, as in the paper: S_ij (prompt + generated tokens after batch j, S_i0 = I_i),
m_ij (KVs cached after batch j, m_i0 = 0), c_ij (tokens processed in batch j), g_ij (a token is
generated), e_ij (evicted at batch j). The state per request and batch, shared with the
attainment model, is built by ``llmopt.problems.infermax.state`` with ``Eviction.AT_BATCH`` (eq 1
and 2 as printed). Constraints:

- termination: Σ_j g_ij = O_i (the request is done once S reaches I_i + O_i);
- non-decreasing sequence length: S_ij = S_i,j−1 + g_ij;
- memory management (1): m_ij = 0 if e_ij, else m_i,j−1 + c_ij (and 0 once done);
- tokens to process (2): c_ij = 0 if e_ij, else c_ij ≤ S_i,j−1 − m_i,j−1;
- token generation (3): g_ij = 1 exactly when c_ij = S_i,j−1 − m_i,j−1;
- batch constraints (4): Σ_i c_ij ≤ C and the KVs held during batch j, Σ_i (m_i,j−1 + c_ij) over
  requests not evicted, ≤ M (a finishing request still holds its KVs in its last batch);

Offline (every arrival at 0), the chunks of one prefill or refill pass of length L together cost
L² of prefill attention whatever the chunking (Σ(c² + 2mc) over the chunks telescopes), and only
the sum of the batch times matters, so the model charges L² to the pass's last chunk: an exact
reformulation with a small table instead of products. Online, the products are kept per chunk.

Also what the paper omits: phase indicators (decode: c = 1 on the last generated token, i.e.
S − m = 1 after the first token; prefill/refill otherwise), the chunked-prefill budget (prefill
and refill tokens of a batch ≤ P), finished requests process nothing, and the online setting
(batch j starts at the end of batch j − 1 plus an idle time, and a request is in no batch that
starts before it arrives). An eviction needs KVs to free.

Redundant constraints, for the relaxation (none removes a schedule): every token is processed
once plus what evictions freed; a request generating its t-th token holds I + t − 1 KVs (so
the batches' KVs give a floor on their number); and, where that floor is weaker than the one
from generation, a cap per batch on a score of 1 per first token and 2 per later token
(``CSPData.generation_weight_cap``). Symmetry: interchangeable requests (same I, O, arrival) are
numbered in lexicographic order of their S trajectories where the generation cap applies, in
finishing order elsewhere; on the Fig. 15 points each choice is the faster one for its regime
(docs/benchmarks.md).

Objective: the end of the last batch, batch times by the InferMax cost model (section 3.2):
T_j = bias·[batch non-empty] + per_token·Σ c + decode_kv·Σ_decode m + prefill_attention·
Σ_prefill (c² + 2mc) + per_prefill_request·(prefill chunks). The quadratic term is exact: CP-SAT
multiplies integers; the MIP expands c in binary and linearises the products of binaries and of
a binary with an integer.

Batches. N is the number of batches of the best heuristic schedule (which also warm-starts the
solve) — or more: with N ≥ N_max, the most non-empty batches a schedule better than the
incumbent can afford (each costs at least the bias), the optimum over N batches is the optimum.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmopt.backends import cpsat as cpsat_backend
from llmopt.backends import highs as highs_backend
from llmopt.backends.common import (
    Footprint,
    Outcome,
    OutOfTime,
    answer_reserve_s,
    interrupted_before_the_solver,
    out_of_time_while_building,
    time_left,
)
from llmopt.backends.versions import version_of
from llmopt.data.instance import Instance
from llmopt.deadline import NONE, Deadline
from llmopt.errors import InstanceError, InternalError, OptionError, SolutionFileError
from llmopt.problems.base import Simulation
from llmopt.problems.infermax import mip as infermax_mip
from llmopt.problems.infermax.data import (
    CSPData,
    batches_from_schedule,
    plan_from_values,
    trajectories,
)
from llmopt.problems.infermax.state import Eviction, build_state
from llmopt.problems.outcome import decide, keep_better, proof_text
from llmopt.progress import SILENT, Progress
from llmopt.result import Result, ScheduleData
from llmopt.version import __version__

if TYPE_CHECKING:
    from ortools.sat.python.cp_model import CpModel, IntVar, LinearExpr

SOLVERS = ("auto", "cpsat", "highs")
HEURISTIC_SHARE = 0.3  # of the time limit, for the replays of the heuristic phase
# memory (MB) and building time (s) per (request, batch) pair, building and loading into the
# solver, measured on the Azure sample (CP-SAT: 10 requests × 848 batches, 840 MB; HiGHS: 2 ms
# and 90 KB per pair to build the Pyomo model, about as much again to load it)
FOOTPRINT = {"cpsat": Footprint(0.075, 0.3e-3, base_mb=300),
             "highs": Footprint(0.18, 4e-3, base_mb=300)}  # base: the process before the model


def build_cpsat(data: CSPData, N: int, hint: list[dict[str, Any]] | None = None,
                upper_ms: float | None = None):
    from ortools.sat.python import cp_model

    md = cp_model.CpModel()
    n = data.n
    offline = not (data.T > 0).any()
    big_t = int((upper_ms or 1e7) * data.scale * 2) + 1
    kv_cap = [int(data.I[i] + data.O[i] - 1) for i in range(n)]
    generation_bound = data.generation_cap_applies()
    start = [md.new_int_var(0, big_t, f"start{j}") for j in range(N + 1)]
    end = [md.new_int_var(0, big_t, f"end{j}") for j in range(N + 1)]
    md.add(end[0] == 0)
    state = build_state(md, data.I, data.O, data.C, N, Eviction.AT_BATCH)
    S, m, c, e, dec, done = state.S, state.m, state.c, state.e, state.dec, state.done
    tokens_j: list[list[IntVar]] = [[] for _ in range(N + 1)]
    units_j: list[list[IntVar]] = [[] for _ in range(N + 1)]
    kvr_j: list[list[IntVar]] = [[] for _ in range(N + 1)]
    chunks_j: list[list[IntVar]] = [[] for _ in range(N + 1)]
    occ_j: list[list[IntVar]] = [[] for _ in range(N + 1)]
    ptok_j: list[list[IntVar]] = [[] for _ in range(N + 1)]
    gheld_j: list[list[LinearExpr]] = [[] for _ in range(N + 1)]
    score_j: list[list[LinearExpr]] = [[] for _ in range(N + 1)]
    occ_i: list[list[IntVar]] = [[] for _ in range(n)]
    freed_i: list[list[IntVar]] = [[] for _ in range(n)]
    later_i: list[list[IntVar]] = [[] for _ in range(n)]
    for i in range(n):
        Ii, Oi = int(data.I[i]), int(data.O[i])
        cmax = min(data.C, kv_cap[i])
        for j, x in enumerate(state.cells[i], start=1):
            assert x.e is not None  # AT_BATCH: an e_ij at every batch
            if data.T[i] > 0:  # a request is in no batch that starts before it arrives
                arrived = md.new_bool_var(f"arr{i}_{j}")
                t_i = data.arrival_units(i)
                md.add(start[j] >= t_i).only_enforce_if(arrived)
                md.add(start[j] <= t_i - 1).only_enforce_if(arrived.negated())
                md.add(x.c == 0).only_enforce_if(arrived.negated())
            # the KVs an eviction frees (for the redundant token count below)
            freed = md.new_int_var(0, kv_cap[i], f"freed{i}_{j}")
            md.add(freed == m[i][j - 1]).only_enforce_if(x.e)
            md.add(freed == 0).only_enforce_if(x.e.negated())
            occ_i[i].append(x.occ)
            freed_i[i].append(freed)
            pre = md.new_bool_var(f"pre{i}_{j}")                       # a prefill chunk
            md.add_bool_and([x.pos, x.dec.negated()]).only_enforce_if(pre)
            md.add_bool_or([x.pos.negated(), x.dec]).only_enforce_if(pre.negated())
            # cost terms
            units = md.new_int_var(0, cmax * cmax + 2 * cmax * kv_cap[i], f"u{i}_{j}")
            if offline:
                # the chunks of one (re)fill pass of length L cost Σ(c² + 2mc) = L² in all;
                # with every batch's time only summed, the pass's L² is charged to its last
                # chunk (the one that generates): L = S_{j−1}, tabulated
                last = md.new_bool_var(f"last{i}_{j}")
                md.add_bool_and([pre, x.g]).only_enforce_if(last)
                md.add_bool_or([pre.negated(), x.g.negated()]).only_enforce_if(last.negated())
                sq_table = [(Ii + k) ** 2 for k in range(Oi + 1)]
                sq = md.new_int_var(min(sq_table), max(sq_table), f"sq{i}_{j}")
                idx = md.new_int_var(0, Oi, f"len{i}_{j}")
                md.add(idx == S[i][j - 1] - Ii)
                md.add_element(idx, sq_table, sq)
                md.add(units == sq).only_enforce_if(last)
                md.add(units == 0).only_enforce_if(last.negated())
            else:
                sq = md.new_int_var(0, cmax * cmax, f"sq{i}_{j}")
                md.add_multiplication_equality(sq, [x.c, x.c])
                mc = md.new_int_var(0, cmax * kv_cap[i], f"mc{i}_{j}")
                md.add_multiplication_equality(mc, [m[i][j - 1], x.c])
                md.add(units == sq + 2 * mc).only_enforce_if(pre)
                md.add(units == 0).only_enforce_if(pre.negated())
            ptok = md.new_int_var(0, cmax, f"pt{i}_{j}")
            md.add(ptok == x.c).only_enforce_if(pre)
            md.add(ptok == 0).only_enforce_if(pre.negated())
            tokens_j[j].append(x.c)
            units_j[j].append(units)
            kvr_j[j].append(x.kvr)
            chunks_j[j].append(pre)
            occ_j[j].append(x.occ)
            # redundant, for the relaxation: a request generating a token holds all its
            # S_{j−1} ≥ I + [a token was generated before] KVs in that batch
            gen_g = md.new_bool_var(f"gg{i}_{j}")
            gen = state.has1[i][j - 1]
            md.add_bool_and([x.g, gen]).only_enforce_if(gen_g)
            md.add_bool_or([x.g.negated(), gen.negated()]).only_enforce_if(gen_g.negated())
            gheld_j[j].append(Ii * x.g + gen_g)
            score_j[j].append(x.g + gen_g)
            later_i[i].append(gen_g)
            ptok_j[j].append(ptok)
        md.add(done[i][N] == 1)                                         # termination
        # redundant, for the relaxation: every token is processed once plus what evictions
        # freed; the request holds I + t − 1 KVs in the batch of its t-th token
        md.add(sum(c[i][j] for j in range(1, N + 1)) == Ii + Oi - 1 + sum(freed_i[i]))
        md.add(sum(occ_i[i]) >= Oi * Ii + Oi * (Oi - 1) // 2)
        if generation_bound:
            md.add(sum(later_i[i]) == Oi - 1)         # every token but the first is a later one
    nonempty = []
    score_cap = data.generation_weight_cap() if generation_bound else None
    for j in range(1, N + 1):
        tok = sum(tokens_j[j])
        ne = md.new_bool_var(f"ne{j}")
        md.add(tok <= data.C * ne)                                      # (4)
        md.add(sum(occ_j[j]) <= data.M * ne)                            # (4), held only while busy
        md.add(sum(gheld_j[j]) <= data.M)
        if score_cap is not None:                                       # generation_bound
            md.add(sum(score_j[j]) <= score_cap * ne)
        md.add(sum(ptok_j[j]) <= data.P)                                # chunked prefill budget
        md.add(tok >= 1).only_enforce_if(ne)
        md.add(tok == 0).only_enforce_if(ne.negated())
        nonempty.append(ne)
        cost = (data.coef("bias_ms") * ne + data.coef("per_token_ms") * tok
                + data.coef("decode_kv_ms") * sum(kvr_j[j])
                + data.coef("prefill_attention_ms") * sum(units_j[j])
                + data.coef("per_prefill_request_ms") * sum(chunks_j[j]))
        if (data.T > 0).any():
            idle = md.new_int_var(0, big_t, f"idle{j}")
            md.add(start[j] == end[j - 1] + idle)
        else:
            md.add(start[j] == end[j - 1])
        md.add(end[j] == start[j] + cost)
    for j in range(len(nonempty) - 1):                # empty batches last
        md.add_implication(nonempty[j + 1], nonempty[j])
    for a, b in data.interchangeable_pairs():
        if generation_bound:
            _lex_at_least(md, S[a][1:], S[b][1:])
        else:
            for j in range(1, N + 1):
                md.add_implication(done[b][j], done[a][j])
    md.minimize(end[N])
    if hint:
        _hint(md, data, hint, N, {"S": S, "m": m, "c": c, "e": e})
    return md, {"c": c, "e": e, "m": m, "dec": dec, "end": end, "start": start}


def _lex_at_least(md: CpModel, xs: list[IntVar], ys: list[IntVar]) -> None:
    """xs ≥ ys lexicographically: at the first batch where the two differ, xs is ahead."""
    equal_so_far = None
    for x, y in zip(xs, ys, strict=True):
        at_least = md.add(x >= y)
        if equal_so_far is not None:
            at_least.only_enforce_if(equal_so_far)
        ahead = md.new_bool_var("")
        md.add(x >= y + 1).only_enforce_if(ahead)
        md.add(x <= y).only_enforce_if(ahead.negated())
        equal = md.new_bool_var("")
        prefix = [ahead.negated()] + ([equal_so_far] if equal_so_far is not None else [])
        md.add_bool_and(prefix).only_enforce_if(equal)
        md.add_bool_or([lit.negated() for lit in prefix]).only_enforce_if(equal.negated())
        equal_so_far = equal


def _hint(md: CpModel, data: CSPData, plan: list[dict[str, Any]], N: int, var: dict) -> None:
    tr = trajectories(data, plan + [{"evict": [], "prefill": {}, "decode": []}] * (N - len(plan)))
    row = list(range(data.n))       # renumbered to meet the lexicographic symmetry break
    for members in data.interchangeable_groups():
        ranked = sorted(members, key=lambda i: tuple(tr["S"][i, 1:]), reverse=True)
        for k, i in zip(members, ranked, strict=True):
            row[k] = i
    for i in range(data.n):
        for j in range(1, N + 1):
            for name in ("S", "m", "c", "e"):
                md.add_hint(var[name][i][j], int(tr[name][row[i], j]))


# --------------------------------------------------------------------- solve

def heuristic_schedules(instance: Instance, simulation: Simulation, deadline: Deadline = NONE
                        ) -> list[tuple[float, str, Any]]:
    """(makespan, policy, schedule) of every policy of the replay engine that starts the CSP
    (``PolicyInfo.incumbent_for``: those that respect M), best first; a replay starts only
    before ``deadline`` once one schedule is found."""
    out: list[tuple[float, str, Any]] = []
    for name, replayed in simulation.heuristics(instance, "infermax-csp"):
        if out and deadline.passed():
            continue
        try:
            sched = replayed()
        except InstanceError:
            continue  # e.g. a prompt too long for a policy without chunked prefill
        out.append((sched.makespan_ms, name, sched))
    if not out:
        raise InstanceError("no heuristic schedule for this instance", file=instance.label(),
                            field="requests")
    return sorted(out, key=lambda x: x[0])


def replay_plan(instance: Instance, plan: list[dict[str, Any]], simulation: Simulation) -> Any:
    """The schedule of a plan of batches (the model's, or a heuristic's) under the cost model;
    a plan of llmopt's own that breaks a rule is a bug."""
    try:
        return simulation.follow(instance, {"mode": "continuous", "plan": plan}, "infermax-csp")
    except SolutionFileError as exc:
        raise InternalError(f"the CSP's plan cannot be replayed: {exc}") from exc


def max_useful_batches(data: CSPData, upper_ms: float) -> int:
    """N_max: a schedule cheaper than ``upper_ms`` has at most this many non-empty batches
    (each costs the bias; the tokens every request must process cost at least per_token each,
    and its decodes read at least I, I + 1, …, I + O − 2 KVs)."""
    p = data.profile
    tokens = float((data.I + data.O - 1).sum())
    decode_reads = float(sum((int(o) - 1) * int(i) + (int(o) - 1) * (int(o) - 2) / 2
                             for i, o in zip(data.I, data.O, strict=True)))
    rest = upper_ms - p.per_token_ms * tokens - p.decode_kv_ms * decode_reads
    return max(1, math.floor(rest / p.bias_ms + 1e-9)) if p.bias_ms > 0 else 10 ** 6


def solve(instance: Instance, solver: str = "auto", time_limit_s: float | None = 60.0,
          progress: Progress = SILENT, bins: int | None = None,
          workers: int | None = None, *, simulation: Simulation) -> Result:
    """``bins`` sets N, the number of batches; ``workers`` CP-SAT's threads (default: one per
    core); ``simulation`` replays the heuristics and the plan (``llmopt.solve`` gives it)."""
    t0 = time.perf_counter()
    data = CSPData.from_instance(instance)
    limit = time_limit_s if time_limit_s is not None else math.inf
    progress.stage("heuristic schedules (the replay engine's schedulers)")
    heur = heuristic_schedules(instance, simulation,
                               Deadline.after(time_limit_s).share(HEURISTIC_SHARE))
    best_ms, best_name, best_sched = heur[0]
    best_plan = batches_from_schedule(data.ids, best_sched)
    progress.incumbent(best_ms, None, " ms")
    n_max = max_useful_batches(data, best_ms)
    if bins is not None and bins < 1:
        raise OptionError("must be at least 1", field="--bins", value=bins)
    N = bins or max(len(best_plan), min(n_max, 3 * len(best_plan)))
    backend = "highs" if solver == "highs" else "cpsat"
    try:  # an incumbent exists: Ctrl-C keeps it
        out, bound_ms = _solve_model(data, N, n_max, best_plan, best_ms, backend, t0 + limit,
                                     limit, workers, progress)
    except KeyboardInterrupt:
        out, bound_ms = interrupted_before_the_solver(version_of(backend),
                                                      "the model building"), None
    plan = out.solution if out.solution is not None else best_plan
    schedule = replay_plan(instance, plan, simulation)
    _, kept = keep_better((best_ms, best_plan), (schedule.makespan_ms, plan), tol=1e-6)
    if kept is not plan:  # never worse than the incumbent
        plan, schedule = best_plan, replay_plan(instance, best_plan, simulation)
    objective = schedule.makespan_ms
    notes = [f"N = {N} batches; N_max = {n_max}", f"best heuristic: {best_name}"]
    if not data.exact:
        notes.append("cost coefficients rounded to 1e-12 ms in the model")
    # the model's optimum bounds every schedule of N batches: with N ≥ N_max every schedule,
    # and the replayed plan is optimal when it meets that bound
    tol = 1e-9 * objective
    complete = n_max <= N and data.exact
    verdict = decide(objective, bound_ms if complete else None, proof=proof_text(
        backend, f"proved the CSP optimal with N = {N} ≥ N_max = {n_max} batches"),
        tol=tol, what="the replayed makespan (ms)")
    bound = objective if verdict.optimal else verdict.bound
    if not complete and bound_ms is not None and objective - bound_ms <= tol:
        notes.append(f"{backend} proved this optimal among schedules of at most {N} batches "
                     f"(N_max = {n_max}); run with --bins {n_max} for a full proof")
    metrics = schedule.metrics(instance)  # with SLOs, their attainment too
    data_out = CspPlan(mode="continuous", metrics=metrics, clients=instance.total_clients,
                       batches=N, heuristics={name: round(ms, 6) for ms, name, _ in heur},
                       plan=plan)
    version = version_of(backend)
    return Result(problem="infermax-csp", solver=solver, status=verdict.status,
                  objective=round(objective, 6), bound=None if bound is None else
                  round(bound, 6), runtime_s=time.perf_counter() - t0,
                  time_limit_s=time_limit_s, solver_version=f"llmopt {__version__} + {version}",
                  data=data_out, proof=verdict.proof, interrupted=out.interrupted,
                  notes=[*notes, out.message] if out.message else notes,
                  schedule=schedule)


@dataclass
class CspPlan(ScheduleData):
    """An infermax-csp solution's data (``Result.data``): besides the schedule's mode and
    metrics, the clients, N (the model's batches), each heuristic's makespan (ms) and the plan
    (one row per batch: evictions, prefill chunks, decodes), which ``--policy plan`` follows."""

    clients: int
    batches: int
    heuristics: dict[str, float]
    plan: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "clients": self.clients, "batches": self.batches,
                "metrics": self.metrics, "heuristics": self.heuristics, "plan": self.plan}


def _solve_model(data: CSPData, N: int, n_max: int, best_plan: list[dict[str, Any]],
                 best_ms: float, backend: str, deadline: float, limit: float,
                 workers: int | None, progress: Progress) -> tuple[Outcome, float | None]:
    """The CSP on ``N`` batches, hinted with the best heuristic plan, solved in the time left
    after building it; the outcome and its bound in ms."""
    progress.stage(f"InferMax CSP, {backend}, N = {N} batches (N_max = {n_max})")
    too_large = FOOTPRINT[backend].too_large(
        data.n * N, f"the CSP with N = {N} batches for {data.n} requests",
        "use fewer requests or --bins", version_of(backend), deadline)
    if too_large is not None:
        return too_large, None
    if backend == "cpsat":
        md, var = build_cpsat(data, N, hint=best_plan if len(best_plan) <= N else None,
                              upper_ms=best_ms)
        remaining = time_left(deadline, limit)
        if remaining is None:
            return out_of_time_while_building(cpsat_backend.version()), None
        out = cpsat_backend.solve_cpsat(
            md, time_limit_s=remaining, progress=progress, scale=1 / data.scale, unit=" ms",
            workers=workers, collect=lambda value: _plan_from_cpsat(data, var, N, value))
        bound_ms = None if out.bound is None else out.bound / data.scale
    else:
        m = infermax_mip.build(data, N)
        remaining = time_left(deadline, limit)
        if remaining is None:
            return out_of_time_while_building(highs_backend.version()), None
        try:
            out = highs_backend.solve_highs(
                m, time_limit_s=remaining, deadline=deadline - answer_reserve_s(limit),
                progress=progress, unit=" ms",
                warm_start=(infermax_mip.warm_start(m, data, best_plan, N)
                            if len(best_plan) <= N else None),
                collect=lambda value: infermax_mip.plan_from_model(m, data, N, value))
        except OutOfTime:
            return out_of_time_while_building(highs_backend.version()), None
        bound_ms = out.bound
    return out, bound_ms


def _plan_from_cpsat(data: CSPData, var: dict, N: int, value) -> list[dict[str, Any]]:
    c = np.array([[value(var["c"][i][j]) for j in range(1, N + 1)] for i in range(data.n)])
    e = np.array([[value(var["e"][i][j]) for j in range(1, N + 1)] for i in range(data.n)])
    dec = np.array([[value(var["dec"][i][j]) for j in range(1, N + 1)] for i in range(data.n)])
    return plan_from_values(data, c, e, dec.astype(bool))
