"""A closed-form lower bound on the total latency under InferMax's cost model (Kim et al. 2025,
section 3.2), valid for every scheduler with the instance's M, C (and P).

A batch costs T(B) = bias + per_token · Σc + decode_kv · Σ_decode m + prefill_attention ·
Σ_prefill (c² + 2mc) + per_prefill_request · (prefill chunks). Whatever the schedule:

- every request processes at least I + O − 1 tokens (evictions only add recomputation);
- its O − 1 decodes read at least I, I + 1, …, I + O − 2 KVs;
- the chunks of one prefill pass of L tokens cost Σ(c² + 2mc) = L² (the sum telescopes), so at
  least I² per request, and at least one prefill chunk each;
- the non-empty batches number at least N_min, the largest of: the tokens over C; the memory
  floor Σ_i (O_i I_i + O_i (O_i − 1)/2) / M (generating its t-th token a request holds at least
  I + t − 1 KVs, a batch at most M); and, for each request, ceil(I / min(C, P)) batches to
  prefill it and O − 1 more to decode.

With R replicas the work splits at best evenly and nothing starts before the first arrival:
total ≥ min arrival + work / R; and each request alone needs its own work after it arrives.
It counts every prompt token as computed: it does not hold with a prefix cache.

``infermax_work_cached`` is the same count for schedules that may reuse prompt blocks
(``system.prefix_caching``, blocks of B tokens, ``llmopt.data.prefix``), valid with or without
a cache, for any number of replicas and any routing:

- a block a request never computes whole, in any of its lives, was hit from another request
  holding the same tokens: it lies in the longest prefix r_i the request shares with another
  one, within the blocks a hit may cover (its own blocks it computed itself);
- every distinct block is computed at least once overall (once per replica using it at worst,
  at best once), so the blocks never computed by their request total at most H = Σ cacheable −
  the distinct blocks that no prompt holds where it cannot be hit;
- prompt tokens computed ≥ Σ I − B·min(H, Σ r); the passes of a request cost Σ(c² + 2mc) =
  Σ (b² − a²) over the token ranges [a, b) they compute (the cached KVs are read, not
  computed), at least I² less ∫ 2t dt over the t_i blocks it never computes, at most
  (B r_i)² − (B (r_i − t_i))² (the top ones of its shared prefix); the most spared over
  t_i ≤ r_i, Σ t_i ≤ H is the H largest block marginals B²(2 r_i − 2t − 1) (concave: greedy is
  exact); decodes read their KVs, cached or not, as before;
- the batches number at least the computed tokens over C and, per request, ⌈(I − B r_i) / P⌉
  + O − 1 (no memory floor: shared blocks are held once).
"""

from __future__ import annotations

import math

import numpy as np

from llmopt.data.cost import InferMaxProfile
from llmopt.data.instance import Instance
from llmopt.data.limits import Limits, block_size, resolve_limits
from llmopt.data.prefix import reusable_blocks
from llmopt.errors import InstanceError
from llmopt.problems.base import Bound, Simulation
from llmopt.problems.infermax.csp import solve as solve_csp
from llmopt.progress import SILENT, Progress

VALID_UNDER = "InferMax cost model, any scheduler with these M and C"
VALID_CACHED = ("InferMax cost model, any scheduler with this C, with or without a prefix "
                "cache, any number of replicas and any routing")
CSP_MAX_REQUESTS = 12  # the CSP's bound is computed up to this many requests


def _profile_and_budgets(instance: Instance) -> tuple[InferMaxProfile, Limits, int, int]:
    """The instance's InferMax profile, its limits, C (tokens per batch) and P (prefill
    tokens per batch, at most C); refused without an infermax profile or a C."""
    profile = instance.profile
    if not isinstance(profile, InferMaxProfile):
        raise InstanceError("the InferMax bound needs an infermax profile",
                            file=instance.label(), field="model", value=profile.name)
    limits = resolve_limits(instance)
    C = limits.batch_tokens
    if C is None:
        raise InstanceError("the InferMax bound needs C, the tokens per batch",
                            file=instance.label(), field="system.max_batch_tokens")
    return profile, limits, C, min(limits.prefill_tokens or C, C)


def infermax_bounds(instance: Instance) -> list[Bound]:
    profile, limits, C, P = _profile_and_budgets(instance)
    inp = instance.input_tokens.astype(float)
    out = instance.output_tokens.astype(float)
    arrival = instance.arrival_ms
    tokens = inp + out - 1
    reads = (out - 1) * inp + (out - 1) * (out - 2) / 2
    own_batches = np.ceil(inp / P) + out - 1
    floors = {"tokens / C": math.ceil(tokens.sum() / C), "one request": int(own_batches.max())}
    if limits.kv_tokens is not None:
        held = float((out * inp + out * (out - 1) / 2).sum())
        floors["memory"] = math.ceil(held / limits.kv_tokens)
    batches = max(floors.values())
    p = profile
    work_wo_bias = (p.per_token_ms * tokens.sum() + p.decode_kv_ms * reads.sum()
                    + p.prefill_attention_ms * (inp ** 2).sum()
                    + p.per_prefill_request_ms * len(inp))
    replicas = instance.system.instances
    shared = float(arrival.min()) + (p.bias_ms * batches + work_wo_bias) / replicas
    alone = (arrival + p.bias_ms * own_batches + p.per_token_ms * tokens
             + p.decode_kv_ms * reads + p.prefill_attention_ms * inp ** 2
             + p.per_prefill_request_ms)
    value = max(shared, float(alone.max()))
    floor_name = max(floors, key=lambda k: floors[k])
    return [Bound(
        name="infermax_work",
        value_ms=round(value, 6),
        equation="min T + (bias·N_min + per_token·Σ(I+O−1) + decode_kv·Σ reads "
                 "+ prefill_attention·ΣI² + per_prefill_request·n) / R",
        valid_under=VALID_UNDER,
        time_model="infermax",
        why=("every token is processed, every decode reads its KVs, every prefill pass costs "
             f"its L², and at least N_min = {batches} batches ({floor_name}) pay the bias"),
        parts={"bias_ms": round(p.bias_ms * batches, 6), "work_ms": round(work_wo_bias, 6)},
        detail={"batches_at_least": batches, "batch_floors": floors, "replicas": replicas,
                "binding": "shared work" if shared >= alone.max() else "one request"},
    )]


