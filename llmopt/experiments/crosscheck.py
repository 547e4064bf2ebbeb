"""Differential checks: every problem, solver and policy that applies to an instance, run side
by side, each answer validated independently and the answers held against each other.
Instances on a ``bilinear`` profile get slo-priority (Huang et al. 2025): SA, CP-SAT in its
variants, and the exhaustive search where it is small enough.

Findings (each one line) are contradictions: an answer the validator rejects, a solve that
fails where a heuristic succeeded, an exact result above a heuristic under the same time model,
two proven optima that differ, an optimum below another run's proven bound. An empty list means
every answer was valid and consistent. Used by the test suite on random small instances and by
``bench/crosscheck.py`` on a thousand of them (``bench/slo_priority_crosscheck.py``: 500
slo-priority instances).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import numpy as np

from llmopt.data.cost import BilinearProfile, InferMaxProfile, PangLinearProfile
from llmopt.data.instance import Instance, instance_from_mapping
from llmopt.errors import LlmoptError
from llmopt.policies.registry import POLICIES, incumbent_policies
from llmopt.policies.replay import replay_result
from llmopt.problems.api import solve
from llmopt.problems.base import Bound
from llmopt.problems.infermax.bounds import infermax_bounds
from llmopt.problems.pang.bounds import pd_bounds
from llmopt.result import Result
from llmopt.validate import check_solution

PD_POLICIES = tuple(incumbent_policies("pd-competition"))
# the InferMax-family schedulers that give the CSP its incumbents, and the hypothetical ones
INFERMAX_SCHEDULERS = tuple(name for name, info in POLICIES.items()
                            if "infermax-csp" in info.incumbent_for
                            or (info.family == "infermax" and info.hypothetical))
TOL = 2e-3  # ms


@dataclass
class Run:
    """One answer: what ran, its status, objective and bound (ms), the validator's say, and
    the problem-specific keys of its solution file (``data``, as written)."""

    label: str
    status: str
    objective: float | None
    bound: float | None
    checked_exactly: bool = False
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class CrossCheck:
    runs: list[Run] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    def record(self, instance: Instance, label: str, result: Result) -> Run:
        """Validate ``result`` as its solution file and keep it."""
        sol = json.loads(json.dumps(result.to_dict(instance)))
        verdict = check_solution(instance, sol)
        for reason in verdict.reasons:
            self.findings.append(f"{label}: the validator rejects it: {reason}")
        run = Run(label, result.status, result.objective, result.bound,
                  any("checked independently" in n for n in verdict.notes),
                  result.data.to_json())
        self.runs.append(run)
        return run

    def attempt(self, instance: Instance, label: str, fn: Callable[[], Result]) -> Run | None:
        try:
            return self.record(instance, label, fn())
        except LlmoptError as exc:
            self.runs.append(Run(label, "refused", None, None, data={"error": str(exc)}))
            return None
        except Exception as exc:  # a crash is a finding, not the end of the check
            self.findings.append(f"{label}: crashed: {type(exc).__name__}: {exc}")
            return None


def cross_check(instance: Instance, time_limit_s: float = 5.0,
                exact_models_up_to: int = 6) -> CrossCheck:
    """Run and compare everything that applies to ``instance`` (see the module doc); the
    faithful MIP of eqs 1–25 only on instances of at most ``exact_models_up_to`` requests."""
    out = CrossCheck()
    if isinstance(instance.profile, PangLinearProfile):
        _pang(instance, out, time_limit_s, exact_models_up_to)
    elif isinstance(instance.profile, InferMaxProfile):
        _infermax(instance, out, time_limit_s)
    elif isinstance(instance.profile, BilinearProfile):
        _slo_priority(instance, out, time_limit_s, exact_models_up_to)
    return out


def _below_every_schedule(out: CrossCheck, bounds: list[Bound], runs: list[Run],
                          what: str) -> None:
    """Closed-form lower bounds are no higher than any schedule under their time model."""
    for b in bounds:
        for run in runs:
            if run.objective is not None and run.objective < b.value_ms - TOL:
                out.findings.append(f"{run.label}: objective {run.objective} below the lower "
                                    f"bound {b.name} = {b.value_ms} ({what})")


def _replayed(instance: Instance, policy: str) -> Result:
    return replay_result(instance, policy)[0]


def _pang(instance: Instance, out: CrossCheck, limit: float, small: int) -> None:
    bp = [out.attempt(instance, f"binpacking/{s}",
                      partial(solve, instance, "binpacking", s, limit))
          for s in ("auto", "cpsat", "highs")]
    _agree(out, [r for r in bp if r is not None])
    replayed = {}
    for policy in PD_POLICIES:
        run = out.attempt(instance, f"replay/{policy}", partial(_replayed, instance, policy))
        if run is not None and run.objective is not None:
            replayed[policy] = run.objective
    replays = [r for r in out.runs if r.label.startswith("replay/")]
    _below_every_schedule(out, pd_bounds(instance, "replay", limit), replays, "replay model")
    for model in ("stage", "replay"):
        runs = []
        variants = [("compact", "cpsat"), ("compact", "highs")]
        if model == "stage" and instance.num_requests <= small:
            variants.append(("original", "highs"))
        for formulation, solver in variants:
            label = f"pd-competition/{formulation}/{solver}/{model}"
            run = out.attempt(instance, label, partial(
                solve, instance, "pd-competition", solver, limit, formulation=formulation,
                time_model=model,
                bins=instance.num_requests if instance.num_requests <= small else None))
            if run is None:
                continue
            runs.append(run)
            if replayed and run.status not in ("optimal", "feasible"):
                out.findings.append(f"{label}: status {run.status} although the replays "
                                    f"found schedules ({min(replayed.values()):.3f} ms)")
            heuristics = dict(run.data.get("heuristics", {}))
            if model == "replay":
                heuristics.update(replayed)
            for name, value in heuristics.items():
                if run.objective is not None and run.objective > value + TOL:
                    out.findings.append(f"{label}: objective {run.objective} above the "
                                        f"heuristic {name} ({value:.3f} ms)")
            if run.status == "optimal" and instance.num_requests <= small \
                    and not run.checked_exactly:
                out.findings.append(f"{label}: optimal on {instance.num_requests} requests "
                                    "but not confirmed by the validator's enumeration")
        _agree(out, runs)
        _below_every_schedule(out, pd_bounds(instance, model, limit), runs, f"{model} model")


def _infermax(instance: Instance, out: CrossCheck, limit: float) -> None:
    heuristics = {}
    for name in INFERMAX_SCHEDULERS:
        run = out.attempt(instance, f"replay/{name}", partial(_replayed, instance, name))
        if run is not None and run.objective is not None and not POLICIES[name].hypothetical:
            heuristics[name] = run.objective
    feasible = [r for r in out.runs if r.label.startswith("replay/")
                and not r.data.get("unlimited_memory")]
    runs: list[Run] = []
    for solver in ("cpsat", "highs"):
        label = f"infermax-csp/{solver}"
        run = out.attempt(instance, label, partial(solve, instance, "infermax-csp", solver,
                                                   limit))
        if run is None:
            continue
        runs.append(run)
        if heuristics and run.status not in ("optimal", "feasible"):
            out.findings.append(f"{label}: status {run.status} although heuristics solved it")
        for name, value in heuristics.items():
            if run.objective is not None and run.objective > value + TOL:
                out.findings.append(f"{label}: objective {run.objective} above the heuristic "
                                    f"{name} ({value:.3f} ms)")
    _agree(out, runs)
    _below_every_schedule(out, infermax_bounds(instance), feasible + runs, "InferMax model")


def ordered_partitions(n: int, max_batch: int) -> int:
    """The plans of n requests in batches of at most ``max_batch`` (ordered set partitions):
    the leaves of slo-priority's exhaustive search."""
    count = [1] + [0] * n
    for m in range(1, n + 1):
        count[m] = sum(math.comb(m, s) * count[m - s] for s in range(1, min(max_batch, m) + 1))
    return count[n]


