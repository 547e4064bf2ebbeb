"""Each request's obligations and the work no schedule avoids, under the InferMax cost model.

A batch costs T(B) = bias + per_token·Σc + decode_kv·Σ_decode m + prefill_attention·Σ_prefill
(c² + 2mc) + per_prefill_request·(prefill chunks) (Kim et al. 2025, section 3.2). In every
schedule of the simulation core (``llmopt.sim.replica``: the prefill's last chunk gives the
first token, a request decodes O − 1 times, an evicted request recomputes its KVs), whatever
the policy, plan or router:

- its first token ends a prefill pass of I tokens from an empty cache (an eviction starts the
  pass again): ⌈I/C⌉ chunks in as many batches, whose c² + 2mc sum to I² (the sum
  telescopes), so the request adds at least per_token·I + prefill_attention·I² +
  per_prefill_request·⌈I/C⌉ to batches that run between its arrival and its first token;
- each later token t = 1 … O − 1 comes from a batch of its own after the first token: a decode
  reading I + t − 1 KVs (per_token + decode_kv·(I + t − 1)), or the end of a refill of I + t
  tokens (at least per_token·(I + t) + prefill_attention·(I + t)² + per_prefill_request·
  ⌈(I + t)/C⌉); the cheaper of the two is what it adds at least;
- every batch pays the bias once. A batch holds at most J running requests, at most C tokens,
  and (policies that respect M; the validator rebuilds the KVs after each batch) at most M KVs
  after it, a request holding at least m + c of them (I + t after decode t, I after its
  prompt's last chunk). So bias ≥ bias·(α·Σ kv/M + β·n/J + γ·Σc/C) for any α, β, γ ≥ 0 of sum
  1, and a request can be *charged* bias·(α·kv/M + β/J + γ·c/C) for each batch it is in:
  the charges of a batch never exceed its bias. ``charge_rule`` picks one rule (pure α, β or
  γ) per instance; ``memory=False`` leaves the KV rule out (``vllm-unlimited`` ignores M).

Alone (the machine to itself) a request's first token takes at least ⌈I/C⌉ batches each
paying the bias and per_prefill_request, and each later token a batch of its own: the exact
least times of ``llmopt.problems.infermax.attainment`` (``_alone_possible``), in floats with a
relative margin here. A request that cannot meet its targets even alone meets them in no
schedule (other requests and evictions only add time).

Prefix caching (``system.prefix_caching``, ``llmopt.sim.prefix_replica``). A request starting
finds cached at most the leading full prompt blocks (B tokens each) that some earlier chunk
computed and keyed, and at most its tokens less one. The chunk that keyed them belongs to a
request whose prompt has the same leading blocks: so the first pass of request i computes at
least I − h_i tokens, h_i = B·min(its leading blocks shared with another request's prompt,
⌊(I − 1)/B⌋), in ⌈(I − h_i)/C⌉ chunks whose c² + 2mc sum to I² − h_i² (the cached KVs are read);
a refill of I + t tokens finds at most its own full prompt blocks, at most ⌊(I + t − 1)/B⌋ of
them. A request evicted before its first token may find its own earlier chunks cached when it
starts again, but only what that earlier attempt computed: over its attempts it still computes at
least I − h tokens and I² − h² attention before its first token. Everything else above holds,
except the KV rule (blocks shared by running requests count
once): with a prefix cache it is not used (as if ``memory=False``).

Deadlines. A request meets its SLO when TTFT = first − arrival ≤ target, E2E = finish − arrival
≤ target and (finish − first)/(O − 1) ≤ TPOT target, each within MET_TOLERANCE_MS
(``llmopt.schedule.metrics``). So its first token comes by ``first_by`` = arrival + TTFT target
and its last by ``finish_by`` = the earlier of arrival + E2E target and arrival + TTFT target +
(O − 1)·TPOT target (both with the tolerance and a relative float margin). A request with a
TPOT target but neither a TTFT nor an E2E target has no deadline: served last and alone it
meets the target if its later tokens alone can (``SOLO``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmopt.data.cost import InferMaxProfile
from llmopt.data.instance import Instance
from llmopt.data.limits import block_size, resolve_limits
from llmopt.data.prefix import PrefixIndex, reusable_blocks
from llmopt.errors import InstanceError

MET_TOLERANCE_MS = 1e-6   # llmopt.schedule.metrics.MET_TOLERANCE_MS (schedule is above problems)
REL_MARGIN = 1e-9         # relative float margin on deadlines and least times

# kinds of requests
FREE, SOLO, NEVER, WINDOW = 0, 1, 2, 3
KIND_NAMES = {FREE: "no target", SOLO: "TPOT target only", NEVER: "cannot meet alone",
              WINDOW: "deadline"}
CHARGE_RULES = ("kv/M", "1/J", "c/C", "none")


@dataclass(frozen=True)
class Obligations:
    """Per request (the instance's order): ``kind``; ``arrival_ms``; ``first_by_ms`` (inf: no
    first-token deadline) and ``finish_by_ms`` (inf: none); the least work it adds to batches
    up to its first token (``prefill_ms``) and after it (``later_ms``), bias charges included;
    and its least times alone (``first_alone_ms``, ``later_alone_ms``)."""

    kind: np.ndarray
    arrival_ms: np.ndarray
    first_by_ms: np.ndarray
    finish_by_ms: np.ndarray
    prefill_ms: np.ndarray
    later_ms: np.ndarray
    first_alone_ms: np.ndarray
    later_alone_ms: np.ndarray
    own_prefill_ms: np.ndarray     # without bias charges (the iteration LP counts batches)
    own_later_ms: np.ndarray
    least_step_ms: np.ndarray      # the least own work of one later token
    prompt_batches: np.ndarray     # ⌈I/C⌉
    later_tokens: np.ndarray       # O − 1
    inputs: np.ndarray
    cached_tokens: np.ndarray      # h: the most a first pass may find cached (0: no cache)
    bias_ms: float
    replicas: int
    charge_rule: str
    M: int | None
    C: int | None
    J: int

    @property
    def n(self) -> int:
        return len(self.kind)

    def count(self, kind: int) -> int:
        return int(np.count_nonzero(self.kind == kind))

    def windows(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                   np.ndarray, np.ndarray]:
        """Of the ``chosen`` requests: arrival, first-token deadline, finish deadline (the
        first-token one where there is none), whether they have a finish deadline, and every
        one of those times, sorted and distinct (the slot edges before merging)."""
        a = self.arrival_ms[chosen]
        first_by = self.first_by_ms[chosen]
        has_finish = ~np.isinf(self.finish_by_ms[chosen])
        finish_by = np.where(has_finish, self.finish_by_ms[chosen], first_by)
        return a, first_by, finish_by, has_finish, np.unique(np.concatenate([a, first_by,
                                                                             finish_by]))


def infermax_profile(instance: Instance) -> InferMaxProfile:
    profile = instance.profile
    if not isinstance(profile, InferMaxProfile):
        raise InstanceError("the SLO attainment ceiling needs an infermax profile",
                            file=instance.label(), field="model", value=profile.name)
    return profile


def _chunks(tokens: np.ndarray, C: int | None) -> np.ndarray:
    return np.ones_like(tokens) if C is None else np.ceil(tokens / C)


def _later_parts(p: InferMaxProfile, I: np.ndarray, O: np.ndarray, C: int | None,
                 charge_decode, charge_refill, cache: tuple[np.ndarray, int] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(least time alone, least work with charges) of later tokens 1 … O − 1 per request.
    ``cache``: (each request's full prompt blocks, B) with a prefix cache, which a refill may
    find cached. Without one, when per_token ≥ decode_kv a decode is never costlier than a
    refill (refill − decode ≥ (per_token − decode_kv)·(I + t − 1) ≥ 0, charges included):
    closed forms. Else token by token."""
    k = O - 1                                   # later tokens
    if p.per_token_ms >= p.decode_kv_ms and cache is None:
        reads = k * I + k * (k - 1) / 2         # Σ_{t=1}^{k} (I + t − 1)
        own = p.per_token_ms * k + p.decode_kv_ms * reads
        return own + p.bias_ms * k, own + charge_decode(I, k)
    alone = np.zeros(len(I))
    work = np.zeros(len(I))
    for t in range(1, int(k.max(initial=0)) + 1):
        on = k >= t
        ctx = I[on] + t
        decode = p.per_token_ms + p.decode_kv_ms * (ctx - 1)
        refill, computed, chunks = _refill(p, ctx, C, cache, on)
        alone[on] += np.minimum(decode + p.bias_ms, refill + p.bias_ms * chunks)
        work[on] += np.minimum(decode + charge_decode(ctx - t, 1, first=t),
                               refill + charge_refill(computed, chunks))
    return alone, work


