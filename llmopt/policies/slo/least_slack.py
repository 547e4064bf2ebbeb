"""Least slack first: a deadline-aware continuous-batching scheduler of llmopt's own (no paper),
the reference that shows how much of the gap between today's schedulers and the SLO ceiling
(``llmopt.problems.slo_ceiling``) a schedule can close.

FCFS schedulers collapse under overload: once the queue outgrows the TTFT targets, every
request starts too late, and every iteration still carries every running decode. This one
spends each iteration on what its SLOs need now:

- *Prefills by deadline.* Requests already in a prefill or a refill (an evicted request, whose
  TTFT is settled) go first, then the waiting ones by TTFT deadline (arrival + TTFT target). A
  waiting request that cannot meet its TTFT any more, even alone from now (its prefill alone:
  ⌈I / chunk⌉ iterations of bias + per-prefill-request, plus per_token·I +
  prefill_attention·I²), waits behind every request that still can: such requests are taken
  only in an iteration with no other prefill. A request preempted while the iteration is formed
  waits for the next one.
- *Deferral of long prompts under overload* (``defer``, off by default; the policy
  ``least-slack-defer`` turns it on). The waiting requests that can still meet their TTFT are
  admitted by Moore and Hodgson's rule for the most jobs on time on one machine
  (``llmopt.sequencing``): taken in TTFT-deadline order after the prompts already started, each
  adds its time, and whenever the running sum passes the deadline of the one just added, the
  longest admitted so far is deferred. Deferred requests wait like the hopeless ones. A
  request's time is estimated as its share of an iteration of a full chunk with every current
  decode (that iteration's time over the chunk, per token not cached: its prefix-cache hit or
  the KVs it holds) plus its own prefill attention. It is an option, not the rule, because it
  is not better everywhere (docs/benchmarks.md, slo-ceiling-defer): 3.5 to 45 points more of
  the requests meet their SLOs on ``instances/toy/slo-chat.yaml`` from 60 requests/s up, −5 to
  +3.4 points on the Azure and Mooncake samples, whose memory binds (the rule counts time, not
  KVs).
- *Small prefill chunks.* At most ``chunk`` prompt tokens an iteration (default 256): a
  first token comes at the end of its iteration, whose length every prompt token in it adds
  to.
- *Decodes by slack.* A decoding request joins the iteration when its TPOT slack asks: when the
  time it may still take per token left, ``first token + (O − 1)·TPOT target − now`` over
  ``O − generated``, is under ``urgency`` (default 2) times the length of a decode-only
  iteration of every decoding request. When no prefill runs, every decode runs.
- *Memory.* A request starting reserves its prompt (llmopt's default reservation); when the
  decodes chosen need more KVs than are free, running requests not in the iteration are
  preempted, the one of latest TTFT deadline first (recompute), then the least urgent of the
  decodes chosen.

The chunk and the urgency are choices, measured on ``instances/toy/slo-chat.yaml`` at 53 to
122 requests/s (docs/benchmarks.md, slo-ceiling), not derived; the deferral was measured at 40
to 400 requests/s there and on the Azure and Mooncake samples (slo-ceiling-defer).
"""

from __future__ import annotations

import math

import numpy as np

from llmopt.data.instance import Instance
from llmopt.policies.base import IterationPolicy, ReplicaView
from llmopt.policies.infermax.unified import check_continuous
from llmopt.sequencing import moore_hodgson
from llmopt.sim.batch import Batch
from llmopt.sim.policy import RUNNING

CHUNK_TOKENS = 256
URGENCY = 2.0
NO_DEADLINE_MS = 1e15