def _slo_priority(instance: Instance, out: CrossCheck, limit: float, small: int) -> None:
    """SA, CP-SAT (parametric; Dinkelbach and the slot model up to ``small`` + 1 requests) and
    the exhaustive search (up to ``EXHAUSTIVE_MAX_PLANS`` plans), one CP-SAT worker each. Beyond
    the objectives (t / n, ``_agree``), G itself: proven optima equal within 1e-9, no bound on
    G below a plan's G; an optimum on at most ``small`` requests confirmed by the validator's
    own enumeration."""
    n, max_batch = instance.num_requests, instance.system.clients
    variants: list[tuple[str, str, dict[str, Any]]] = [("sa", "sa", {}),
                                                       ("cpsat", "cpsat", {"workers": 1})]
    if n <= small + 1:
        variants.append(("cpsat-dinkelbach", "cpsat", {"workers": 1, "method": "dinkelbach"}))
        if max_batch > 1:
            variants.append(("cpsat-slots", "cpsat", {"workers": 1, "formulation": "slots"}))
    if ordered_partitions(n, max_batch) <= EXHAUSTIVE_MAX_PLANS:
        variants.append(("exhaustive", "exhaustive", {}))
    runs = [run for name, solver, options in variants
            if (run := out.attempt(instance, f"slo-priority/{name}", partial(
                solve, instance, "slo-priority", solver, limit, **options))) is not None]
    _agree(out, runs)
    best = max((r.data["g_per_s"] for r in runs), default=0.0)
    proven = [r for r in runs if r.status == "optimal"]
    for r in runs:
        if r.data["g_bound_per_s"] < best * (1 - 1e-9):
            out.findings.append(f"{r.label}: bound on G {r.data['g_bound_per_s']!r} below a "
                                f"plan of G = {best!r} requests/s")
    for r in proven:
        if not math.isclose(r.data["g_per_s"], proven[0].data["g_per_s"], rel_tol=1e-9):
            out.findings.append(f"{r.label} and {proven[0].label} prove different G: "
                                f"{r.data['g_per_s']!r} vs {proven[0].data['g_per_s']!r}")
        if n <= small and r.objective is not None and not r.checked_exactly:
            out.findings.append(f"{r.label}: optimal on {n} requests but not confirmed by the "
                                "validator's enumeration")


