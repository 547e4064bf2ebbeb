"""Offline makespan bin packing: Pang et al. 2025, section IV.B, eqs 26–30.

Requests are assigned to clients (bins) so that the largest client load is minimal::

    min  max_j t_j                                  (26)
    s.t. Σ_j x_ij = 1              for every i      (27)
         Σ_i x_ij T_i ≤ t_j        for every j      (28)
         x_ij ∈ {0, 1}                              (29)
         t_j ≥ 0                                    (30)

with T_i = N^d_i · t_round, the decode time of request i when every round serves the full batch
J (t_round = decode-round time at J clients, 71 ms for the Pang profile at J = 200).

Since every T_i is an integer multiple of t_round, all models here work on the integer token
loads N^d_i and scale by t_round at the end: scaling by a positive constant keeps the argmin, and
integer loads make optimality checkable exactly (an incumbent whose load equals a proven integer
lower bound is optimal).

Solvers
-------
``auto``       exact fast path: LPT + improvement moves; optimal when the heuristic meets the
               closed-form lower bound of :func:`load_lower_bound`; otherwise the bin-packing
               bounds of :mod:`pcmax_bounds`, then bin completion (:mod:`pcmax_search`) and
               the arc-flow model (:mod:`pcmax_arcflow`) at T = bound, bound + 1, …,
               interleaved with the exact-repacking LNS, within the time limit (0: LPT and
               the closed-form bound at once).
``highs``      the Pyomo model of eqs 26–30 as written, solved by HiGHS.
``cpsat``      the same model in CP-SAT, as written.
``heuristic``  LPT + improvement moves only (optimal only when it meets the lower bound).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmopt.backends.common import Footprint, Outcome
from llmopt.data.cost import PangLinearProfile
from llmopt.data.instance import Instance
from llmopt.errors import InternalError, ProfileError
from llmopt.plugins import load
from llmopt.problems.outcome import decide, keep_better, meets_bound, proof_text
from llmopt.problems.pang import (
    pcmax_arcflow,
    pcmax_bounds,
    pcmax_cardinality,
    pcmax_search,
)
from llmopt.progress import SILENT, Progress
from llmopt.result import Result
from llmopt.version import __version__

if TYPE_CHECKING:
    import pyomo.environ as pyo
    from ortools.sat.python import cp_model

# HiGHS through Pyomo and CP-SAT (OR-Tools, which imports pandas), loaded when a model runs:
# most bin packings are closed by the bounds and the searches first
HIGHS = "llmopt.backends.highs"
CPSAT = "llmopt.backends.cpsat"

SOLVERS = ("auto", "highs", "cpsat", "heuristic")
LNS_MIN_BINS = 6  # with fewer clients an LNS group is the whole problem: go to CP-SAT at once
REPRODUCIBLE_STEPS = 5_000_000  # bin completion's budget in reproducible_assignment (seconds)


@dataclass(frozen=True)
class BinPacking:
    """Data of eqs 26–30: integer loads ``weights`` (N^d_i), ``bins`` (J) and ``ms_per_unit``
    (t_round), so that T_i = weights[i] · ms_per_unit."""

    ids: tuple[str, ...]
    weights: np.ndarray
    bins: int
    ms_per_unit: float

    @classmethod
    def from_instance(cls, instance: Instance) -> BinPacking:
        profile = instance.profile
        if not isinstance(profile, PangLinearProfile):
            raise ProfileError(
                "the binpacking problem needs a decode-round time: use a pang_linear profile",
                file=instance.label(), field="model", value=profile.name,
            )
        t_round = round(profile.decode_round_ms(instance.system.clients), 9)
        return cls(tuple(instance.ids), instance.output_tokens.copy(), instance.total_clients,
                   t_round)

    @property
    def n(self) -> int:
        return len(self.weights)

    def loads(self, assign: np.ndarray) -> np.ndarray:
        return np.bincount(assign, weights=self.weights, minlength=self.bins).astype(np.int64)

    def to_ms(self, units: float) -> float:
        return round(float(units) * self.ms_per_unit, 6)


def load_lower_bound(weights: np.ndarray, bins: int) -> tuple[int, str]:
    """Largest of the closed-form lower bounds on the optimal makespan of integer loads
    (:data:`pcmax_bounds.CHEAP`), with a text naming each value:

    - ceil(Σ w / J): the average load, rounded up because loads are integers;
    - max w: the largest request must go somewhere;
    - pigeonhole: of the k·J + r largest requests, the r clients holding the most of them hold
      at least r·(k + 1), so one of them carries at least the sum of the r·(k + 1) smallest of
      those requests divided by r (every prefix; r = 1 is the classic k·J + 1 argument).
    """
    value, _name, text = _cheap_bound(weights, bins)
    return value, text


def _cheap_bound(weights: np.ndarray, bins: int) -> tuple[int, str, str]:
    """(value, name of the bound giving it, text) for :func:`load_lower_bound`."""
    w = pcmax_bounds.sorted_weights(weights)
    value, name, parts = pcmax_bounds.best_bound(w, bins, pcmax_bounds.CHEAP)
    detail = ", ".join(f"{k}={v}" for k, v in parts.items() if v)
    return value, name, f"max({detail}) = {value} tokens ({name})"


def lpt(weights: np.ndarray, bins: int) -> np.ndarray:
    """Longest processing time first: each request, largest first, to the least-loaded client."""
    order = np.argsort(-weights, kind="stable")
    heap = [(0, j) for j in range(bins)]
    assign = np.empty(len(weights), dtype=np.int64)
    for i in order:
        load, j = heapq.heappop(heap)
        assign[i] = j
        heapq.heappush(heap, (load + int(weights[i]), j))
    return assign


def improve(weights: np.ndarray, bins: int, assign: np.ndarray, target: int,
            deadline: float) -> np.ndarray:
    """Local search on the makespan, improving ``assign`` in place (and returning it).

    Tries two neighbourhoods around a most-loaded client ``a`` until the makespan reaches
    ``target`` (a lower bound), no neighbour improves it, or ``deadline`` (perf_counter seconds)
    passes:

    1. exact two-client repartition: the requests of ``a`` and another client re-split optimally
       (subset-sum by bitset dynamic programming), tried against clients in increasing load;
    2. best-improvement move (one request of ``a`` to another client) or swap (one request each
       way) that most lowers the larger of the two loads, kept below the current makespan.
    """
    w = np.asarray(weights, dtype=np.int64)
    load = np.bincount(assign, weights=w, minlength=bins).astype(np.int64)
    while True:
        top = int(load.max())
        if top <= target or time.perf_counter() > deadline:
            return assign
        a = int(np.argmax(load))
        if _repartition_with_some_client(w, load, assign, a, top, deadline):
            continue
        if not _best_move_or_swap(w, load, assign, a, top):
            return assign


def _best_move_or_swap(w: np.ndarray, load: np.ndarray, assign: np.ndarray, a: int,
                       top: int) -> bool:
    mine = np.flatnonzero(assign == a)
    others = np.flatnonzero(assign != a)
    other_loads = load.copy()
    other_loads[a] = np.iinfo(np.int64).max
    b = int(np.argmin(other_loads))
    move_val = np.maximum(top - w[mine], load[b] + w[mine])
    move_val[load[b] + w[mine] >= top] = top
    r = int(np.argmin(move_val))
    best_val, best = int(move_val[r]), (int(mine[r]), -1)
    if len(others):
        d = w[mine][:, None] - w[others][None, :]
        lk = load[assign[others]][None, :]
        val = np.maximum(top - d, lk + d)
        val[(d <= 0) | (lk + d >= top)] = top
        r, c = divmod(int(np.argmin(val)), len(others))
        if int(val[r, c]) < best_val:
            best_val, best = int(val[r, c]), (int(mine[r]), int(others[c]))
    if best_val >= top:
        return False
    i, k = best
    if k < 0:
        assign[i] = b
        load[a] -= w[i]
        load[b] += w[i]
    else:
        c = int(assign[k])
        assign[i], assign[k] = c, a
        load[a] += w[k] - w[i]
        load[c] += w[i] - w[k]
    return True


def _repartition_with_some_client(w: np.ndarray, load: np.ndarray, assign: np.ndarray, a: int,
                                  top: int, deadline: float) -> bool:
    for b in np.argsort(load, kind="stable"):
        b = int(b)
        if b == a:
            continue
        if load[b] >= top - 1 or time.perf_counter() > deadline:
            return False
        pair = np.flatnonzero((assign == a) | (assign == b))
        side_a = best_two_way_split(w[pair], top - 1)
        if side_a is not None:
            assign[pair] = np.where(side_a, a, b)
            load[a] = int(w[pair][side_a].sum())
            load[b] = int(w[pair][~side_a].sum())
            return True
    return False


def best_two_way_split(weights: np.ndarray, cap: int) -> np.ndarray | None:
    """Split ``weights`` into two sides minimising the larger side sum, or None if that sum would
    exceed ``cap``. Exact: the reachable subset sums are a bitset (a Python int) per prefix."""
    total = int(weights.sum())
    reach = [1]
    for x in weights:
        reach.append(reach[-1] | (reach[-1] << int(x)))
    lo = total - cap  # side A must lie in [total - cap, cap]
    if lo > cap:
        return None
    window = (reach[-1] >> max(lo, 0)) & ((1 << (cap - max(lo, 0) + 1)) - 1)
    if not window:
        return None
    sums = [max(lo, 0) + k for k in range(window.bit_length()) if window >> k & 1]
    s = min(sums, key=lambda v: max(v, total - v))
    side_a = np.zeros(len(weights), dtype=bool)
    for k in range(len(weights) - 1, -1, -1):
        if not (reach[k] >> s) & 1:
            side_a[k] = True
            s -= int(weights[k])
    return side_a


def group_lns(weights: np.ndarray, bins: int, assign: np.ndarray, target: int, deadline: float,
              seed: int = 0, patience: int = 50, progress: Progress = SILENT,
              ms_per_unit: float = 1.0) -> np.ndarray:
    """Large-neighbourhood search with an exact inner solver: take a most-loaded client and 2–5
    other clients (drawn with probability rising with their slack below ``target``), and let
    CP-SAT re-pack all their requests so that every one of these clients stays below the
    current makespan. Improves ``assign`` in place (and returns it). Stops at ``target``, at
    ``deadline`` or after ``patience`` groups in a row that found no better packing."""
    w = np.asarray(weights, dtype=np.int64)
    rng = np.random.default_rng(seed)
    load = np.bincount(assign, weights=w, minlength=bins).astype(np.int64)
    failures = 0
    while failures < patience:
        top = int(load.max())
        if top <= target or time.perf_counter() > deadline or bins < 2:
            break
        hot = int(rng.choice(np.flatnonzero(load == top)))
        others = np.array([j for j in range(bins) if j != hot])
        slack = np.maximum(top - 1 - load[others], 0).astype(float) + 0.1
        size = min(int(rng.integers(2, 6)), len(others))
        group = [hot, *rng.choice(others, size=size, replace=False, p=slack / slack.sum())]
        members = np.flatnonzero(np.isin(assign, group))
        members = members[np.argsort(-w[members], kind="stable")]
        packed = _pack_exactly(w[members], len(group), top - 1, deadline)
        if packed is None:
            failures += 1
            continue
        failures = 0
        assign[members] = np.asarray(group)[packed]
        load = np.bincount(assign, weights=w, minlength=bins).astype(np.int64)
        improve(w, bins, assign, target, deadline)
        load = np.bincount(assign, weights=w, minlength=bins).astype(np.int64)
        progress.incumbent(float(load.max()) * ms_per_unit, None, " ms")
    return assign


def _pack_exactly(weights: np.ndarray, k: int, cap: int, deadline: float) -> np.ndarray | None:
    """Requests (non-increasing weights) into ``k`` clients of capacity ``cap``, or None."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = [[model.new_bool_var("") for _ in range(min(k, i + 1))] for i in range(len(weights))]
    for row in x:
        model.add_exactly_one(row)
    for j in range(k):
        model.add(sum(int(weights[i]) * row[j] for i, row in enumerate(x) if j < len(row)) <= cap)
    solver = load(f"{CPSAT}:subsolver")(max(min(0.05, deadline - time.perf_counter()), 0.01), 1)
    if load(f"{CPSAT}:solve_stoppable")(solver, model) not in (cp_model.OPTIMAL,
                                                            cp_model.FEASIBLE):
        return None
    return np.array([next(j for j, v in enumerate(row) if solver.value(v)) for row in x])


