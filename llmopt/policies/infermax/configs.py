"""The unified scheduler of InferMax (Kim et al. 2025, Algorithm 1 and Table 1): the
configurations that :class:`~llmopt.policies.infermax.unified.UnifiedScheduler` runs.

Each configuration fixes the four choices of Algorithm 1's GETNEXTBATCH:

1. *Groups and priorities* (GROUPREQUESTS): ``vllm`` — waiting requests (prefills and refills)
   first, then running ones, each by arrival (vLLM's FCFS, prefill-first); ``sarathi`` — running
   requests in the decode phase, then running requests in the middle of a chunked prefill, then
   waiting ones (SARATHI's decode-first); ``rank`` — one group of all requests ordered by input
   length, output length or arrival (Rank_I, Rank_O, Rank_org of section 4.6).
2. *Hybrid batching* (CHECKHYBRIDBATCHING): without it, a candidate in a different phase
   (prefill vs decode) from the batch so far is skipped.
3. *Chunked prefill* with budget P (CANALLOCATE): with it, a prefill/refill candidate takes
   min(remaining, P left, C left) tokens; without it, its whole remaining prompt must fit.
4. *Eviction* (EVICTLOWERPRIORITYREQUEST): when a running decode finds no free KV, the
   lowest-priority running request is evicted (its KVs are freed and recomputed later as a
   refill); if none is lower, the candidate evicts itself. A waiting candidate that does not fit
   is skipped, and for FCFS groups it blocks the rest of its group (head-of-line, as vLLM).

KV reservation (m_reserve): a prefill reserves its whole prompt (or refill) when it starts; a
decode needs one new KV. Eviction-free variants (``-ef``) reserve I + O − 1 up front and never
evict (hypothetical: they know O). ``evict-short`` (section 6) is SARATHI-like, orders running
decodes by KVs held (long first) so that short requests are evicted, and reserves I + Ô − 1 with
Ô a quantile of the output lengths completed so far (an online histogram).

Which vLLM behaviour each mirrors: ``vllm`` is vLLM's default scheduler of the paper's time
(v0.6: FCFS, prefills first and alone in their batch, preemption by recompute of the newest
running request); ``sarathi`` is vLLM with chunked prefill enabled (decodes first, hybrid
batches, P = 512); the others are the Table 1 ablations.

Other papers' baselines that are configurations of this scheduler live with those papers
(``llmopt.policies.slo.baselines``: SOLA's; ``llmopt.policies.slice.ils``: SCLS's ILS;
``llmopt.policies.slo_priority.fcfs``: Huang et al.'s vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class Groups(Enum):
    """GROUPREQUESTS of Algorithm 1 (see the module doc)."""

    VLLM = "vllm"
    SARATHI = "sarathi"
    RANK = "rank"


class RankKey(Enum):
    """The order of the ``rank`` group."""

    INPUT = "input"
    OUTPUT = "output"
    ARRIVAL = "arrival"


class WaitingOrder(Enum):
    """The waiting order of the ``vllm`` and ``sarathi`` groups: FCFS, shortest true output
    first, or shortest predicted output first."""

    ARRIVAL = "arrival"
    OUTPUT = "output"
    PREDICTED_OUTPUT = "predicted-output"


@dataclass(frozen=True)
class SchedulerConfig:
    name: str
    groups: Groups
    hybrid: bool
    chunked: bool
    prefill_budget: int | None  # P in tokens; None = C
    eviction_free: bool = False
    rank_key: RankKey = RankKey.ARRIVAL  # the order of rank groups
    long_first: bool = False     # running decodes ordered by KVs held, long first (evict short)
    histogram_quantile: float | None = None  # reserve I + Ô − 1, Ô this quantile of outputs seen
    unlimited_memory: bool = False
    description: str = ""
    #: the whole token budget of a batch, decodes included (vLLM's max_num_batched_tokens with
    #: chunked prefill; capped by C); None: C
    token_budget: int | None = None
    waiting_order: WaitingOrder = WaitingOrder.ARRIVAL


_TABLE_1 = [
    SchedulerConfig("vllm", Groups.VLLM, hybrid=False, chunked=False, prefill_budget=None,
                    description="vLLM: prefill priority, no hybrid batching, no chunked prefill"),
    SchedulerConfig("sarathi", Groups.SARATHI, hybrid=True, chunked=True, prefill_budget=512,
                    description="SARATHI: decode priority, hybrid, chunked prefill P = 512"),
    SchedulerConfig("sarathi-pc", Groups.SARATHI, hybrid=True, chunked=True, prefill_budget=None,
                    description="SARATHI with P = C"),
    SchedulerConfig("sarathi-nocp", Groups.SARATHI, hybrid=True, chunked=False, prefill_budget=None,
                    description="SARATHI without chunked prefill"),
    SchedulerConfig("vllm-hy", Groups.VLLM, hybrid=True, chunked=False, prefill_budget=None,
                    description="vLLM with hybrid batching"),
    SchedulerConfig("sarathi-nohy", Groups.SARATHI, hybrid=False, chunked=False,
                    prefill_budget=None,
                    description="SARATHI without hybrid batching or chunked prefill"),
]

SCHEDULERS: dict[str, SchedulerConfig] = {}
for _cfg in _TABLE_1:
    SCHEDULERS[_cfg.name] = _cfg
    SCHEDULERS[f"{_cfg.name}-ef"] = replace(
        _cfg, name=f"{_cfg.name}-ef", eviction_free=True,
        description=_cfg.description + "; eviction-free (reserves I + O − 1)")
for _key, _label in ((RankKey.ARRIVAL, "org"), (RankKey.INPUT, "i"), (RankKey.OUTPUT, "o")):
    SCHEDULERS[f"rank-{_label}"] = SchedulerConfig(
        f"rank-{_label}", Groups.RANK, hybrid=True, chunked=True, prefill_budget=None,
        rank_key=_key, description=f"Rank_{_label.upper() if _label != 'org' else 'org'}: "
        f"one group ordered by {_key.value}, hybrid, chunked prefill P = C")
SCHEDULERS["evict-short"] = SchedulerConfig(
    "evict-short", Groups.SARATHI, hybrid=True, chunked=True, prefill_budget=None, long_first=True,
    histogram_quantile=0.5,
    description="section 6: SARATHI-like, keep long running requests, evict short ones, "
    "reserve I + Ô − 1 with Ô the median output seen so far")
SCHEDULERS["vllm-unlimited"] = replace(
    SCHEDULERS["vllm"], name="vllm-unlimited", unlimited_memory=True,
    description="vLLM with unlimited KV memory: the section 6 performance bound")
