"""vLLM V1's scheduler (the default engine since vLLM 0.8; mirrored as of v0.11): one
``Scheduler.schedule()`` per step, as in ``vllm/v1/core/sched/scheduler.py``.

Checked against that file of vllm-project/vllm (the stored copy at commit 00024d31, newer than
v0.11; the rules below are the same in the 0.8 – 0.11 releases), ``schedule()``:

1. *Running requests first*, in the order of ``self.running`` — the order they were admitted
   (a request is appended when it is admitted, removed when it finishes or is preempted), with
   decodes and partially prefilled requests interleaved: ``while req_index < len(self.running)
   and token_budget > 0``, each takes ``min(num_tokens − num_computed_tokens, token_budget)``
   tokens (1 for a decode; a chunk of the rest of its prompt, or of its recompute, otherwise).
   ``long_prefill_token_threshold`` is 0 by default: no further cap. The budget is
   ``max_num_batched_tokens`` (8192 here, vLLM's default for online serving on a large GPU;
   capped by the instance's C), and the instance's P, when it gives one, caps the prompt tokens
   of a step (vLLM has no such budget; llmopt's validator has).
2. *Preemption*: when ``kv_cache_manager.allocate_slots(request, num_new_tokens)`` fails, the
   scheduler preempts ``self.running.pop()`` — the most recently admitted running request —
   and retries, until the request fits or was itself the one preempted (then the running loop
   stops). Preemption is by recompute: the request's KVs are freed (``Replica.evict``) and it
   is put back at the *head* of the waiting queue (``prepend_request``); here each preempted
   request goes to the front of this policy's own FCFS queue, in the same order.
3. *Waiting requests* are scheduled only ``if not preempted_reqs`` in this step: in queue
   order, while ``token_budget > 0`` and fewer than ``max_num_seqs`` (256, capped by J) run,
   each takes ``min(num_tokens, token_budget)`` tokens; the first that
   ``allocate_slots`` refuses stops the loop (head-of-line blocking).

``vllm-v1-priority`` mirrors ``--scheduling-policy priority``: the waiting queue is a heap on
(priority, arrival) and the victim is ``max(self.running, key=(priority, arrival_time))``, which
may be a request already scheduled in this step (its tokens and KVs are then given back).
llmopt's requests carry no priority: the priority is the arrival time, a placeholder, so the
waiting order is FCFS and the victim the latest arrival among the running requests, which makes
``vllm-v1-priority`` schedule like ``vllm-v1`` in practice (running requests stay in arrival
order under both). A subclass gives real priorities by overriding ``priority_keys`` (lower
first; ties by arrival, then by the request's index).

KV memory: vLLM V1 allocates a request's KV blocks as its tokens are scheduled
(``allocate_slots`` for ``num_new_tokens``), not its whole prompt at admission. In llmopt's
ledger a request admitted with a first chunk c reserves exactly c (m_reserve = c, so it holds
max(m, c) = m afterwards), and every later chunk or decode takes its new KVs from the free pool
in the step that computes them; a step that cannot have them preempts as above. Without a
prefix cache memory is counted in tokens here, in blocks of 16 tokens in vLLM.

With prefix caching (``system.prefix_caching``, ``llmopt.sim.prefix_replica``) memory is in
blocks, as in vLLM: a waiting request's ``num_computed_tokens`` starts at its cache hit
(``get_computed_blocks``: the longest cached run of its prompt's full blocks, short of its last
token), its first step schedules ``min(num_tokens − hit, token_budget)`` tokens, and
``allocate_slots`` needs the blocks of those tokens plus the hit's blocks that sit in the free
queue (cached, held by no running request); a preempted request's blocks stay cached, so its
recompute re-hits what was not evicted meanwhile.

Fast path (``steady``): a decode-only step of every running request, with no request in a
prefill, repeats until a request finishes, the KVs run out (both end the replica's runs) or, in
priority mode, a request arrives; in FCFS mode an arrival joins the tail of the queue, behind a
head that did not fit, so it changes nothing.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from llmopt.data.instance import Instance
from llmopt.policies.base import RUNNING, Batch, IterationPolicy, ReplicaView, Steady
from llmopt.policies.infermax.unified import check_continuous

MAX_NUM_BATCHED_TOKENS = 8192
MAX_NUM_SEQS = 256
UNTIL_ARRIVAL = Steady(math.inf, until_arrival=True)
BLOCKED = Steady(math.inf, until_arrival=False)


class VllmV1(IterationPolicy):
    """See the module doc. ``priority``: vLLM's priority scheduling policy (priority =
    arrival); ``max_num_batched_tokens`` and ``max_num_seqs`` as vLLM's engine arguments."""

    def __init__(self, name: str = "vllm-v1", *, priority: bool = False,
                 max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
                 max_num_seqs: int = MAX_NUM_SEQS) -> None:
        self.name = name
        self.priority = priority
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.budget = 0          # tokens per step
        self.prefill: float = 0  # prompt tokens per step (the instance's P, if any)
        self.J = 0
        self.order: list[int] = []  # running requests in admission order (vLLM's self.running)
        self.queue: deque[int] = deque()  # FCFS: the waiting queue in vLLM's order

    # ------------------------------------------------------------------ setup

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        check_continuous(instance, replica)
        self.budget = int(min(self.max_num_batched_tokens, replica.C))
        self.prefill = min(self.budget, replica.P_system)
        self.J = min(self.max_num_seqs, replica.J)

    def priority_keys(self, instance: Instance) -> np.ndarray:
        """The replica's waiting order: (priority, arrival) = arrival (see the module doc)."""
        return instance.arrival_ms

    def reservation(self, replica: ReplicaView, i: int) -> int:
        """What a waiting request's first step allocates at most: its whole (re)fill, or a
        budget's worth (the admission itself reserves the chunk it is given)."""
        return int(min(replica.S[i] - replica.m[i], self.prefill or replica.S[i]))

    def arrived(self, replica: ReplicaView, i: int) -> None:
        if not self.priority:
            self.queue.append(i)

    def finished(self, replica: ReplicaView, i: int) -> None:
        self.order.remove(i)

    # ------------------------------------------------------------------ schedule()

    def next_batch(self, r: ReplicaView) -> Batch | None:
        b = r.new_batch(self.budget, self.prefill)
        if not self._schedule_running(r, b):
            self._schedule_waiting(r, b)
        elif b.empty:
            # every request scheduled was preempted (priority mode): vLLM runs an empty step
            # and schedules again; here the next step is formed at once
            return self.next_batch(r)
        return b if b.chunks or b.n_dec else None

    def _schedule_running(self, r: ReplicaView, b: Batch) -> bool:
        """Step 1 and 2 of the module doc; True when a request was preempted. Without a
        preemption the order matters only for the token budget: when the requests in a
        prefill are the last admitted (as FCFS admission makes them but after a preemption)
        and every decode fits, the decodes are taken at once."""
        order = self.order
        if not order:
            return False
        pres = r.prefilling
        k = len(pres)
        n_dec = len(order) - k
        if n_dec <= b.tokens and (k == 0 or all(i in pres for i in order[-k:])):
            free = b.free - (r.all_decode_needs() if n_dec else 0)
            tokens, prefill = b.tokens - n_dec, b.prefill
            chunks = []
            for i in order[len(order) - k:]:
                if tokens <= 0 or free < 0:
                    break
                c = int(min(r.S[i] - r.m[i], tokens, prefill))
                if c > 0:
                    free -= r.chunk_kv(i, c)
                    chunks.append((i, c))
                    tokens -= c
                    prefill -= c
            if free >= 0:  # nothing preempted
                b.free = free
                if n_dec:
                    b.add_all_decodes(n_dec)
                for i, c in chunks:
                    b.add_chunk(i, c)
                return False
        return self._in_order(r, b)

    def _in_order(self, r: ReplicaView, b: Batch) -> bool:
        """The running loop request by request, preempting when KVs are short."""
        tokens, prefill, free = b.tokens, b.prefill, b.free
        scheduled: dict[int, tuple[int, int, bool]] = {}  # request: tokens, new KVs, chunk?
        preempted = False
        status = r.status
        for i in list(self.order):
            if tokens <= 0:
                break
            if status[i] != RUNNING:
                continue  # preempted in this step
            chunk = not r.decoding(i)
            if chunk:
                c = int(min(r.S[i] - r.m[i], tokens, prefill))
                if c <= 0:
                    continue  # vLLM: num_new_tokens == 0, the next request may still run
                need = r.chunk_kv(i, c)
            else:
                c, need = 1, r.decode_needs(i)
            while need > free:
                victim = self._victim(r)
                if victim in scheduled:  # priority mode: give its step back
                    t, kv, was_chunk = scheduled.pop(victim)
                    tokens += t
                    free += kv
                    if was_chunk:
                        prefill += t
                free += r.held_by(victim)
                self._preempt(r, victim)
                preempted = True
                if victim == i:
                    break
            if status[i] != RUNNING:
                break  # it preempted itself: the running loop ends
            scheduled[i] = (c, need, chunk)
            tokens -= c
            free -= need
            if chunk:
                prefill -= c
        b.free = free
        dec = []
        for i, (c, _, chunk) in scheduled.items():
            if chunk:
                b.add_chunk(i, c)
            else:
                dec.append(i)
        if dec and len(dec) == r.n_decoders():
            b.add_all_decodes(len(dec))
        elif dec:
            b.add_decodes(dec)
        return preempted

    def _victim(self, r: ReplicaView) -> int:
        """vLLM: ``self.running.pop()``, or in priority mode the lowest priority: the
        highest (priority, arrival), here the last in the replica's waiting order (priority
        = arrival, then the request's index: vLLM's arrival times are never equal)."""
        if not self.priority:
            return self.order[-1]
        return max(self.order, key=r.rank_of.__getitem__)

    def _preempt(self, r: ReplicaView, victim: int) -> None:
        r.evict(victim)
        self.order.remove(victim)
        if not self.priority:
            self.queue.appendleft(victim)  # vLLM: waiting.prepend_request

    def _head(self, r: ReplicaView) -> int | None:
        if self.priority:
            return r.by_rank[r.waiting[0]] if r.waiting else None
        return self.queue[0] if self.queue else None

    def _schedule_waiting(self, r: ReplicaView, b: Batch) -> None:
        """Step 3: admissions in queue order while tokens, slots and KVs last."""
        while b.tokens > 0 and r.n_running < self.J:
            i = self._head(r)
            if i is None:
                return
            hit = r.prefix_hit(i)  # get_computed_blocks: the prompt's cached prefix
            c = int(min(r.S[i] - hit, b.tokens, b.prefill))
            if c <= 0 or r.admission_kv(i, c) > b.free:
                return  # allocate_slots refuses the head: it blocks the queue
            r.take_waiting(i)
            if not self.priority:
                self.queue.popleft()
            r.admit(i, c, hit + c, b)
            self.order.append(i)

    def steady(self, r: ReplicaView, batch: Batch) -> Steady | None:
        """See the module doc: a decode-only step of every running request (none in a
        prefill) admitted no one, so the queue head does not fit (free KVs only shrink), no
        slot is free, or the decodes take every token."""
        if r.prefilling:
            return None
        if r.n_running >= self.J or r.n_decoders() >= self.budget:
            return BLOCKED
        if self._head(r) is not None and not self.priority:
            return BLOCKED
        return UNTIL_ARRIVAL