# --------------------------------------------------------------------------- exact models

def pyomo_model(bp: BinPacking) -> pyo.ConcreteModel:
    """Eqs 26–30 as written (loads in tokens; objective × t_round gives ms)."""
    import pyomo.environ as pyo

    m = pyo.ConcreteModel(name="pang_binpacking_eq26_30")
    m.I = pyo.RangeSet(0, bp.n - 1)
    m.J = pyo.RangeSet(0, bp.bins - 1)
    w = [int(x) for x in bp.weights]
    m.x = pyo.Var(m.I, m.J, domain=pyo.Binary)                      # (29)
    m.t = pyo.Var(m.J, domain=pyo.NonNegativeReals)                 # (30)
    m.tmax = pyo.Var(domain=pyo.NonNegativeReals)                   # (30)
    m.objective = pyo.Objective(expr=m.tmax, sense=pyo.minimize)    # (26), max_j t_j ≤ tmax
    m.makespan = pyo.Constraint(m.J, rule=lambda m, j: m.t[j] <= m.tmax)
    m.assign = pyo.Constraint(m.I, rule=lambda m, i: sum(m.x[i, j] for j in m.J) == 1)  # (27)
    m.client_load = pyo.Constraint(                                 # (28)
        m.J, rule=lambda m, j: sum(w[i] * m.x[i, j] for i in m.I) <= m.t[j]
    )
    return m


