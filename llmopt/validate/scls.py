"""Checks of SCLS batching solutions (Cheng et al. 2024, Algorithm 1 and eq 10), independent of
the solvers: the batches must partition the requests; each batch's size, padded input length, pad
tokens and serving time are recomputed from the instance and the profile's fields (eqs 1–4 summed
iteration by iteration, not in the solver's closed form), and its memory by eqs 5–9 or
Algorithm 2 (whether it fits, its KV memory of eq 5 and its N_max); the objective is their
sum. One request per batch is a schedule of the validator's own (an upper bound on the
optimum), and pools of up to ``EXACT_MAX_REQUESTS`` requests are solved exactly by the
validator's own enumeration of set partitions.
"""

from __future__ import annotations

import math
from typing import Any

from llmopt.data.instance import Instance
from llmopt.validate.claims import Evidence, Verdict, tolerance
from llmopt.validate.fields import is_int, is_number

EXACT_MAX_REQUESTS = 9
GIB = 2**30


class SclsModel:
    """Eqs 1–9 and Algorithm 2 of the ``scls`` profile family, from the profile's fields (the
    validators' own, shared by this module and :mod:`llmopt.validate.slices`)."""

    def __init__(self, profile: Any, slice_length: int, max_size: int | None = None) -> None:
        self.p, self.s, self.max_size = profile, slice_length, max_size

    def serve_ms(self, n: int, length: int, iterations: int | None = None) -> float:
        """T_serve(N, L_i, L_o) = T_prefill(N, L_i) (eq 3) + Σ_{l=1..L_o} τ_decode(L_i + l, N)
        (eqs 1, 2, 4), summed iteration by iteration; L_o = S unless given."""
        pre, dec = self.p.prefill, self.p.decode
        total = pre.c1 * n * length + pre.c2 * n + pre.c3 * length + pre.c4
        for step in range(1, (self.s if iterations is None else iterations) + 1):
            cached = length + step
            total += dec.c1 * n * cached + dec.c2 * n + dec.c3 * cached + dec.c4
        return total

    def kv_gib(self, n: int, length: int) -> float:
        """Eq 5 over a slice: (L_i + S)·N·Δ bytes, pad and invalid tokens included, in GiB."""
        return (length + self.s) * n * self.p.kv_bytes_per_token / GIB

    def _usable_bytes(self) -> float:
        """ζ·M_ava (eqs 6 and 9)."""
        p = self.p
        return p.zeta * (p.gpu_memory_gib - p.model_memory_gib - p.engine_memory_gib) * GIB

    def _deepspeed_cap(self, tokens: int) -> int:
        """The batch size of the first rule of Algorithm 2 that applies at L = L_i + S (0: none)."""
        for rule in sorted(self.p.deepspeed_rules, key=lambda r: -r.above_tokens):
            if tokens > rule.above_tokens:
                return int(rule.max_batch)
        return 0

    def max_batch(self, length: int) -> int:
        """N_max(L_i, S): eq 8 with ζ (eq 9), or the first rule of Algorithm 2 that applies;
        at most ``max_size``."""
        tokens = length + self.s
        cap = self._deepspeed_cap(tokens) if self.p.memory_rule == "deepspeed" else \
            math.floor(self._usable_bytes() / (self.p.kv_bytes_per_token * tokens))
        return cap if self.max_size is None else min(cap, self.max_size)

    def fits(self, n: int, length: int) -> bool:
        """Not out of memory at (N, L_i, S): eq 5 within ζ·M_ava (eqs 6–9), or Algorithm 2;
        and N within ``max_size`` when one is given."""
        if self.max_size is not None and n > self.max_size:
            return False
        tokens = length + self.s
        if self.p.memory_rule == "deepspeed":
            return n <= self._deepspeed_cap(tokens)
        return tokens * n * self.p.kv_bytes_per_token <= self._usable_bytes()