class LeastSlack(IterationPolicy):
    """See the module doc."""

    name = "least-slack"

    def __init__(self, chunk: int = CHUNK_TOKENS, urgency: float = URGENCY,
                 defer: bool = False) -> None:
        if chunk < 1 or urgency <= 0:
            raise ValueError("chunk must be >= 1 and urgency > 0")
        self.chunk, self.urgency, self.defer = chunk, urgency, defer
        self.ttft_by: list[float] = []
        self.tpot_ms: list[float] = []
        self.alone_ms: list[float] = []
        self.attention_ms: list[float] = []   # each whole prompt's prefill attention
        self.prefill_chunk = chunk            # ``chunk`` within the replica's C (attach)

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        check_continuous(instance, replica)

    def attach(self, replica: ReplicaView) -> None:
        inst = replica.instance
        ttft = inst.slo_targets("ttft_slo_ms")
        tpot = inst.slo_targets("tpot_slo_ms")
        self.ttft_by = (inst.arrival_ms + np.where(np.isnan(ttft), NO_DEADLINE_MS, ttft)).tolist()
        self.tpot_ms = np.where(np.isnan(tpot), NO_DEADLINE_MS, tpot).tolist()
        self.prefill_chunk = int(min(self.chunk, replica.C))
        self.alone_ms = replica.profile.chunked_prefill_ms(  # type: ignore[attr-defined]
            inst.input_tokens.astype(float).tolist(), self.prefill_chunk)
        self.attention_ms = [_attention_ms(replica, k, 0) if self.defer else 0.0
                             for k in inst.input_tokens.astype(int).tolist()]

    def next_batch(self, r: ReplicaView) -> Batch | None:
        now = r.t
        b = r.new_batch(r.C, r.C)
        urgent, relaxed = self._decodes_by_slack(r, now)
        self._fit_decodes(r, b, urgent, relaxed)
        self._add_prefills(r, b, now)
        if not b.chunks and relaxed:
            self._fit_decodes(r, b, relaxed, [])
        return None if b.empty else b

    # ------------------------------------------------------------------ decodes

    def _decodes_by_slack(self, r: ReplicaView, now: float) -> tuple[list[int], list[int]]:
        """The decoding requests whose TPOT slack asks for a token in this iteration, and the
        others (most urgent first in each)."""
        decoders = r.decoders()
        per_batch, per_kv = r.profile.decode_iteration_costs(len(decoders))
        step = per_batch + per_kv * r.decode_kv()  # a decode-only iteration of them all
        first, outputs = r.first_ms, r.O
        slack: list[tuple[float, int]] = []
        for i in decoders:
            left = outputs[i] - r.generated(i)
            if left <= 0:
                continue
            slack.append(((first[i] + (outputs[i] - 1) * self.tpot_ms[i] - now) / left, i))
        slack.sort()
        urgent = [i for s, i in slack if s < self.urgency * step]
        relaxed = [i for s, i in slack if s >= self.urgency * step]
        return urgent, relaxed

    def _fit_decodes(self, r: ReplicaView, b: Batch, chosen: list[int],
                     keep: list[int]) -> None:
        """``chosen`` decode in this batch, preempting running requests outside it (latest
        TTFT deadline first, ``keep`` last) while their new KVs do not fit."""
        chosen = [i for i in chosen if r.status[i] == RUNNING]  # none preempted meanwhile
        if not chosen:
            return
        chosen = chosen[:int(b.tokens)] if b.tokens != math.inf else chosen
        need = sum(r.decode_needs(i) for i in chosen)
        if need > b.free:
            inside = set(chosen) | b.members
            keep_set = set(keep)
            victims = sorted((i for i in r.running() if i not in inside),
                             key=lambda i: (i not in keep_set, self.ttft_by[i]))
            while need > b.free and victims:
                victim = victims.pop()
                b.free += r.held_by(victim)
                r.evict(victim)
            while need > b.free and chosen:  # the least urgent of them makes room
                victim = chosen.pop()
                need -= r.decode_needs(victim)
                b.free += r.held_by(victim)
                r.evict(victim)
        if chosen:
            b.free -= need
            if len(chosen) == r.n_decoders() and not b.dec and not b.all_decodes:
                b.add_all_decodes(len(chosen))
            else:
                b.add_decodes(chosen)

    # ------------------------------------------------------------------ prefills

    def _add_prefills(self, r: ReplicaView, b: Batch, now: float) -> None:
        """Up to ``chunk`` prompt tokens: refills, then requests by TTFT deadline, those that
        can no longer meet it last."""
        budget = min(self.chunk, b.tokens, b.prefill)
        if budget <= 0:
            return
        by_rank, evicted = r.by_rank, r.just_evicted
        candidates = [*r.prefilling,
                      *(i for i in (by_rank[k] for k in r.waiting) if i not in evicted)]
        deadline = self.ttft_by
        deferred = self._deferred(r, candidates, now) if self.defer else set()

        def key(i: int) -> tuple[int, float]:
            if _started(r, i):
                return (0, deadline[i])
            return (1 if self._hopeful(i, now) and i not in deferred else 2, deadline[i])

        for i in sorted(candidates, key=key):
            if budget <= 0 or (b.chunks and key(i)[0] == 2):
                return  # the late wait for an iteration with no other prefill
            c = int(min(r.S[i] - r.m[i], budget))
            if c <= 0:
                continue
            if r.status[i] == RUNNING:
                b.add_chunk(i, c)
            else:
                need = r.S[i]
                if r.n_running >= r.J or need > b.free:
                    continue
                r.take_waiting(i)
                r.admit(i, c, need, b)
            budget -= c

    def _hopeful(self, i: int, now: float) -> bool:
        """Waiting request i can still meet its TTFT, prefilled alone from now."""
        return now + self.alone_ms[i] <= self.ttft_by[i]

    def _deferred(self, r: ReplicaView, candidates: list[int], now: float) -> set[int]:
        """The waiting requests Moore and Hodgson's rule defers (see the module doc)."""
        chunk = self.prefill_chunk
        per_token = r.profile.iteration_ms(chunk, r.n_decoders(), r.decode_kv(), 0, 1) / chunk
        clock, jobs, waiting = now, [], []
        for i in candidates:
            started = _started(r, i)
            if not started and not self._hopeful(i, now):
                continue   # waits anyway
            cached = int(r.m[i] if r.status[i] == RUNNING else r.prefix_hit(i))
            c = int(r.S[i]) - cached
            attention = (self.attention_ms[i] if not (started or cached)
                         else _attention_ms(r, c, cached))
            if started:
                clock += per_token * c + attention
            else:
                jobs.append((self.ttft_by[i], per_token * c + attention))
                waiting.append(i)
        return {waiting[k] for k in moore_hodgson(jobs, clock)}


def _started(r: ReplicaView, i: int) -> bool:
    """Request i is in a prefill, or in a refill (its TTFT is settled)."""
    return r.status[i] == RUNNING or r.gen[i] >= 1


def _attention_ms(r: ReplicaView, c: int, cached: int) -> float:
    """The prefill attention of a chunk of c tokens after ``cached`` KVs (units c² + 2·cached·c)
    in an iteration of the replica's profile."""
    return (r.profile.iteration_ms(c, 0, 0, c * c + 2 * cached * c, 1)
            - r.profile.iteration_ms(c, 0, 0, 0, 1))


__all__ = ["LeastSlack"]
