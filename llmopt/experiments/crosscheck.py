"""Differential checks: every problem, solver and policy that applies to an instance, run side
by side, each answer validated independently and the answers held against each other.

Findings (each one line) are contradictions: an answer the validator rejects, a solve that
fails where a heuristic succeeded, an exact result above a heuristic under the same time model,
two proven optima that differ, an optimum below another run's proven bound. An empty list means
every answer was valid and consistent. Used by the test suite on random small instances and by
``bench/crosscheck.py`` on a thousand of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from llmopt.data.cost import InferMaxProfile, PangLinearProfile
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
    """One answer: what ran, its status, objective and bound (ms), and the validator's say."""

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
                  any("checked independently" in n for n in verdict.notes), result.data)
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
