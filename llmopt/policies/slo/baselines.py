"""The baselines of SOLA's evaluation (Hong et al. 2025, section 6.1) and of today's serving
engine, vLLM V1, as llmopt replays them.

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

vLLM V1 (v0.11, ``llmopt.policies.slo.vllm_v1``) is a scheduler of its own, not a configuration
of InferMax's; ``V1_SCHEDULERS`` gives its two modes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmopt.policies.infermax.configs import SCHEDULERS as INFERMAX
from llmopt.policies.infermax.configs import SchedulerConfig, WaitingOrder

SOLA_BASELINES: dict[str, SchedulerConfig] = {}
SOLA_BASELINES["vllm-d"] = replace(
    INFERMAX["vllm"], name="vllm-d",
    description="vLLM-D: vLLM v0.4.2's default, prefill-prioritized scheduler (= vllm)")
for _budget in (512, 1024, 4096):
    _name = "vllm-s" if _budget == 512 else f"vllm-s-{_budget}"
    SOLA_BASELINES[_name] = replace(
        INFERMAX["sarathi"], name=_name, prefill_budget=_budget, token_budget=_budget,
        description=f"vLLM-S: vLLM v0.4.2 chunked prefill (SplitFuse), decodes first, "
        f"{_budget} tokens per batch decodes included")
SOLA_BASELINES["sjf"] = replace(
    INFERMAX["vllm"], name="sjf", waiting_order=WaitingOrder.OUTPUT,
    description="SJF on vLLM v0.4.2's default scheduler: waiting requests by true output "
    "length, shortest first (head-of-line blocking)")
SOLA_BASELINES["sjf-predicted"] = replace(
    INFERMAX["vllm"], name="sjf-predicted", waiting_order=WaitingOrder.PREDICTED_OUTPUT,
    description="SJF with predicted outputs: the median output of finished requests with "
    "inputs in the same power-of-two bucket (else of all, else the input length)")


@dataclass(frozen=True)
class V1Config:
    """A mode of vLLM V1's scheduler: FCFS, or ``--scheduling-policy priority``."""

    name: str
    priority: bool
    description: str


V1_SCHEDULERS: dict[str, V1Config] = {c.name: c for c in [
    V1Config("vllm-v1", False,
             "vLLM V1 (v0.11): running requests first in admission order (decodes, chunked "
             "prefills) within 8192 tokens, preempt the newest, then FCFS admissions"),
    V1Config("vllm-v1-priority", True,
             "vLLM V1 with --scheduling-policy priority (priority = arrival, a placeholder): "
             "waiting by (priority, arrival), preempt the lowest priority"),
]}

__all__ = ["SOLA_BASELINES", "V1_SCHEDULERS", "V1Config"]
