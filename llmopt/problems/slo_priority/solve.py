"""``solve(instance, solver, time_limit_s, progress, **options) -> Result`` for the problem
``slo-priority`` (Huang et al. 2025): maximize G = n / t (eq 2).

The result's ``objective`` is t / n in ms, the mean latency per request meeting its SLO, i.e.
1000 / G with G in requests/s; it is minimized, so its ``bound`` (1000 / an upper bound on G)
and gap read as for every other problem. G itself, its bound, the plan (batches in priority
order), and each request's wait, TTFT, TPOT, E2E and SLO verdict are in ``data``.

Solvers: ``sa`` (Algorithm 1), ``exhaustive`` (the paper's strawman), ``cpsat`` (the exact
model of ``exact``, started from SA's plan; ``auto`` is ``cpsat``). Every plan is re-evaluated
by ``model.evaluate``. A valid upper bound is given with every solver: G ≤ (the most requests
that can meet their SLOs together, bounded by ``exact.max_met_bound``) / (the lower bound of
``exact.total_latency_lower_bound`` on t), which proves e.g. the latency-ordered start optimal
with max batch 1 when it meets every SLO.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

from llmopt.backends.cpsat import version as cpsat_version
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, InternalError, LlmoptWarning, OptionError
from llmopt.problems.outcome import Sense, decide, keep_better, proof_text, tighter_bound
from llmopt.problems.slo_priority import exhaustive, sa
from llmopt.problems.slo_priority.exact import (
    ExactOutcome,
    max_met_bound,
    solve_exact,
    total_latency_lower_bound,
)
from llmopt.problems.slo_priority.model import (
    Evaluation,
    SloPriorityData,
    evaluate,
    g_per_s,
)
from llmopt.progress import SILENT, Progress
from llmopt.result import Result
from llmopt.version import __version__

PROBLEM = "slo-priority"
PROOF_TOLERANCE = 1e-9
OPTIONS = {
    "max_batch": "maximum batch size (default: system.clients)",
    "seed": "sa: random seed (default 0)",
    "acceptance": "sa: metropolis (default) | literal (Algorithm 1 line 36 as printed)",
    "t0": "sa: initial temperature T0 (default 500)",
    "t_thres": "sa: threshold temperature (default 20)",
    "iters": "sa: moves per temperature (default 100)",
    "tau": "sa: temperature decay (default 0.95)",
    "workers": "cpsat: CP-SAT threads (default 2)",
    "method": "cpsat: parametric (default: T_k for each k) | dinkelbach",
    "formulation": "cpsat, max batch > 1: intervals (default) | slots",
}


def _sa_options(options: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("seed", "iters"):
        if key in options:
            value = options[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (
                    key == "iters" and value < 1):
                raise OptionError("must be a non-negative integer" if key == "seed" else
                                  "must be a positive integer", field=f"--{key}", value=value)
            out[key] = value
    for key in ("t0", "t_thres", "tau"):
        if key in options:
            value = options[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
                    or (key == "tau" and value >= 1):
                raise OptionError("must be positive" + (" and below 1" if key == "tau" else ""),
                                  field=f"option {key}", value=value)
            out[key] = float(value)
    if "acceptance" in options:
        if options["acceptance"] not in sa.ACCEPTANCE:
            raise OptionError(f"must be one of {', '.join(sa.ACCEPTANCE)}",
                              field="option acceptance", value=options["acceptance"])
        out["acceptance"] = options["acceptance"]
    return out


SIMPLE_BOUND_PROOF = "G ≤ most requests meeting their SLOs together / lower bound on t"


def simple_bound(data: SloPriorityData) -> float:
    """An upper bound on G (requests/s) for every plan: an upper bound on the requests that can
    meet their SLOs together (``max_met_bound``, never above those that can meet theirs alone)
    over the least total latency any plan can have."""
    meetable = min(data.n - len(data.unmeetable), max_met_bound(data))
    return g_per_s(meetable, total_latency_lower_bound(data))


def solve(instance: Instance, solver: str = "auto", time_limit_s: float | None = 60.0,
          progress: Progress = SILENT, **options: Any) -> Result:
    t_start = time.perf_counter()
    if instance.system.instances != 1:
        raise InstanceError("slo-priority plans one model instance (Algorithm 2's planning "
                            "for several: llmopt.problems.slo_priority.cluster.plan_cluster)",
                            file=instance.label(), field="system.instances",
                            value=instance.system.instances)
    data = SloPriorityData.from_instance(instance, options.get("max_batch"))
    for w in data.warnings:
        warnings.warn(w, LlmoptWarning, stacklevel=2)
    sa_opts = _sa_options(options)
    workers = options.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise OptionError("must be a positive integer", field="option workers", value=workers)
    method = options.get("method", "parametric")
    if method not in ("parametric", "dinkelbach"):
        raise OptionError("must be parametric or dinkelbach", field="option method", value=method)
    formulation = options.get("formulation", "intervals")
    if formulation not in ("intervals", "slots"):
        raise OptionError("must be intervals or slots", field="--formulation",
                          value=formulation)
    limit = time_limit_s if time_limit_s is not None else 60.0
    notes = [f"warning: {w}" for w in data.warnings]
    detail: dict[str, Any] = {}
    interrupted = False
    bound_g = simple_bound(data)
    proof_of_bound = SIMPLE_BOUND_PROOF
    progress.stage("simulated annealing (Algorithm 1)")
    sa_out = sa.anneal(data, **sa_opts)
    detail["sa"] = {"start": sa_out.start, "early_stop": sa_out.early_stop,
                    "moves": sa_out.moves, "accepted": sa_out.accepted,
                    "g_per_s": sa_out.g_per_s, **sa_opts}
    best = evaluate(data, sa_out.batches)
    version = f"llmopt {__version__}"
    if solver == "exhaustive":
        progress.stage("exhaustive search over orders and batch splits")
        ex = exhaustive.search(data, deadline=t_start + limit)
        detail["exhaustive"] = {"leaves": ex.leaves, "complete": ex.complete}
        if ex.batches is not None:
            ev = evaluate(data, ex.batches)
            # a complete search's plan is optimal; a cut-short one replaces SA's only if better
            best = ev if ex.complete else keep_better(
                (best.g_per_s, best), (ev.g_per_s, ev), Sense.MAX, ties_to_incumbent=True)[1]
        if ex.complete:
            bound_g = tighter_bound(bound_g, best.g_per_s, Sense.MAX)
            proof_of_bound = proof_text("exhaustive search", f"over all {ex.leaves} orders of "
                                                             "batches (ordered set partitions)")
        else:
            notes.append(f"the time limit stopped the exhaustive search after {ex.leaves} "
                         "plans; the best so far is kept")
    elif solver in ("cpsat", "auto"):
        version = f"llmopt {__version__} + {cpsat_version()}"
        try:
            out = solve_exact(data, sa_out.batches, max(limit - (time.perf_counter()
                                                                 - t_start), 0.0),
                              workers=workers, progress=progress, method=method,
                              formulation=formulation)
        except KeyboardInterrupt:
            interrupted = True
            notes.append("interrupted: SA's plan and the simple bound are kept")
        else:
            found = evaluate(data, out.batches)
            best = keep_better((best.g_per_s, best), (found.g_per_s, found), Sense.MAX)[1]
            if out.bound_g_per_s < bound_g:
                bound_g = out.bound_g_per_s
                proof_of_bound = cpsat_proof(out, method)
            detail["cpsat"] = {"solves": out.solves, "clock_decimals": out.decimals,
                               "exact_clock": out.exact_clock,
                               "forbidden_plans": out.forbidden,
                               "rounding_windows": out.windows}
            if not out.exact_clock:
                notes.append(f"CP-SAT's clock counts 10^-{out.decimals} ms (times rounded "
                             "down, targets up: a relaxation; its bound holds)")
    elif solver != "sa":
        raise OptionError("unknown solver (known: auto, cpsat, sa, exhaustive)",
                          field="--solver", value=solver)
    g = best.g_per_s
    verdict = decide(g, bound_g, proof=proof_of_bound, sense=Sense.MAX,
                     tol=g * PROOF_TOLERANCE, what="G (requests/s)")
    bound_g = verdict.bound if verdict.bound is not None else bound_g
    objective = None if g == 0 else 1000.0 / g
    bound = None if bound_g == 0 else 1000.0 / bound_g
    notes.insert(0, f"G = {g:.6g} requests/s (eq 2): {best.n_met} of {data.n} requests "
                    f"meet their SLOs, t = {best.total_ms:,.1f} ms; objective = t / n = 1000 "
                    f"/ G ms; upper bound on G {bound_g:.6g} requests/s")
    if data.unmeetable:
        notes.append(f"unmeetable (miss their SLO even alone): {', '.join(data.unmeetable)}")
    return Result(
        problem=PROBLEM, solver=solver, status=verdict.status,
        objective=None if objective is None else round(objective, 6),
        bound=None if bound is None else round(bound, 6),
        runtime_s=time.perf_counter() - t_start, time_limit_s=time_limit_s,
        solver_version=version, proof=verdict.proof,
        interrupted=interrupted, notes=notes,
        data=PriorityPlan(g_per_s=g, g_bound_per_s=bound_g, n_met=best.n_met,
                          total_latency_ms=best.total_ms, max_batch=data.max_batch,
                          unmeetable=data.unmeetable, warnings=data.warnings,
                          plan=plan_data(data, best), runs=detail))


@dataclass
class PriorityPlan:
    """An slo-priority solution's data (``Result.data``): G (eq 2, requests/s) and its proven
    upper bound, the requests meeting their SLOs and the total latency t (ms) of the plan, the
    batch cap, the requests that miss their SLO even alone, the instance's warnings, the plan
    (``plan_data``: batches, priority, one row per request) and what each search ran
    (``runs``: "sa", and "exhaustive" or "cpsat")."""

    g_per_s: float
    g_bound_per_s: float
    n_met: int
    total_latency_ms: float
    max_batch: int
    unmeetable: list[str]
    warnings: list[str]
    plan: dict[str, Any]
    runs: dict[str, dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"g_per_s": self.g_per_s, "g_bound_per_s": self.g_bound_per_s,
                "n_met": self.n_met, "total_latency_ms": self.total_latency_ms,
                "max_batch": self.max_batch, "unmeetable": self.unmeetable,
                "warnings": self.warnings, **self.plan, **self.runs}


def priority_plan(result: Result) -> PriorityPlan:
    """The typed data of an slo-priority result."""
    if not isinstance(result.data, PriorityPlan):
        raise InternalError(f"not an slo-priority result: {result.problem} ({result.solver})")
    return result.data


def cpsat_proof(out: ExactOutcome, method: str = "parametric") -> str:
    """The proof line of the exact model's bound (see ``exact``'s module doc)."""
    clock = (f"an exact 10^-{out.decimals} ms clock" if out.exact_clock else
             f"a 10^-{out.decimals} ms clock rounded in the plans' favour")
    how = ("parametric in the number k of met requests: max over k of k / T_k with T_k "
           "proven (or bounded)" if method == "parametric" else
           "Dinkelbach's steps, max n·T − N·t proven (or bounded) at G_inc = N / T")
    return (f"CP-SAT, {how} on {clock}, over the plans not evaluated ({out.forbidden} "
            "evaluated, none better, forbidden)")


def plan_data(data: SloPriorityData, ev: Evaluation) -> dict[str, Any]:
    """The plan as JSON: batches of request ids in priority order, and one row per request."""
    return {
        "batches": [[data.ids[i] for i in b] for b in ev.batches],
        "priority": [data.ids[i] for b in ev.batches for i in b],
        "requests": [
            {"id": data.ids[i], "slo_class": data.slo_class[i], "batch": ev.batch_of[i],
             "batch_size": len(ev.batches[ev.batch_of[i]]), "wait_ms": ev.wait_ms[i],
             "ttft_ms": ev.ttft_ms[i], "tpot_ms": ev.tpot_ms[i], "e2e_ms": ev.e2e_ms[i],
             "met": ev.met[i]}
            for i in range(data.n)],
    }