def check_scls_batching(instance: Instance, sol: dict[str, Any], verdict: Verdict) -> Evidence:
    reasons = verdict.reasons
    ev = Evidence()
    profile: Any = instance.profile
    if profile.family != "scls":
        reasons.append(f"profile {profile.name} is not of the scls family")
        return ev
    s, max_size = sol.get("slice_length"), sol.get("max_size")
    if not is_int(s) or s < 1:
        reasons.append(f"slice_length {s!r} is not an integer >= 1")
        return ev
    if max_size is not None and (not is_int(max_size) or max_size < 1):
        reasons.append(f"max_size {max_size!r} is not an integer >= 1")
        return ev
    if sol.get("memory_rule") != profile.memory_rule:
        reasons.append(f"memory_rule {sol.get('memory_rule')!r} is not the profile's "
                       f"{profile.memory_rule!r}")
    model = SclsModel(profile, s, max_size)
    lengths = {r.id: r.input_tokens for r in instance.requests}
    alone = [model.serve_ms(1, n) for n in lengths.values()]
    if all(model.fits(1, n) for n in lengths.values()):
        ev.schedules.append(("one request per batch (the validator's)", sum(alone)))
    if len(lengths) <= EXACT_MAX_REQUESTS:
        ev.optimum = _exact(model, list(lengths.values()))
        ev.exact_method = (f"the validator's enumeration of every partition of "
                           f"{len(lengths)} requests")
    else:
        ev.unchecked_why = (f"{len(lengths)} requests; the validator enumerates partitions up "
                            f"to {EXACT_MAX_REQUESTS}")
    if sol.get("status") in ("optimal", "feasible"):
        ev.objective = _check_batches(sol.get("batches"), lengths, model, reasons)
    return ev


def _check_batches(batches: Any, lengths: dict[str, int], model: SclsModel,
                   reasons: list[str]) -> float | None:
    if not isinstance(batches, list) or not all(isinstance(b, dict) for b in batches):
        reasons.append("batches must be a list of objects")
        return None
    seen: list[str] = []
    total = 0.0
    for k, batch in enumerate(batches):
        ids = batch.get("requests")
        if not isinstance(ids, list) or not ids or not all(i in lengths for i in ids):
            reasons.append(f"batches[{k}].requests must be a non-empty list of request ids")
            return None
        seen += ids
        n, length = len(ids), max(lengths[i] for i in ids)
        expected = {"size": n, "input_tokens": length,
                    "pad_tokens": sum(length - lengths[i] for i in ids)}
        for key, value in expected.items():
            if batch.get(key) != value:
                reasons.append(f"batches[{k}].{key} is {batch.get(key)!r}, recomputed {value}")
        serve = model.serve_ms(n, length)
        given = batch.get("serve_ms")
        if not is_number(given) or not math.isclose(given, serve, abs_tol=tolerance(serve)):
            reasons.append(f"batches[{k}].serve_ms is {given!r}, recomputed {serve:.6f} ms "
                           "(eqs 1-4)")
        kv = model.kv_gib(n, length)
        given = batch.get("kv_gib")
        if not is_number(given) or not math.isclose(given, kv, abs_tol=1e-6):
            reasons.append(f"batches[{k}].kv_gib is {given!r}, recomputed {kv:.6f} GiB (eq 5)")
        cap = model.max_batch(length)
        if batch.get("max_batch") != cap or not is_int(batch.get("max_batch")):
            reasons.append(f"batches[{k}].max_batch is {batch.get('max_batch')!r}, recomputed "
                           f"{cap} (eqs 8-9 / Algorithm 2, and max_size)")
        if not model.fits(n, length):
            reasons.append(f"batches[{k}]: {n} requests padded to {length} tokens do not fit "
                           "(eqs 5-9 / Algorithm 2, or max_size)")
        total += serve
    missing = sorted(set(lengths) - set(seen))
    repeated = sorted({i for i in seen if seen.count(i) > 1})
    if missing or repeated:
        reasons.append(f"the batches are not a partition of the requests (missing: "
                       f"{missing[:5]}, repeated: {repeated[:5]})")
        return None
    return total


def _exact(model: SclsModel, lengths: list[int]) -> float:
    """The least total serving time over every partition of ``lengths`` into batches that fit
    (restricted growth strings)."""
    best = math.inf
    # with no negative coefficient a partial cost never falls: prune on it
    monotone = min(model.p.time_coefficients()) >= 0

    def extend(k: int, groups: list[list[int]], cost: float) -> None:
        nonlocal best
        if monotone and cost >= best:
            return
        if k == len(lengths):
            best = min(best, cost)
            return
        for g in groups:
            before = model.serve_ms(len(g), max(g))
            g.append(lengths[k])
            if model.fits(len(g), max(g)):
                extend(k + 1, groups, cost - before + model.serve_ms(len(g), max(g)))
            g.pop()
        if model.fits(1, lengths[k]):
            groups.append([lengths[k]])
            extend(k + 1, groups, cost + model.serve_ms(1, lengths[k]))
            groups.pop()

    extend(0, [], 0.0)
    return best