def pyomo_start(m: pyo.ConcreteModel, bp: BinPacking, assign: np.ndarray) -> pyo.ComponentMap:
    """The values of every variable of :func:`pyomo_model` for ``assign`` (a warm start)."""
    import pyomo.environ as pyo

    loads = bp.loads(assign)
    start = pyo.ComponentMap((m.x[i, j], float(assign[i] == j))
                             for i in range(bp.n) for j in range(bp.bins))
    start.update((m.t[j], float(loads[j])) for j in range(bp.bins))
    start[m.tmax] = float(loads.max())
    return start


def cpsat_model(bp: BinPacking, *, strengthen: bool = False, hint: np.ndarray | None = None,
                lower: int = 0, upper: int | None = None
                ) -> tuple[cp_model.CpModel, list[list[cp_model.IntVar]]]:
    """Eqs 26–30 in CP-SAT. With ``strengthen``: request i (in non-increasing weight order) may
    only use clients 0..i (identical clients are interchangeable, so some optimum has this form),
    and the makespan is restricted to [lower, upper]."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    w = [int(x) for x in bp.weights]
    order = np.argsort(-bp.weights, kind="stable") if strengthen else np.arange(bp.n)
    rank = np.empty(bp.n, dtype=np.int64)
    rank[order] = np.arange(bp.n)
    hi = upper if upper is not None else int(sum(w))
    x = []
    for i in range(bp.n):
        allowed = bp.bins if not strengthen else min(bp.bins, int(rank[i]) + 1)
        x.append([model.new_bool_var(f"x_{i}_{j}") for j in range(allowed)])
        model.add_exactly_one(x[i])                                   # (27)
    tmax = model.new_int_var(lower, hi, "tmax")
    for j in range(bp.bins):
        terms = [(x[i][j], w[i]) for i in range(bp.n) if j < len(x[i])]
        if terms:
            model.add(sum(wi * v for v, wi in terms) <= tmax)       # (28) with t_j folded in
    model.minimize(tmax)                                            # (26)
    if hint is not None:
        for i in range(bp.n):
            for j, v in enumerate(x[i]):
                model.add_hint(v, int(hint[i] == j))
    return model, x


def canonical_labels(bp: BinPacking, assign: np.ndarray) -> np.ndarray:
    """Relabel clients in order of first use by requests sorted by non-increasing weight, so the
    assignment satisfies the symmetry breaking of :func:`cpsat_model`."""
    order = np.argsort(-bp.weights, kind="stable")
    relabel: dict[int, int] = {}
    for i in order:
        relabel.setdefault(int(assign[i]), len(relabel))
    for j in range(bp.bins):
        relabel.setdefault(j, len(relabel))
    return np.array([relabel[int(c)] for c in assign], dtype=np.int64)


# --------------------------------------------------------------------------- solve

def solve(instance: Instance, solver: str = "auto", time_limit_s: float | None = 60.0,
          progress: Progress = SILENT) -> Result:
    """Solve eqs 26–30. A time limit of 0 returns LPT at once with the closed-form bound."""
    bp = BinPacking.from_instance(instance)
    t0 = time.perf_counter()
    deadline = t0 + (time_limit_s if time_limit_s is not None else float("inf"))
    lb, lb_name, lb_text = _cheap_bound(bp.weights, bp.bins)
    bound = _Bound(lb, lb_name, lb_text)
    progress.incumbent(None, bp.to_ms(lb), " ms")
    if solver in ("auto", "heuristic"):
        return _solve_fast(bp, solver, bound, t0, deadline, time_limit_s, progress)
    start = lpt(bp.weights, bp.bins)  # every solver starts from LPT + improvement moves
    try:  # Ctrl-C from here on keeps the start
        improve(bp.weights, bp.bins, start, lb, min(deadline, time.perf_counter() + 1.0))
        return _solve_named(bp, solver, bound, start, t0, deadline, time_limit_s, progress)
    except KeyboardInterrupt:
        return _result(bp, start, bound, solver, f"llmopt {__version__}", t0,
                       time_limit_s, interrupted=True,
                       notes=["interrupted before the solver returned: its start is kept"])


def _solve_named(bp: BinPacking, solver: str, bound: _Bound, start: np.ndarray, t0: float,
                 deadline: float, time_limit_s: float | None, progress: Progress) -> Result:
    """Eqs 26–30 with HiGHS or CP-SAT from ``start``, unless the start already meets the
    closed-form bound or the model would not fit in memory or time."""
    lb = bound.tokens
    if int(bp.loads(start).max()) == lb and solver in ("highs", "cpsat"):
        return _result(bp, start, bound, solver, f"llmopt {__version__}", t0,
                       time_limit_s, proof=meets_bound(f"load {lb} tokens", bound.text),
                       notes=[f"{solver} not run: its start already meets the lower bound"])
    progress.incumbent(bp.to_ms(int(bp.loads(start).max())), bp.to_ms(lb), " ms")
    too_large = FOOTPRINT.get(solver, Footprint(0.0, 0.0)).too_large(
        bp.n * bp.bins, f"eqs 26–30 with {bp.n} × {bp.bins} binaries", "use --solver auto", "",
        deadline)
    if too_large is not None:
        return _result(bp, start, bound, solver, f"llmopt {__version__}", t0,
                       time_limit_s, notes=[too_large.message])
    if solver == "highs":
        progress.stage(f"HiGHS on eqs 26–30 ({bp.n} × {bp.bins} binaries)")
        model = pyomo_model(bp)
        out = load(f"{HIGHS}:solve_highs")(
            model, time_limit_s=_remaining(deadline), progress=progress, scale=bp.ms_per_unit,
            unit=" ms", mip_abs_gap=1 - 1e-6, warm_start=pyomo_start(model, bp, start),
            collect=lambda value: _read_pyomo_assignment(model, bp, value),
        )
        return _from_outcome(bp, out, "highs", bound, t0, time_limit_s, "HiGHS", start)
    if solver == "cpsat":
        progress.stage(f"CP-SAT on eqs 26–30 ({bp.n} × {bp.bins} booleans)")
        model, x = cpsat_model(bp, hint=start)
        out = load(f"{CPSAT}:solve_cpsat")(
            model, time_limit_s=_remaining(deadline), progress=progress, scale=bp.ms_per_unit,
            unit=" ms", collect=lambda value: _read_cpsat_assignment(x, value),
        )
        return _from_outcome(bp, out, "cpsat", bound, t0, time_limit_s, "CP-SAT", start)
    raise ValueError(f"unknown solver {solver!r}")


# memory (MB) and building time (s) per binary x_ij, building and loading into the solver
# (1319 × 200: Pyomo builds in 1.6 s; with HiGHS about 1 GB in all)
FOOTPRINT = {"highs": Footprint(0.004, 15e-6, base_mb=200),
             "cpsat": Footprint(0.002, 5e-6, base_mb=200)}


@dataclass
class _Bound:
    """The best proven lower bound (tokens), the stable name of what proves it (a
    :data:`pcmax_bounds.BOUNDS` name, "complete search", "highs" or "cpsat") and its text."""

    tokens: int
    name: str
    text: str

    def raise_to(self, tokens: int, name: str, text: str) -> None:
        if tokens > self.tokens:
            self.tokens, self.name, self.text = tokens, name, text


STRONG_MAX_JOBS = 2000  # above, only mt_l2 of the bin-packing bounds (mt_l3, lifting: O(n) loops)
# shares of the time left, per round of the portfolio (see _solve_fast)
BC_SHARE = 0.25  # bin completion at T beside arc-flow (at least BC_MIN_S; BC_FIRST_S at most in
BC_MIN_S = 1.0   # the first round: it decides tight cases fast or not at all)
BC_FIRST_S = 2.0
BC_QUICK_S = 0.1  # bin completion's first slice when the cardinality model follows it
CARD_SHARE = 0.3  # the cardinality CP-SAT model at T (at least CARD_MIN_S)
CARD_MIN_S = 1.0
CARD_MAX_S = 2.0  # it packs the shapes it is for in well under a second, or not in a minute
CARD_FIRST_SHARE = 0.9  # of the jobs in the pigeonhole class, for the cardinality model first
BC_ALONE_SHARE = 0.6  # bin completion at T when the arc-flow graph is too large (then LNS)
AF_SHARE = 0.6   # arc-flow LP bound, then the arc-flow MIP at T
LNS_SHARE = 0.5  # exact-repacking LNS


def _remaining(deadline: float) -> float | None:
    if deadline == float("inf"):
        return None
    return max(deadline - time.perf_counter(), 0.01)


def _searched(t: int, by: str) -> str:
    return f"{t + 1} tokens (complete search: {by} found no assignment within {t} tokens)"


def _solve_fast(bp: BinPacking, solver: str, bound: _Bound, t0: float, deadline: float,
                time_limit_s: float | None, progress: Progress) -> Result:
    """LPT + improvement moves until the incumbent meets the closed-form bound; then, for
    ``auto``, the bin-packing bounds of :mod:`pcmax_bounds`, then rounds at T = the bound (raised
    by every refuted T) until the incumbent is proven or the time is up, each round: bin
    completion at T (:mod:`pcmax_search`; beside arc-flow a quarter of the time left, at least
    1 s, at most 2 s in the first round; without arc-flow 60 %), the arc-flow LP bound once and
    the arc-flow MIP at T when its graph is small enough
    (:mod:`pcmax_arcflow`, 60 % of what is left), and the exact-repacking LNS (half of what is
    left). A method that cannot decide (bin completion that stopped before its deadline, an
    arc-flow graph too large) is not run again. With at most :data:`LNS_MIN_BINS` clients and a
    graph too large, CP-SAT on the whole model (warm-started) gets what time is left."""
    assign = lpt(bp.weights, bp.bins)
    engines: dict[str, Callable[[], str]] = {}  # back ends used, for the solver version

    def finish(proof: str | None = None, interrupted: bool = False) -> Result:
        version = " + ".join([f"llmopt {__version__}", *(v() for v in engines.values())])
        return _result(bp, assign, bound, solver, version, t0, time_limit_s,
                       proof=proof, interrupted=interrupted)

    def meets(ub: int) -> Result:
        return finish(proof=meets_bound(f"load {ub} tokens", bound.text))

    progress.stage(f"LPT + improvement moves (lower bound {bound.tokens} tokens)")
    interrupted = False
    try:
        improve(bp.weights, bp.bins, assign, bound.tokens, deadline)
    except KeyboardInterrupt:
        interrupted = True
    ub = int(bp.loads(assign).max())

    def show() -> None:  # the incumbent and the bound so far
        progress.incumbent(bp.to_ms(ub), bp.to_ms(bound.tokens), " ms")

    def settle(decision: pcmax_search.Decision | pcmax_arcflow.ArcFlowDecision, t: int,
               method: str, bound_name: str, searched_by: str) -> Result | bool:
        """A decision at makespan ``t``: the proven result when it packed every request, True
        when it refuted ``t`` (the bound is raised), False when it could not decide."""
        if decision.status == "feasible":
            assign[:] = decision.assign
            return finish(proof=proof_text(method, f"packed every request within {t} tokens",
                                           bound=bound.text))
        if decision.status == "infeasible":
            bound.raise_to(t + 1, bound_name, _searched(t, searched_by))
            show()
            return True
        return False

    show()
    if ub == bound.tokens:
        return meets(ub)
    if interrupted or solver == "heuristic" or time.perf_counter() >= deadline:
        return finish(interrupted=interrupted)
    try:
        progress.stage("bin-packing lower bounds (mt_l2, mt_l3, lifting)")
        names = pcmax_bounds.STRONG if bp.n <= STRONG_MAX_JOBS else ("mt_l2",)
        value, name, _ = pcmax_bounds.best_bound(pcmax_bounds.sorted_weights(bp.weights),
                                                 bp.bins, names, stop_at=ub)
        bound.raise_to(value, name, f"{name} = {value} tokens")
        show()
        if ub == bound.tokens:
            return meets(ub)
        lns = bp.bins > LNS_MIN_BINS
        search_useful = True  # False once bin completion ends undecided before its deadline
        # the cardinality model where a pigeonhole class exists, last in each round; bin
        # completion's first slice is short where that class holds nearly every job and no LNS
        # follows (the non-uniform shape on few clients, where it is the cardinality model
        # that decides)
        found = pcmax_cardinality.pigeonhole_class(bp.weights, bp.bins, bound.tokens)
        use_cardinality = found is not None and bp.n * bp.bins <= pcmax_cardinality.MAX_CELLS
        cardinality_first = (found is not None and use_cardinality and not lns
                             and len(found[1]) >= CARD_FIRST_SHARE * bp.n)
        lp_done = False
        first_round = True

        def cardinality(t: int) -> Result | bool:
            """The cardinality model at ``t`` (see ``settle``); it stops being tried once it
            ends undecided before its slice is over (nothing more time would change)."""
            nonlocal use_cardinality
            engines["cpsat"] = load(f"{CPSAT}:version")
            progress.stage(f"cardinality CP-SAT at makespan {t} tokens")
            left = deadline - time.perf_counter()
            slice_end = time.perf_counter() + min(max(CARD_SHARE * left,
                                                      min(CARD_MIN_S, left)), CARD_MAX_S)
            outcome = settle(pcmax_cardinality.fits(bp.weights, bp.bins, t, slice_end), t,
                             "the cardinality CP-SAT model", "cardinality CP-SAT",
                             "the cardinality CP-SAT model")
            use_cardinality = time.perf_counter() >= slice_end - 0.01
            return outcome
        sizes = len(np.unique(bp.weights))
        arcs = (pcmax_arcflow.arc_count(bp.weights, ub)
                if sizes * (ub + 1) <= 20 * pcmax_arcflow.MAX_ARCS else None)
        use_arcs = arcs is not None and arcs <= pcmax_arcflow.MAX_ARCS
        arc_build_s = pcmax_arcflow.build_seconds(arcs or 0)
        while bound.tokens < ub:
            start = time.perf_counter()
            left = deadline - start
            if left <= 0:
                break
            t, progress_made, ran = bound.tokens, False, False
            if search_useful:
                ran = True
                # beside the arc-flow model bin completion gets short slices (arc-flow is the
                # stronger prover there); alone, most of the time (it finds tight packings)
                share = (BC_SHARE if use_arcs else
                         BC_ALONE_SHARE if lns or use_cardinality else 1.0)
                progress.stage(f"bin completion at makespan {t} tokens")
                slice_s = max(share * left, min(BC_MIN_S, left))
                if first_round and use_arcs:
                    slice_s = min(slice_s, BC_FIRST_S)
                if first_round and cardinality_first:
                    slice_s = min(slice_s, BC_QUICK_S)
                slice_end = start + slice_s
                outcome = settle(pcmax_search.fits(bp.weights, bp.bins, t, slice_end), t,
                                 "bin completion", "complete search", "bin completion")
                if isinstance(outcome, Result):
                    return outcome
                if outcome:
                    continue
                search_useful = time.perf_counter() >= slice_end - 0.01
            first_round = False
            if use_arcs and deadline - time.perf_counter() > arc_build_s:
                ran = True
                engines["highs"] = load(f"{HIGHS}:version")
                if not lp_done:
                    lp_done = True
                    progress.stage("arc-flow LP bound")
                    lp = pcmax_arcflow.lp_bound(bp.weights, bp.bins, t, ub,
                                                time.perf_counter() + AF_SHARE * left)
                    if lp > t:
                        bound.raise_to(lp, "arc-flow", _searched(lp - 1, "the arc-flow LP"))
                        show()
                        continue
                progress.stage(f"arc-flow MIP at makespan {t} tokens")
                left = deadline - time.perf_counter()
                share = AF_SHARE if lns else 1.0
                outcome = settle(pcmax_arcflow.fits(bp.weights, bp.bins, t,
                                                    time.perf_counter() + share * left), t,
                                 "the arc-flow MIP", "arc-flow", "the arc-flow MIP (HiGHS)")
                if isinstance(outcome, Result):
                    return outcome
                if outcome:
                    continue
            if lns:
                ran = True
                left = deadline - time.perf_counter()
                progress.stage(f"exact-repacking LNS (lower bound {bound.tokens} tokens)")
                engines["cpsat"] = load(f"{CPSAT}:version")
                before = ub
                group_lns(bp.weights, bp.bins, assign, bound.tokens,
                          time.perf_counter() + LNS_SHARE * left, progress=progress,
                          ms_per_unit=bp.ms_per_unit)
                ub = int(bp.loads(assign).max())
                if ub == bound.tokens:
                    return meets(ub)
                progress_made = ub < before
            if use_cardinality:
                ran = True
                outcome = cardinality(t)
                if isinstance(outcome, Result):
                    return outcome
                if outcome:
                    continue
            if not ran or not (progress_made or search_useful or use_arcs or use_cardinality):
                break  # nothing left that could decide within the time
        if bound.tokens >= ub:
            return meets(ub)
        if not lns and not use_arcs and time.perf_counter() < deadline:
            # few clients and a graph too large: CP-SAT on the whole model for the rest
            engines["cpsat"] = load(f"{CPSAT}:version")
            progress.stage(f"CP-SAT from incumbent {ub} (lower bound {bound.tokens} tokens)")
            model, x = cpsat_model(bp, strengthen=True, hint=canonical_labels(bp, assign),
                                   lower=bound.tokens, upper=ub)
            out = load(f"{CPSAT}:solve_cpsat")(
                model, time_limit_s=_remaining(deadline), progress=progress,
                scale=bp.ms_per_unit, unit=" ms",
                collect=lambda value: _read_cpsat_assignment(x, value))
            if out.solution is not None and int(bp.loads(out.solution).max()) <= ub:
                assign[:] = out.solution
                ub = int(bp.loads(assign).max())
            solver_bound = int(np.ceil((out.bound or 0) - 1e-6))
            if out.ending == "optimal" or solver_bound >= ub:
                bound.raise_to(ub, "cpsat", f"{ub} tokens (CP-SAT proved no assignment has "
                                            f"makespan below {ub} tokens)")
                return finish(proof=proof_text("CP-SAT", "proved no assignment has makespan "
                                                         f"below {ub} tokens"))
            bound.raise_to(min(solver_bound, ub), "cpsat", f"CP-SAT bound {solver_bound} tokens")
            if out.interrupted:
                return finish(interrupted=True)
    except KeyboardInterrupt:
        return finish(interrupted=True)
    return finish()


def reproducible_assignment(bp: BinPacking, max_steps: int = REPRODUCIBLE_STEPS
                            ) -> tuple[np.ndarray, bool]:
    """An assignment that depends only on the loads (the same on every run and machine, for
    replays built on the bin packing): LPT improved by local moves to a local optimum; if that
    does not meet the closed-form bounds, bin completion at each makespan from the best bound
    up to the local optimum's, within a budget of search steps shared by all of them (not
    seconds), and the first packing it finds. Returns it and whether it is proven optimal.
    Computed once per process for the same loads (:func:`reproducible_assignment_by`)."""
    found = reproducible_assignment_by(bp, math.inf, max_steps)
    assert found is not None  # no deadline
    return found


_REPRODUCIBLE: dict[tuple[bytes, int, int], tuple[np.ndarray, bool]] = {}
_REPRODUCIBLE_KEPT = 8  # loads remembered (offline and hybrid, and compare's replays, share one)


def reproducible_assignment_by(bp: BinPacking, deadline: float,
                               max_steps: int = REPRODUCIBLE_STEPS
                               ) -> tuple[np.ndarray, bool] | None:
    """:func:`reproducible_assignment` if it is known or can be finished by ``deadline``
    (perf_counter seconds); None when the deadline cut it (the search's step budget, not
    time, decides what it returns, so a cut one is not that assignment)."""
    key = (np.ascontiguousarray(bp.weights, dtype=np.int64).tobytes(), bp.bins, max_steps)
    if key not in _REPRODUCIBLE:
        found = _reproducible(bp, max_steps, deadline)
        if found is None:
            return None
        while len(_REPRODUCIBLE) >= _REPRODUCIBLE_KEPT:
            del _REPRODUCIBLE[next(iter(_REPRODUCIBLE))]
        _REPRODUCIBLE[key] = found
    assign, proven = _REPRODUCIBLE[key]
    return assign.copy(), proven


def _reproducible(bp: BinPacking, max_steps: int, deadline: float
                  ) -> tuple[np.ndarray, bool] | None:
    assign = lpt(bp.weights, bp.bins)
    w = pcmax_bounds.sorted_weights(bp.weights)
    lower, _, _ = pcmax_bounds.best_bound(w, bp.bins, pcmax_bounds.CHEAP)
    improve(bp.weights, bp.bins, assign, lower, deadline)
    if time.perf_counter() > deadline:
        return None
    upper = int(bp.loads(assign).max())
    if upper > lower:
        names = pcmax_bounds.STRONG if bp.n <= STRONG_MAX_JOBS else ("mt_l2",)
        lower = max(lower, pcmax_bounds.best_bound(w, bp.bins, names, stop_at=upper)[0])
    left = max_steps
    for makespan in range(lower, upper):
        decision = pcmax_search.fits(bp.weights, bp.bins, makespan, deadline, left)
        if time.perf_counter() > deadline:
            return None
        left -= decision.steps
        if decision.status == "feasible" and decision.assign is not None:
            return np.asarray(decision.assign, dtype=np.int64), True
        if decision.status != "infeasible" or left <= 0:
            return assign, False
    return assign, True  # every makespan below its own was refuted (or none was left)


def _read_cpsat_assignment(x: list[list[cp_model.IntVar]], value) -> np.ndarray:
    return np.array([next(j for j, v in enumerate(row) if value(v)) for row in x], dtype=np.int64)


def _read_pyomo_assignment(m: pyo.ConcreteModel, bp: BinPacking, value) -> np.ndarray:
    return np.array([max(range(bp.bins), key=lambda j: value(m.x[i, j]))
                     for i in range(bp.n)], dtype=np.int64)


def _from_outcome(bp: BinPacking, out: Outcome, solver: str, bound: _Bound, t0: float,
                  time_limit_s: float | None, name: str, start: np.ndarray) -> Result:
    """The solver's answer, or the start it was given when it returned nothing better."""
    solver_bound = int(np.ceil((out.bound or 0) - 1e-6))
    bound.raise_to(solver_bound, solver, f"{name} dual bound = {solver_bound} tokens")
    if out.ending == "infeasible":  # cannot happen for J ≥ 1, reported rather than hidden
        return Result("binpacking", solver, "infeasible", None, None,
                      time.perf_counter() - t0, time_limit_s, out.solver_version)
    start_load = int(bp.loads(start).max())
    solver_plan = (None if out.solution is None
                   else (int(bp.loads(out.solution).max()), out.solution))
    ub, assign = keep_better((start_load, start), solver_plan)
    if bound.tokens >= ub:
        bound.tokens = int(ub)  # a dual bound rounded above the incumbent: the proven value
        proof = (meets_bound(f"load {ub} tokens", bound.text) if bound.name != solver
                 else proof_text(name, f"proved optimality: makespan {ub} tokens")
                 if out.ending == "optimal"
                 else proof_text(name, "dual bound rounds up to the incumbent: makespan "
                                       f"{ub} tokens"))
        return _result(bp, assign, bound, solver, out.solver_version, t0, time_limit_s,
                       proof=proof)
    return _result(bp, assign, bound, solver, out.solver_version, t0,
                   time_limit_s, interrupted=out.interrupted,
                   notes=[out.message] if out.message else [])