def infermax_cached_bound(instance: Instance) -> Bound:
    """``infermax_work_cached`` of the module doc."""
    profile, _, C, P = _profile_and_budgets(instance)
    B = block_size(instance)
    reach, most = reusable_blocks(instance, B)
    inp = instance.input_tokens.astype(float)
    out = instance.output_tokens.astype(float)
    arrival = instance.arrival_ms
    skipped = min(most, int(reach.sum()))  # blocks skipped over all requests at most
    computed = inp.sum() - B * skipped + (out - 1).sum()
    reads = (out - 1) * inp + (out - 1) * (out - 2) / 2
    own_prompt = inp - B * reach
    own_batches = np.ceil(own_prompt / P) + out - 1
    floors = {"tokens / C": math.ceil(computed / C), "one request": int(own_batches.max())}
    batches = max(floors.values())
    spared = _most_attention_spared(reach, B, skipped)
    p = profile
    work_wo_bias = (p.per_token_ms * computed + p.decode_kv_ms * reads.sum()
                    + p.prefill_attention_ms * ((inp ** 2).sum() - spared)
                    + p.per_prefill_request_ms * len(inp))
    replicas = instance.system.instances
    shared = float(arrival.min()) + (p.bias_ms * batches + work_wo_bias) / replicas
    alone = (arrival + p.bias_ms * own_batches + p.per_token_ms * (own_prompt + out - 1)
             + p.decode_kv_ms * reads + p.prefill_attention_ms * (inp ** 2 - (B * reach) ** 2)
             + p.per_prefill_request_ms)
    value = max(shared, float(alone.max()))
    return Bound(
        name="infermax_work_cached",
        value_ms=round(value, 6),
        equation="min T + (bias·N_min + per_token·(ΣI − B·min(H, Σr) + Σ(O−1)) + decode_kv·Σ "
                 "reads + prefill_attention·(ΣI² − max Σ(Bh)²) + per_prefill_request·n) / R",
        valid_under=VALID_CACHED,
        time_model="infermax",
        why=(f"every distinct prompt block is computed at least once, a request skips at most "
             f"the prefix it shares with another ({int(skipped)} blocks of {B} tokens in all "
             f"at most), every decode reads its KVs, and at least N_min = {batches} batches "
             "pay the bias"),
        parts={"bias_ms": round(p.bias_ms * batches, 6), "work_ms": round(work_wo_bias, 6)},
        detail={"batches_at_least": batches, "batch_floors": floors, "replicas": replicas,
                "block_tokens": B, "blocks_skipped_at_most": int(skipped),
                "binding": "shared work" if shared >= alone.max() else "one request"},
        holds_with_prefix_cache=True,
    )


def _most_attention_spared(reach: np.ndarray, block: int, budget: int) -> float:
    """max Σ B²(2 r_i t_i − t_i²) over integers 0 ≤ t_i ≤ r_i, Σ t_i ≤ budget: the ``budget``
    largest marginals B²(2u − 1), u = r_i − t (``holders[u]`` requests have r_i ≥ u)."""
    if budget <= 0 or not len(reach) or reach.max() <= 0:
        return 0.0
    holders = np.cumsum(np.bincount(reach)[::-1])[::-1]  # holders[u] = #{r_i >= u}
    spared, left = 0.0, budget
    for u in range(int(reach.max()), 0, -1):
        take = min(int(holders[u]), left)
        spared += take * block * block * (2 * u - 1)
        left -= take
        if not left:
            break
    return spared


def infermax_family_bounds(instance: Instance, time_limit_s: float | None = 60.0,
                           progress: Progress = SILENT,
                           solver_bounds: bool = True, *,
                           simulation: Simulation) -> list[Bound]:
    """The work bound, and (with ``solver_bounds``, up to ``CSP_MAX_REQUESTS`` requests on one
    replica) the CSP's proven bound within the time limit (``simulation`` replays its
    heuristics and plan). A stop signal raises KeyboardInterrupt."""
    bounds = infermax_bounds(instance)
    if instance.system.prefix_caching:  # the CSP models no cache: its bound would not hold
        return [*bounds, infermax_cached_bound(instance)]
    if (solver_bounds and instance.num_requests <= CSP_MAX_REQUESTS
            and instance.system.instances == 1
            and instance.system.clients >= instance.num_requests):
        progress.stage("the InferMax CSP's bound (section 5)")
        result = solve_csp(instance, "auto", min(time_limit_s or 30.0, 30.0), progress,
                           simulation=simulation)
        if result.interrupted:
            raise KeyboardInterrupt
        if result.bound is not None:
            bounds.append(Bound(
                name="infermax_csp", value_ms=round(result.bound, 6),
                equation="CSP of section 5, proven bound", valid_under=VALID_UNDER,
                time_model="infermax",
                why=f"{result.status} within the time limit ({result.proof or 'bound only'})",
                detail={"status": result.status, "objective_ms": result.objective}))
    return bounds