def _refill(p: InferMaxProfile, ctx: np.ndarray, C: int | None,
            cache: tuple[np.ndarray, int] | None, on: np.ndarray | slice = slice(None)
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(least own work, tokens computed, chunks) of a refill of ``ctx`` tokens (of the requests
    ``on``), less what it may find cached (its own full prompt blocks)."""
    hit = np.zeros(len(ctx)) if cache is None else \
        np.minimum(cache[0][on], (ctx - 1) // cache[1]) * cache[1]
    computed = ctx - hit
    chunks = _chunks(computed, C)
    return (p.per_token_ms * computed + p.prefill_attention_ms * (ctx ** 2 - hit ** 2)
            + p.per_prefill_request_ms * chunks), computed, chunks


def cacheable(instance: Instance) -> tuple[np.ndarray, np.ndarray, int]:
    """With a prefix cache (the module doc): per request, h (tokens its first pass may find
    cached: ``reusable_blocks``' r_i blocks) and its full prompt blocks (what a refill may
    find), and B."""
    B = block_size(instance)
    index = PrefixIndex(instance.requests, B)
    reach, _ = reusable_blocks(instance, B, index)
    own = [index.covered_tokens(i) // B for i in range(instance.num_requests)]
    return (B * reach).astype(float), np.array(own, dtype=float), B


def charge_rules(M: int | None, C: int | None) -> list[str]:
    """The bias rules that apply: kv/M with M (and the KV rule in use), 1/J, c/C with C."""
    return [r for r in CHARGE_RULES if r != "none" and not (r == "kv/M" and not M)
            and not (r == "c/C" and not C)]


def obligations(instance: Instance, memory: bool = True, charge_rule: str | None = None
                ) -> Obligations:
    """The obligations and unavoidable work of every request (see the module doc).
    ``memory=False``: the KV rule is not used (a policy ignoring M); ``charge_rule``: one of
    CHARGE_RULES (default: the one charging the most bias in total)."""
    p = infermax_profile(instance)
    limits = resolve_limits(instance)
    caching = bool(instance.system.prefix_caching)
    M = limits.kv_tokens if memory and not caching else None
    C, J = limits.batch_tokens, int(limits.clients)
    I = instance.input_tokens.astype(float)
    O = instance.output_tokens.astype(float)
    a = instance.arrival_ms.astype(float)
    n = len(I)
    cached = np.zeros(n)
    cache: tuple[np.ndarray, int] | None = None
    if caching:
        cached, own_blocks, B = cacheable(instance)
        cache = (own_blocks, B)
    computed = I - cached
    prefill_chunks = _chunks(computed, C)
    own_prefill = (p.per_token_ms * computed + p.prefill_attention_ms * (I * I - cached ** 2)
                   + p.per_prefill_request_ms * prefill_chunks)
    first_alone = own_prefill + p.bias_ms * prefill_chunks

    def rule_charges(rule: str):
        """(prefill charge, decode charge(I, k, first), refill charge(ctx, chunks)) in ms."""
        b = p.bias_ms
        if rule == "kv/M" and M:
            # decode t holds I + t KVs after it: Σ_{t=first}^{first+k−1} (I + t)
            return (b * I / M,
                    lambda i, k, first=1: b * (k * (i + first - 1) + k * (k + 1) / 2) / M,
                    lambda ctx, ch: b * ctx / M)
        if rule == "1/J":
            return (b * prefill_chunks / J, lambda i, k, first=1: b * k / J,
                    lambda ctx, ch: b * ch / J)
        if rule == "c/C" and C:   # c: the tokens computed
            return (b * computed / C, lambda i, k, first=1: b * k / C,
                    lambda ctx, ch: b * ctx / C)
        return (np.zeros(n), lambda i, k, first=1: 0.0 * k, lambda ctx, ch: 0.0 * ctx)

    rules = charge_rules(M, C) if p.bias_ms > 0 else []
    if charge_rule is None:
        def total(rule: str) -> float:
            pre, dec, _ = rule_charges(rule)
            return float(np.sum(pre) + np.sum(dec(I, O - 1)))
        charge_rule = max(rules, key=total) if rules else "none"
    elif charge_rule not in (*rules, "none"):
        charge_rule = "none"
    pre_charge, dec_charge, refill_charge = rule_charges(charge_rule)
    later_alone, later_work = _later_parts(p, I, O, C, dec_charge, refill_charge, cache)
    _, own_later = _later_parts(p, I, O, C, lambda i, k, first=1: 0.0 * k,
                                lambda ctx, ch: 0.0 * ctx, cache)
    least_step = np.minimum(p.per_token_ms + p.decode_kv_ms * I,
                            _refill(p, I + 1, C, cache)[0])
    prefill_work = own_prefill + pre_charge

    ttft, tpot, e2e = (instance.slo_targets(f) for f in ("ttft_slo_ms", "tpot_slo_ms",
                                                          "e2e_slo_ms"))
    tpot = np.where(O >= 2, tpot, np.nan)       # one token: no TPOT
    tol = MET_TOLERANCE_MS
    has_ttft, has_tpot, has_e2e = ~np.isnan(ttft), ~np.isnan(tpot), ~np.isnan(e2e)
    first_by = np.where(has_ttft, a + ttft + tol, np.inf)
    finish_by = np.where(has_e2e, a + e2e + tol, np.inf)
    span = (O - 1) * (tpot + tol)
    finish_by = np.where(has_ttft & has_tpot, np.minimum(finish_by, a + ttft + tol + span),
                         finish_by)
    # float margins: deadlines a little later, least times a little smaller
    first_by = first_by + REL_MARGIN * (np.abs(first_by) + 1.0)
    finish_by = finish_by + REL_MARGIN * (np.abs(finish_by) + 1.0)
    fa = first_alone * (1 - REL_MARGIN)
    la = later_alone * (1 - REL_MARGIN)
    alone_ok = ((~has_ttft | (fa <= ttft + tol + REL_MARGIN * np.nan_to_num(ttft)))
                & (~has_tpot | (la <= span * (1 + REL_MARGIN)))
                & (~has_e2e | (fa + la <= e2e + tol + REL_MARGIN * np.nan_to_num(e2e))))
    kind = np.where(~(has_ttft | has_tpot | has_e2e), FREE,
                    np.where(~alone_ok, NEVER,
                             np.where(has_ttft | has_e2e, WINDOW, SOLO)))
    # the first token comes by the finish too
    first_by = np.minimum(first_by, finish_by)
    # a request without a finish obligation adds nothing after its first token
    later_work = np.where(np.isinf(finish_by), 0.0, later_work)
    shrink = 1 - REL_MARGIN
    return Obligations(kind=kind.astype(np.int8), arrival_ms=a, first_by_ms=first_by,
                       finish_by_ms=finish_by, prefill_ms=prefill_work * shrink,
                       later_ms=later_work * shrink, first_alone_ms=first_alone,
                       later_alone_ms=later_alone, own_prefill_ms=own_prefill * shrink,
                       own_later_ms=np.where(np.isinf(finish_by), 0.0, own_later) * shrink,
                       least_step_ms=least_step * shrink, prompt_batches=prefill_chunks,
                       later_tokens=O - 1, inputs=I, cached_tokens=cached, bias_ms=float(p.bias_ms),
                       replicas=int(instance.system.instances),
                       charge_rule=charge_rule, M=M, C=C, J=J)