def _result(bp: BinPacking, assign: np.ndarray, bound: _Bound, solver: str,
            version: str, t0: float, time_limit_s: float | None, *, proof: str | None = None,
            interrupted: bool = False, notes: list[str] | None = None) -> Result:
    """The result of ``assign``: its status from :func:`outcome.decide` on the makespan and
    the bound in tokens (``proof``: what makes ``bound`` tight, when the caller has one)."""
    loads = bp.loads(assign)
    verdict = decide(int(loads.max()), bound.tokens, proof=proof,
                     what="the makespan in tokens")
    return Result(
        problem="binpacking",
        solver=solver,
        status=verdict.status,
        objective=bp.to_ms(loads.max()),
        bound=bp.to_ms(bound.tokens),
        runtime_s=time.perf_counter() - t0,
        time_limit_s=time_limit_s,
        solver_version=version,
        proof=verdict.proof,
        interrupted=interrupted,
        notes=notes or [],
        data=PackingData(
            t_round_ms=bp.ms_per_unit,
            assignment={rid: int(c) for rid, c in zip(bp.ids, assign, strict=True)},
            loads=[bp.to_ms(x) for x in loads],
            lower_bound_name=bound.name, lower_bound_tokens=int(bound.tokens),
        ),
    )


@dataclass
class PackingData:
    """A bin packing's solution data (``Result.data``): t_round (ms per decode round), each
    request's client, each client's load (ms) and the lower bound behind the result's bound
    (the stable name of what proves it and its tokens; the validator recomputes it)."""

    t_round_ms: float
    assignment: dict[str, int]
    loads: list[float]
    lower_bound_name: str
    lower_bound_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"t_round_ms": self.t_round_ms, "assignment": self.assignment,
                "loads": self.loads,
                "lower_bound": {"name": self.lower_bound_name,
                                "tokens": self.lower_bound_tokens}}


def packing_data(packing: Result) -> PackingData:
    """The typed data of a bin-packing result (an infeasible one has none: a bug for J ≥ 1)."""
    if not isinstance(packing.data, PackingData):
        raise InternalError(f"a bin packing without its data (status {packing.status})")
    return packing.data