def _agree(out: CrossCheck, runs: list[Run]) -> None:
    """Proven optima equal; no objective below another run's proven bound."""
    for a in runs:
        for b in runs:
            if a is b or a.objective is None or b.bound is None:
                continue
            if a.objective < b.bound - TOL:
                out.findings.append(f"{a.label}: objective {a.objective} below the bound "
                                    f"{b.bound} that {b.label} proved")
            if a.status == b.status == "optimal" and not math.isclose(
                    a.objective, b.objective or 0.0, abs_tol=TOL):
                out.findings.append(f"{a.label} and {b.label} prove different optima: "
                                    f"{a.objective} vs {b.objective}")


# --------------------------------------------------------------------------- random instances

PANG_PROFILE = {"family": "pang_linear", "name": "pang-random",
                "source": "Pang et al. 2025 V.A (25 + 0.13 ms/token prefill, 29 + 0.21 ms/client "
                          "decode), prefill levels every 64 tokens",
                "prefill": {"overhead_ms": 25.0, "per_token_ms": 0.13},
                "decode": {"overhead_ms": 29.0, "per_client_ms": 0.21},
                "prefill_level_step": 64}
INFERMAX_PROFILE = {"family": "infermax", "name": "infermax-random",
                    "source": "round coefficients of the InferMax cost model for tests",
                    "bias_ms": 1.0, "per_token_ms": 0.1, "decode_kv_ms": 0.01,
                    "prefill_attention_ms": 0.001, "per_prefill_request_ms": 0.05}


HUANG_TABLE2 = {"prefill": {"alpha": 0.1, "beta": 5.7, "gamma": 0.01, "delta": 43.67},
                "decode": {"alpha": 0.0002, "beta": 0.275, "gamma": 0.00088, "delta": 15.85}}
PAPER_SLOS_MS = {"ttft_slo_ms": 10000.0, "tpot_slo_ms": 50.0, "e2e_slo_ms": 30000.0}
SLO_LEVELS = (5.0, 1.0, 0.3, 0.1, 0.02)  # x the paper's targets: loose to mostly unmeetable
EXHAUSTIVE_MAX_PLANS = 400_000


