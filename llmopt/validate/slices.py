"""Checks of slice-level replays (problem ``replay``, mode ``slices``: SCLS and its Fig. 15
ladder, Cheng et al. 2024), independent of the simulation that made them: nothing here imports
``llmopt.sim``, ``llmopt.policies`` or ``llmopt.problems``. Every slice is re-derived from the
instance, the file's slice length S and the profile's fields (eqs 1–9 and Algorithm 2, copied
here), request by request in start order:

- a slice (one padded static batch) holds distinct requests, each with output left; it starts
  no earlier than each request's arrival and the end of that request's previous slice;
- a re-batched request prefills its input plus the tokens it generated so far (its prompt), and
  every prompt is padded to the batch's longest: L_i = max prompt, pad = L_i − prompt;
- it runs L_o = min(S, the most output any member has left) iterations (S, or until every
  member finished: section 4.2's early return); each member generates min(left, L_o) tokens and
  the invalid tokens L_o − generated;
- its duration is T_serve(N, L_i, L_o) of eqs 1–4, summed iteration by iteration (eq 2 as a
  sum, not in closed form), within ``tolerance`` (2 µs + 1e-9 relative: the file rounds times
  to the nanosecond);
- its memory fits: (L_i + S)·N·Δ ≤ ζ·M_ava (eqs 5–9, M_ava of eq 6), or Algorithm 2's rules;
- no two slices overlap on one model instance, and instances are 0 … ``system.instances`` − 1;
- every request is served exactly to its output length over its slices;
- every metric in the file (throughput, response mean and p95, per-instance completion times and
  their standard deviation, batch size, pad and invalid tokens per request, …) and the
  objective (the last finish) equal the recomputed ones.

A replay carries no claim of optimality: its status must be ``feasible``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from llmopt.data.instance import Instance
from llmopt.validate.claims import Evidence, Verdict, tolerance
from llmopt.validate.fields import is_int, is_number
from llmopt.validate.scls import SclsModel

MAX_REASONS = 25          # reasons listed per file; the rest are counted
METRIC_ABS_TOL = 1e-3     # metrics are rounded to 6 decimals from times rounded to 1e-6 ms
METRIC_REL_TOL = 1e-6
LIST_FIELDS = ("prompt_tokens", "generated", "pad_tokens", "invalid_tokens")


class _Reasons:
    """Reasons, the first ``MAX_REASONS`` kept."""

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.more = 0

    def first(self, text: str) -> None:
        """A reason that sums up many: listed first, always kept."""
        self.kept.insert(0, text)

    def add(self, text: str) -> None:
        if len(self.kept) < MAX_REASONS:
            self.kept.append(text)
        else:
            self.more += 1

    def done(self) -> list[str]:
        return self.kept + ([f"… and {self.more} more reasons"] if self.more else [])


def check_slice_replay(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    """A slice-level replay (see the module doc); the evidence is its recomputed makespan."""
    ev = Evidence()
    reasons = _Reasons()
    try:
        ev.objective = _check(instance, sol, reasons)
    finally:
        verdict.reasons.extend(reasons.done())
    if ev.objective is not None and not verdict.reasons:
        verdict.notes.append(
            "every slice re-derived: prompts, padding, tokens, duration by eqs 1-4 summed per "
            "iteration (tolerance 0.002 ms + 1e-9 relative), memory by eqs 5-9 / Algorithm 2 "
            "at S, no overlap per instance; metrics recomputed")
    return ev


def _check(instance: Instance, sol: dict[str, Any], reasons: _Reasons) -> float | None:
    profile: Any = instance.profile
    if sol.get("status") != "feasible":
        reasons.add("a replayed schedule carries no proof or infeasibility claim; status must "
                    f"be feasible, not {sol.get('status')!r}")
        return None
    if profile.family != "scls":
        reasons.add(f"profile {profile.name} is not of the scls family: slices are timed by "
                    "eqs 1-4 of an scls profile")
        return None
    s, workers = sol.get("slice_length"), sol.get("instances")
    if not is_int(s) or s < 1:
        reasons.add(f"slice_length {s!r} is not an integer >= 1")
        return None
    if workers != instance.system.instances:
        reasons.add(f"instances {workers!r} is not the instance's system.instances "
                    f"{instance.system.instances}")
        return None
    if sol.get("memory_rule") != profile.memory_rule:
        reasons.add(f"memory_rule {sol.get('memory_rule')!r} is not the profile's "
                    f"{profile.memory_rule!r}")
    slices = sol.get("slices")
    if not isinstance(slices, list) or not all(isinstance(x, dict) for x in slices):
        reasons.add("slices must be a list of objects")
        return None
    model = SclsModel(profile, s)
    index = {r.id: k for k, r in enumerate(instance.requests)}
    n_req = len(index)
    inputs = [r.input_tokens for r in instance.requests]
    outputs = [r.output_tokens for r in instance.requests]
    arrivals = [float(r.arrival_ms) for r in instance.requests]
    if not all(_well_formed(k, x, index, workers, reasons) for k, x in enumerate(slices)):
        return None
    done = [0] * n_req
    last_end = [-math.inf] * n_req
    finish = [math.nan] * n_req
    pad = [0] * n_req
    invalid = [0] * n_req
    count = [0] * n_req
    order = sorted(range(len(slices)), key=lambda k: (slices[k]["start_ms"], k))
    for k in order:
        x = slices[k]
        where = f"slices[{k}]"
        start, end = float(x["start_ms"]), float(x["end_ms"])
        members = [index[i] for i in x["requests"]]
        left = [outputs[r] - done[r] for r in members]
        for i, r in enumerate(members):
            rid = x["requests"][i]
            if left[i] < 1:
                reasons.add(f"{where}: request {rid} has no output left ({outputs[r]} tokens "
                            "already generated)")
            if start < arrivals[r] - tolerance(arrivals[r]):
                reasons.add(f"{where} starts at {start} ms, before request {rid} arrives "
                            f"({arrivals[r]} ms)")
            if start < last_end[r] - tolerance(last_end[r]):
                reasons.add(f"{where} starts at {start} ms, before request {rid}'s previous "
                            f"slice ends ({last_end[r]} ms)")
        prompts = [inputs[r] + done[r] for r in members]
        length = max(prompts)
        iterations = min(s, max(left))
        generated = [max(0, min(n, iterations)) for n in left]
        expected = {"prompt_tokens": prompts, "pad_tokens": [length - p for p in prompts],
                    "generated": generated,
                    "invalid_tokens": [iterations - g for g in generated]}
        if x["padded_length"] != length:
            reasons.add(f"{where}.padded_length is {x['padded_length']}, recomputed {length} "
                        "(the longest prompt: input + tokens generated before)")
        if x["iterations"] != iterations:
            reasons.add(f"{where}.iterations is {x['iterations']}, recomputed {iterations} "
                        f"(min(S = {s}, most output left {max(left)}))")
        for key, values in expected.items():
            if x[key] != values:
                reasons.add(f"{where}.{key} is {x[key]}, recomputed {values}")
        n = len(members)
        serve = model.serve_ms(n, length, iterations)
        if abs((end - start) - serve) > tolerance(serve):
            reasons.add(f"{where} lasts {end - start:.6f} ms ({start} to {end}), recomputed "
                        f"{serve:.6f} ms (eqs 1-4 for N = {n}, L_i = {length}, "
                        f"L_o = {iterations})")
        if not model.fits(n, length):
            rule = ("Algorithm 2" if profile.memory_rule == "deepspeed"
                    else f"eqs 5-9: (L_i + S)·N·Δ = ({length} + {s}) × {n} × "
                         f"{profile.kv_bytes_per_token:g} B > ζ·M_ava")
            reasons.add(f"{where}: {n} requests padded to {length} tokens exceed the memory "
                        f"limit at S = {s} ({rule})")
        for i, r in enumerate(members):
            done[r] += generated[i]
            last_end[r] = end
            pad[r] += length - prompts[i]
            invalid[r] += iterations - generated[i]
            count[r] += 1
            if done[r] >= outputs[r] and math.isnan(finish[r]):
                finish[r] = end
    short = [f"{rid} ({done[k]} of {outputs[k]})" for rid, k in index.items()
             if done[k] != outputs[k]]
    if short:
        reasons.first(f"requests not served exactly to their output length (generated of "
                    f"output): {', '.join(short[:5])}{' …' if len(short) > 5 else ''}")
        return None
    _check_overlap(slices, workers, reasons)
    metrics = _metrics(slices, s, workers, arrivals, finish, pad, invalid, count)
    _check_metrics(sol.get("metrics"), metrics, reasons)
    return metrics["makespan_ms"]


def _well_formed(k: int, x: dict[str, Any], index: dict[str, int], workers: int,
                 reasons: _Reasons) -> bool:
    where = f"slices[{k}]"
    ids = x.get("requests")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i in index
                                                       for i in ids):
        reasons.add(f"{where}.requests must be a non-empty list of the instance's request ids")
        return False
    if len(set(ids)) != len(ids):
        reasons.add(f"{where}.requests repeats a request: {ids}")
        return False
    w = x.get("instance")
    if not is_int(w) or not 0 <= w < workers:
        reasons.add(f"{where}.instance {w!r} is not one of 0..{workers - 1}")
        return False
    start, end = x.get("start_ms"), x.get("end_ms")
    if not is_number(start) or not is_number(end) or end < start:
        reasons.add(f"{where}: start_ms {start!r} and end_ms {end!r} must be finite numbers, "
                    "start <= end")
        return False
    for key in ("padded_length", "iterations"):
        if not is_int(x.get(key)):
            reasons.add(f"{where}.{key} {x.get(key)!r} is not an integer")
            return False
    for key in LIST_FIELDS:
        values = x.get(key)
        if not isinstance(values, list) or len(values) != len(ids) or \
                not all(is_int(v) for v in values):
            reasons.add(f"{where}.{key} must be a list of {len(ids)} integers (one per request)")
            return False
    return True


def _check_overlap(slices: list[dict[str, Any]], workers: int, reasons: _Reasons) -> None:
    """One batch at a time per model instance."""
    for w in range(workers):
        mine = sorted((float(x["start_ms"]), float(x["end_ms"]), k)
                      for k, x in enumerate(slices) if x["instance"] == w)
        for (_, end_a, a), (start_b, _, b) in itertools.pairwise(mine):
            if start_b < end_a - tolerance(end_a):
                reasons.add(f"slices[{b}] starts at {start_b} ms on instance {w}, before "
                            f"slices[{a}] ends there ({end_a} ms): slices overlap")


def _metrics(slices: list[dict[str, Any]], s: int, workers: int, arrivals: list[float],
             finish: list[float], pad: list[int], invalid: list[int],
             count: list[int]) -> dict[str, float]:
    """Section 5's measures from the recomputed slices: throughput from the first arrival to
    the last finish, response = finish − arrival (mean, p95 linear), each instance's completion
    (its last slice's end, 0 without slices) and busy time with their population std, mean
    batch size over slices, pad / invalid tokens and slices per request, the share of slices
    shorter than S (early returns)."""
    fin = np.asarray(finish, dtype=float)
    arr = np.asarray(arrivals, dtype=float)
    response = fin - arr
    n = len(fin)
    span = float(fin.max() - arr.min()) if n else 0.0
    completion = [0.0] * workers
    busy = [0.0] * workers
    for x in slices:
        w = x["instance"]
        completion[w] = max(completion[w], float(x["end_ms"]))
        busy[w] += float(x["end_ms"]) - float(x["start_ms"])
    sizes = [len(x["requests"]) for x in slices]
    out = {
        "requests": float(n),
        "throughput_rps": n / (span / 1000.0) if span > 0 else 0.0,
        "response_mean_ms": float(response.mean()) if n else 0.0,
        "response_p95_ms": float(np.percentile(response, 95)) if n else 0.0,
        "makespan_ms": float(fin.max()) if n else 0.0,
        "completion_std_ms": float(np.std(completion)),
        "busy_std_ms": float(np.std(busy)),
        "batches": float(len(slices)),
        "batch_size_mean": float(np.mean(sizes)) if sizes else 0.0,
        "pad_tokens_per_request": float(np.mean(pad)) if n else 0.0,
        "invalid_tokens_per_request": float(np.mean(invalid)) if n else 0.0,
        "slices_per_request": float(np.mean(count)) if n else 0.0,
        "early_return_share": float(np.mean([x["iterations"] < s for x in slices]))
        if slices else 0.0,
    }
    for w, t in enumerate(completion):
        out[f"completion_ms_{w}"] = t
    return out


def _check_metrics(given: Any, metrics: dict[str, float], reasons: _Reasons) -> None:
    if not isinstance(given, dict):
        reasons.add("metrics must be a mapping")
        return
    for key, value in metrics.items():
        stated = given.get(key)
        if not is_number(stated):
            reasons.add(f"metrics.{key} is {stated!r}, recomputed {value:.6f}")
        elif not math.isclose(stated, value, rel_tol=METRIC_REL_TOL, abs_tol=METRIC_ABS_TOL):
            reasons.add(f"metrics.{key} is {stated}, recomputed {value:.6f}")


__all__ = ["check_slice_replay"]
