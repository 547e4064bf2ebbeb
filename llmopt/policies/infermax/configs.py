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

Baselines of SOLA (Hong et al. 2025, section 6.1), on vLLM v0.4.2:

- ``vllm-d``: SOLA's name for vLLM's default, prefill-prioritized scheduler; the same
  configuration as ``vllm``.
- ``vllm-s``, ``vllm-s-1024``, ``vllm-s-4096``: vLLM v0.4.2 with chunked prefill (SplitFuse),
  whose "chunk size" is ``max_num_batched_tokens`` = 512 by default (1024 for SOLA's chatbot,
  4096 for its long-context runs). That is the *whole* token budget of a step, decodes
  included: ``Scheduler._schedule_chunked_prefill`` (vllm/core/scheduler.py of the v0.4 line,
  read at vllm-project/vllm commit 0054e1fa) makes one
  ``SchedulingBudget(token_budget=max_num_batched_tokens)``, schedules the running
  requests first (``_schedule_running``: each decode costs one token of it, a chunked prefill
  ``min(remaining, budget left)``), then the waiting ones (``_schedule_prefills`` with
  ``enable_chunking=True``: FCFS, ``min(prompt, budget left)`` tokens, stop at the first that
  ``block_manager.can_allocate`` refuses — its whole prompt's blocks — or that the budget
  cannot take). So these run the ``sarathi`` groups with a batch token budget
  (``token_budget``) of 512 / 1024 / 4096 tokens (capped by C) and P equal to it. What differs
  from vLLM: vLLM walks its running queue in one FCFS order, decodes and chunked prefills
  interleaved, and preempts the newest by arrival, where the ``sarathi`` groups put the decodes
  before the running chunked prefills and preempt from the prefills up; the two agree whenever
  the requests in a chunked prefill arrived after the decoding ones (always, but for the refill
  of a preempted request). vLLM v0.4.2 may also admit a waiting request in a step that
  preempted (its preempted requests rejoin the queue after the step's admissions); here a
  request preempted in a step is not re-admitted in it and stops that step's admissions when
  its turn comes (at its arrival rank in the queue: usually the head, as it arrived before the
  requests never started).
- ``sjf``: shortest job first on vLLM v0.4.2's default scheduler (the ``vllm`` groups): the
  waiting queue is ordered by the true output length (ascending; ties by arrival), its head
  blocks the rest as in vLLM; running requests keep vLLM's FCFS order, so preemption still
  takes the newest arrival. An oracle: it knows every output length.
- ``sjf-predicted``: the same with a predicted output length instead of the true one: the
  median output length of the requests finished so far (on this replica) whose input length is
  in the same power-of-two bucket (``I.bit_length()``), else the median over every finished
  request, and before any has finished the input length itself. As the prediction moves when
  requests finish, the waiting order is not a fixed key: the scheduler keeps one arrival-ordered
  heap per bucket and takes, at each admission, the waiting request of smallest prediction
  (ties by arrival) over the whole queue (see ``UnifiedScheduler``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SchedulerConfig:
    name: str
    groups: str               # "vllm" | "sarathi" | "rank" ("vllm-v1": not a unified one)
    hybrid: bool
    chunked: bool
    prefill_budget: int | None  # P in tokens; None = C
    eviction_free: bool = False
    rank_key: str = "arrival"   # rank groups: "input" | "output" | "arrival"
    long_first: bool = False     # running decodes ordered by KVs held, long first (evict short)
    histogram_quantile: float | None = None  # reserve I + Ô − 1, Ô this quantile of outputs seen
    unlimited_memory: bool = False
    description: str = ""
    #: the whole token budget of a batch, decodes included (vLLM's max_num_batched_tokens with
    #: chunked prefill; capped by C); None: C
    token_budget: int | None = None
    #: waiting order of the vllm/sarathi groups: "arrival" (FCFS), "output" (shortest true
    #: output first), "predicted-output" (shortest predicted output first, see the module doc)
    waiting_order: str = "arrival"
    #: the policy class: "unified" (UnifiedScheduler), "vllm-v1" / "vllm-v1-priority"
    #: (``llmopt.policies.slo.vllm_v1.VllmV1``; the other fields are not read)
    engine: str = "unified"
    #: where it comes from: "infermax" (Kim et al.), "sola" (SOLA's baselines), "vllm-v1"
    source: str = "infermax"


_TABLE_1 = [
    SchedulerConfig("vllm", "vllm", hybrid=False, chunked=False, prefill_budget=None,
                    description="vLLM: prefill priority, no hybrid batching, no chunked prefill"),
    SchedulerConfig("sarathi", "sarathi", hybrid=True, chunked=True, prefill_budget=512,
                    description="SARATHI: decode priority, hybrid, chunked prefill P = 512"),
    SchedulerConfig("sarathi-pc", "sarathi", hybrid=True, chunked=True, prefill_budget=None,
                    description="SARATHI with P = C"),
    SchedulerConfig("sarathi-nocp", "sarathi", hybrid=True, chunked=False, prefill_budget=None,
                    description="SARATHI without chunked prefill"),
    SchedulerConfig("vllm-hy", "vllm", hybrid=True, chunked=False, prefill_budget=None,
                    description="vLLM with hybrid batching"),
    SchedulerConfig("sarathi-nohy", "sarathi", hybrid=False, chunked=False, prefill_budget=None,
                    description="SARATHI without hybrid batching or chunked prefill"),
]

SCHEDULERS: dict[str, SchedulerConfig] = {}
for _cfg in _TABLE_1:
    SCHEDULERS[_cfg.name] = _cfg
    SCHEDULERS[f"{_cfg.name}-ef"] = replace(
        _cfg, name=f"{_cfg.name}-ef", eviction_free=True,
        description=_cfg.description + "; eviction-free (reserves I + O − 1)")
for _key, _label in (("arrival", "org"), ("input", "i"), ("output", "o")):
    SCHEDULERS[f"rank-{_label}"] = SchedulerConfig(
        f"rank-{_label}", "rank", hybrid=True, chunked=True, prefill_budget=None,
        rank_key=_key, description=f"Rank_{_label.upper() if _label != 'org' else 'org'}: "
        f"one group ordered by {_key}, hybrid, chunked prefill P = C")
SCHEDULERS["evict-short"] = SchedulerConfig(
    "evict-short", "sarathi", hybrid=True, chunked=True, prefill_budget=None, long_first=True,
    histogram_quantile=0.5,
    description="section 6: SARATHI-like, keep long running requests, evict short ones, "
    "reserve I + Ô − 1 with Ô the median output seen so far")
SCHEDULERS["vllm-unlimited"] = replace(
    SCHEDULERS["vllm"], name="vllm-unlimited", unlimited_memory=True,
    description="vLLM with unlimited KV memory: the section 6 performance bound")

# SOLA's baselines (Hong et al. 2025, section 6.1; see the module doc)
SOLA_BASELINES = ("vllm-d", "vllm-s", "vllm-s-1024", "vllm-s-4096", "sjf", "sjf-predicted")
SCHEDULERS["vllm-d"] = replace(
    SCHEDULERS["vllm"], name="vllm-d", source="sola",
    description="vLLM-D: vLLM v0.4.2's default, prefill-prioritized scheduler (= vllm)")
for _budget in (512, 1024, 4096):
    _name = "vllm-s" if _budget == 512 else f"vllm-s-{_budget}"
    SCHEDULERS[_name] = replace(
        SCHEDULERS["sarathi"], name=_name, prefill_budget=_budget, token_budget=_budget,
        source="sola",
        description=f"vLLM-S: vLLM v0.4.2 chunked prefill (SplitFuse), decodes first, "
        f"{_budget} tokens per batch decodes included")
SCHEDULERS["sjf"] = replace(
    SCHEDULERS["vllm"], name="sjf", waiting_order="output", source="sola",
    description="SJF on vLLM v0.4.2's default scheduler: waiting requests by true output "
    "length, shortest first (head-of-line blocking)")
SCHEDULERS["sjf-predicted"] = replace(
    SCHEDULERS["vllm"], name="sjf-predicted", waiting_order="predicted-output", source="sola",
    description="SJF with predicted outputs: the median output of finished requests with "
    "inputs in the same power-of-two bucket (else of all, else the input length)")

# vLLM V1, today's default engine (``llmopt.policies.slo.vllm_v1``): listed here so that it is
# deployed and replayed by name like the others
V1_SCHEDULERS = ("vllm-v1", "vllm-v1-priority")
SCHEDULERS["vllm-v1"] = SchedulerConfig(
    "vllm-v1", "vllm-v1", hybrid=True, chunked=True, prefill_budget=None, engine="vllm-v1",
    source="vllm-v1",
    description="vLLM V1 (v0.11): running requests first in admission order (decodes, chunked "
    "prefills) within 8192 tokens, preempt the newest, then FCFS admissions")
SCHEDULERS["vllm-v1-priority"] = replace(
    SCHEDULERS["vllm-v1"], name="vllm-v1-priority", engine="vllm-v1-priority",
    description="vLLM V1 with --scheduling-policy priority (priority = arrival, a placeholder): "
    "waiting by (priority, arrival), preempt the lowest priority")