def random_slo_priority_instance(seed: int, min_requests: int = 5,
                                 max_requests: int = 10) -> Instance:
    """An slo-priority instance: ``min_requests``–``max_requests`` requests (input 8–1,024,
    output 2–600 tokens, 1 in 20 of one token), max batch 1–4, and the targets of chat (TTFT,
    TPOT), code (E2E) or both at the paper's values times one factor of ``SLO_LEVELS`` per
    instance (1 request in 10 ten times tighter still). Half use Table 2's predictor (a clock
    of 10^-5 ms, rounded to 10^-3 at this size), half its coefficients each scaled by a random
    factor (17 significant digits: a clock rounded to 10^-3 ms or coarser). Ties and rounding
    edges: 1 request in 5 repeats an earlier one (lengths and targets); 1 in 4 has its target
    at exactly the E2E (or TTFT) it reaches after another request alone, or within ±5e-7 ms of
    it (inside the 1e-6 ms tolerance of meeting a target), and 1 in 10 of the chat requests
    its TPOT target at exactly its TPOT at a random batch size."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(min_requests, max_requests + 1))
    max_batch = int(rng.integers(1, 5))
    if rng.random() < 0.5:
        coefficients = HUANG_TABLE2
    else:
        coefficients = {part: {k: float(v * rng.uniform(0.5, 1.5)) for k, v in c.items()}
                        for part, c in HUANG_TABLE2.items()}
    profile = {"family": "bilinear", "name": "huang-random",
               "source": "Huang et al. 2025 Table 2, or its coefficients scaled at random",
               **coefficients}
    level = float(rng.choice(SLO_LEVELS))
    reqs: list[dict[str, Any]] = []
    for k in range(n):
        if reqs and rng.random() < 0.2:
            reqs.append({**reqs[int(rng.integers(len(reqs)))], "id": f"r{k}"})
            continue
        factor = level * (0.1 if rng.random() < 0.1 else 1.0)
        kind = rng.choice(["chat", "code", "both"])
        keys = {"chat": ("ttft_slo_ms", "tpot_slo_ms"), "code": ("e2e_slo_ms",),
                "both": tuple(PAPER_SLOS_MS)}[str(kind)]
        reqs.append({"id": f"r{k}", "input_tokens": int(rng.integers(8, 1025)),
                     "output_tokens": 1 if rng.random() < 0.05 else int(rng.integers(2, 601)),
                     **{key: PAPER_SLOS_MS[key] * factor for key in keys}})
    model = cast(BilinearProfile, instance_from_mapping({
        "name": "probe", "model": profile, "system": {"clients": max_batch},
        "requests": reqs}).profile)

    def times(r: dict[str, Any], b: int) -> tuple[float, float]:
        prefill = model.prefill_ms(b, r["input_tokens"])
        return prefill, prefill + model.request_decode_ms(b, r["input_tokens"],
                                                          r["output_tokens"])

    for k, r in enumerate(reqs):
        if n > 1 and rng.random() < 0.25:
            other = reqs[(k + 1 + int(rng.integers(n - 1))) % n]
            wait = times(other, 1)[1]
            prefill, exec_ms = times(r, 1)
            key = "e2e_slo_ms" if "e2e_slo_ms" in r else "ttft_slo_ms"
            nudge = float(rng.choice([0.0, 0.0, 5e-7, -5e-7]))
            r[key] = wait + (exec_ms if key == "e2e_slo_ms" else prefill) + nudge
        if "tpot_slo_ms" in r and r["output_tokens"] > 1 and rng.random() < 0.1:
            prefill, exec_ms = times(r, int(rng.integers(1, max_batch + 1)))
            r["tpot_slo_ms"] = (exec_ms - prefill) / (r["output_tokens"] - 1)
    return instance_from_mapping({"name": f"random-slo-priority-{seed}", "model": profile,
                                  "system": {"clients": max_batch}, "requests": reqs})


def random_pd_instance(seed: int, max_requests: int = 12) -> Instance:
    """A small PD-competition instance of the kind that exposed the memory bug: 2 to
    ``max_requests`` requests (input 1–400, output 1–600 tokens), 1–5 clients, a KV capacity
    between the largest request and twice that (or none), and sometimes a smaller largest
    prefill stage."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, max_requests + 1))
    inp = rng.integers(1, 401, n)
    out = rng.integers(1, 601, n)
    system: dict[str, Any] = {"clients": int(rng.integers(1, 6))}
    biggest = int((inp + out).max())
    if rng.random() < 0.8:
        system["kv_capacity"] = int(rng.integers(biggest, 2 * biggest + 1))
    system["max_prefill_tokens"] = (int(rng.integers(int(inp.max()), 1201))
                                    if rng.random() < 0.5 else 1200)
    return instance_from_mapping({
        "name": f"random-pd-{seed}", "model": PANG_PROFILE, "system": system,
        "requests": [{"id": f"q{i}", "input_tokens": int(a), "output_tokens": int(b)}
                     for i, (a, b) in enumerate(zip(inp, out, strict=True))]})


def random_infermax_instance(seed: int, max_requests: int = 3) -> Instance:
    """A tiny continuous-batching instance: 1 to ``max_requests`` requests (input 1–4, output
    1–4 tokens), M between the largest request's I + O − 1 and twice that, C in 2–8; offline,
    or with arrivals within 10 ms."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, max_requests + 1))
    inp = rng.integers(1, 5, n)
    out = rng.integers(1, 5, n)
    biggest = int((inp + out - 1).max())
    arrivals = np.zeros(n) if rng.random() < 0.6 else np.round(rng.uniform(0, 10, n), 3)
    return instance_from_mapping({
        "name": f"random-infermax-{seed}", "model": INFERMAX_PROFILE,
        "system": {"clients": n, "kv_capacity": int(rng.integers(biggest, 2 * biggest + 1)),
                   "max_batch_tokens": int(rng.integers(2, 9))},
        "requests": [{"id": f"r{i}", "input_tokens": int(a), "output_tokens": int(b),
                      "arrival_ms": float(t)}
                     for i, (a, b, t) in enumerate(zip(inp, out, arrivals, strict=True))]})
