"""One replica (model instance) of the simulated cluster: its requests' progress, its KV ledger,
its waiting and running sets, and the iterations it runs.

Request state follows the InferMax CSP's notation (Kim et al. 2025): S = prompt plus generated
tokens, m = tokens whose KVs are cached. A request in a batch processes c tokens (a prefill or
refill chunk, or 1 for a decode); when m reaches S it generates a token (S grows by one). Where
the prefill generates the first output token (``IterationPolicy.first_token_from_prefill``, the
InferMax model) a request decodes O − 1 times and holds at most I + O − 1 KVs; in Pang et al.'s
stage model the first token comes from the first decode, so it decodes O times and holds up to
I + O. An evicted request frees its KVs and keeps S: its refill recomputes them.

At most J requests run at once (``system.clients``; vLLM's max_num_seqs); a running request holds
one of J slots (the schedule's ``client``) until it finishes or is evicted. A running request
holds max(m, m_reserve) KVs, m_reserve being what it reserved when it started
(``IterationPolicy.reservation``); the policy admits only what fits M.

Batch time: the profile's cost model (``iteration_ms``). The running requests in the decode
phase that decode in every batch form a :class:`~llmopt.sim.decode_stream.DecodeStream`,
advanced in O(1) per iteration, so that a batch costs Python work in proportion to its prefill
chunks, admissions, completions and evictions, not to the number of running requests. Runs of
identical decode-only iterations are advanced in one step when the policy promises them
(``IterationPolicy.steady``), and stop at the replica's own events: a member finishing or
outgrowing its reservation, the KVs running out, and (when the policy asks) the next arrival.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd

from llmopt.data.cost.base import IterationCosts
from llmopt.data.instance import Instance
from llmopt.data.limits import resolve_limits
from llmopt.sim.batch import Batch
from llmopt.sim.decode_stream import DecodeStream
from llmopt.sim.policy import DONE, PENDING, RUNNING, WAITING, IterationPolicy
from llmopt.sim.recorder import Recorder

NO_NEED = -(1 << 62)  # the reservation of a running request: it always "fits"
STEPWISE_ROUNDS = 32  # decode-only runs up to this long are timed round by round, not numpy


@dataclass
class RequestState:
    """Progress of every request of the instance (shared by the replicas: a request lives on
    one of them), as Python lists for scalar access in the batch loop."""

    I: list[int]
    O: list[int]
    arr: list[float]
    S: list[int]
    m: list[int]
    gen: list[int]
    status: list[int]
    reserve_to: list[int]
    evictions: list[int]
    slot: list[int]
    last_slot: list[int]
    replica: list[int]
    first_ms: list[float]
    finish_ms: list[float]
    first_g: list[int] = field(default_factory=list)  # stream iteration of the first token
    # with a prefix cache: prompt tokens found cached at the first admission, and at every
    # admission (refills included)
    cached_first: list[int] = field(default_factory=list)
    cached_total: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, instance: Instance) -> RequestState:
        n = instance.num_requests
        inputs = instance.input_tokens.astype(np.int64).tolist()
        return cls(I=inputs, O=instance.output_tokens.astype(np.int64).tolist(),
                   arr=instance.arrival_ms.astype(float).tolist(), S=list(inputs),
                   m=[0] * n, gen=[0] * n, status=[PENDING] * n, reserve_to=[0] * n,
                   evictions=[0] * n, slot=[-1] * n, last_slot=[-1] * n, replica=[-1] * n,
                   first_ms=[math.nan] * n, finish_ms=[math.nan] * n, first_g=[-1] * n,
                   cached_first=[0] * n, cached_total=[0] * n)


class Replica:
    """See the module doc. Policies act on it through ``admit``, ``evict``, ``take_waiting``
    and the batch; routers read ``t``, ``n_running``, ``waiting_count``, ``free_kv()`` and
    ``outstanding_tokens``."""

    def __init__(self, index: int, instance: Instance, state: RequestState,
                 policy: IterationPolicy, rank_of: list[int], by_rank: list[int],
                 fast: bool = True) -> None:
        self.index, self.instance, self.policy = index, instance, policy
        # a family that times iterations: the policy's check() rejects the others before the run
        self.profile = cast(IterationCosts, instance.profile)
        limits = resolve_limits(instance)
        self.J = limits.clients
        self.C: float = limits.batch_tokens or math.inf
        self.P_system: float = limits.prefill_tokens or math.inf
        self.M: float = (math.inf if policy.unlimited_memory or limits.kv_tokens is None
                         else limits.kv_tokens)
        self.kv_limit = limits.kv_tokens
        self._state = state
        self.I, self.O, self.arr = state.I, state.O, state.arr
        self.S, self.m, self.gen = state.S, state.m, state.gen
        self.status, self.reserve_to, self.slot = state.status, state.reserve_to, state.slot
        self.first_ms, self.replica_of = state.first_ms, state.replica
        self.rank_of, self.by_rank = rank_of, by_rank
        self.first_from_prefill = policy.first_token_from_prefill
        self.fast = fast
        self.stop_at_arrivals = False  # runs stop before every arrival (a router reads state)
        self._stream = DecodeStream(self.m, self.S, self.gen, self.reserve_to, self.O)
        self._idle: set[int] = set()        # decode phase, outside the stream
        self.prefilling: set[int] = set()  # running, before or in a prefill/refill
        self.evicted_now = 0
        self.just_evicted: set[int] = set()
        self._free_slots = list(range(self.J))
        heapq.heapify(self._free_slots)
        self.waiting: list[int] = []  # ranks of the waiting requests, sorted
        # their reservations alongside, and by rank with NO_NEED for running requests (fixed
        # while a request waits; a policy whose reservations move may refresh them)
        self.waiting_need: list[int] = []
        self.need_by_rank = [NO_NEED] * len(rank_of)
        self.n_running = 0
        self.dec_keys: list[int] | None = [] if policy.tracks_decode_ranks else None
        self.members: list[int] = []
        self.outstanding_tokens = 0
        self.decode_iterations = 0
        self.tokens_since_prefill = 0
        self.t = 0.0              # end of the iteration in flight (or of the last one)
        self.last_start = 0.0     # start of that iteration
        self.wake_at: float | None = None  # a policy that waits for a time sets it
        self._rec = Recorder(index)
        self._finished_hook = type(policy).finished is not IterationPolicy.finished
        self._arrived_hook = type(policy).arrived is not IterationPolicy.arrived
        self._iteration_ms = self.profile.iteration_ms

    # ------------------------------------------------------------------ view

    @property
    def waiting_count(self) -> int:
        return len(self.waiting)

    def free_kv(self) -> float:
        """KVs not held by running requests (M − Σ max(m, m_reserve))."""
        return self.M - self._held()

    def running(self) -> list[int]:
        return [*self._stream.members, *self._idle, *self.prefilling]

    def decoders(self) -> list[int]:
        """Running requests in the decode phase."""
        return [*self._stream.members, *self._idle]

    def decoding(self, i: int) -> bool:
        return i in self._stream or i in self._idle

    def free_clients(self) -> list[int]:
        """The client slots no running request holds, lowest first."""
        return sorted(self._free_slots)

    def m_of(self, i: int) -> int:
        return self._stream.m_of(i)

    def generated(self, i: int) -> int:
        """Tokens request ``i`` has generated so far."""
        return self._stream.gen_of(i)

    def decode_kv(self) -> int:
        """KVs cached by the requests in the decode phase (Σ m)."""
        m = self.m
        return self._stream.kv() + sum(m[i] for i in self._idle)

    def cached_kv(self) -> int:
        """KVs cached by every running request (Σ m)."""
        m = self.m
        return self.decode_kv() + sum(m[i] for i in self.prefilling)

    def held_by(self, i: int) -> int:
        """KVs running request i holds: max(m, m_reserve)."""
        return max(self.m_of(i), self.reserve_to[i])

    def _held(self) -> float:
        """KV memory held by the running requests: Σ max(m, m_reserve)."""
        m, r = self.m, self.reserve_to
        held = self._stream.held()
        for group in (self.prefilling, self._idle):
            for i in group:
                held += m[i] if m[i] > r[i] else r[i]
        return held

    kv_unit = 1  # KV memory (tokens) a decode needing memory takes: one KV (a block if cached)

    def prefix_hit(self, i: int) -> int:
        """Prompt tokens of waiting request ``i`` found in this replica's prefix cache now (0:
        no prefix cache)."""
        return 0

    def admission_kv(self, i: int, c: int) -> int:
        """Free KV memory admitting waiting request ``i`` with a first chunk of ``c`` tokens
        after its cache hit takes when it reserves only that chunk (vLLM V1's
        ``allocate_slots``): ``c`` KVs."""
        return c

    def chunk_kv(self, i: int, c: int) -> int:
        """New KV memory a chunk of ``c`` tokens of running request ``i`` takes."""
        m, r = self.m[i], self.reserve_to[i]
        return max(m + c, r) - max(m, r)

    def decode_needs(self, i: int) -> int:
        """1 if request i's next decode needs a new KV (m + 1 > m_reserve), else 0."""
        return 1 if self.m_of(i) >= self.reserve_to[i] else 0

    def all_decode_needs(self) -> int:
        """New KVs the next decode of every request in the decode phase needs."""
        needs = self._stream.needs()
        if self._idle:
            needs += sum(self.decode_needs(i) for i in self._idle)
        return needs

    def decode_needs_each(self) -> dict[int, int]:
        """For each request in the decode phase, the new KVs its next decode needs (0 or 1)."""
        need = self._stream.need_of_each()
        for i in self._idle:
            need[i] = self.decode_needs(i)
        return need

    def n_decoders(self) -> int:
        return len(self._stream) + len(self._idle)

    # ------------------------------------------------------------------ policy actions

    def new_batch(self, tokens: float, prefill: float) -> Batch:
        """An empty batch with the free KVs and these token and prompt-token budgets."""
        return Batch(self.M - self._held(), tokens, prefill)

    # ------------------------------------------------------------------ queues

    def enqueue(self, i: int) -> None:
        """Request ``i`` arrives here."""
        self._state.replica[i] = self.index
        self.members.append(i)
        self.status[i] = WAITING
        self.outstanding_tokens += self.I[i] + self.O[i] - (1 if self.first_from_prefill else 0)
        self._push_waiting(i)
        if self._arrived_hook:
            self.policy.arrived(self, i)

    def _push_waiting(self, i: int) -> None:
        rank = self.rank_of[i]
        at = bisect.bisect_left(self.waiting, rank)
        self.waiting.insert(at, rank)
        need = self.policy.reservation(self, i)
        self.waiting_need.insert(at, need)
        self.need_by_rank[rank] = need

    def take_waiting(self, i: int) -> None:
        rank = self.rank_of[i]
        at = bisect.bisect_left(self.waiting, rank)
        del self.waiting[at]
        del self.waiting_need[at]
        self.need_by_rank[rank] = NO_NEED

    def _into_decode_phase(self, i: int) -> None:
        self.prefilling.discard(i)
        self._idle.add(i)
        if self.dec_keys is not None:
            bisect.insort(self.dec_keys, self.rank_of[i])

    def _stop(self, i: int) -> None:
        """Request i stops running (it finished or is evicted) and frees its slot."""
        in_stream = i in self._stream.members
        if self.dec_keys is not None and (in_stream or i in self._idle):
            del self.dec_keys[bisect.bisect_left(self.dec_keys, self.rank_of[i])]
        if in_stream:
            self._stream.leave(i)
        self._idle.discard(i)
        self.prefilling.discard(i)
        self.n_running -= 1
        heapq.heappush(self._free_slots, self.slot[i])
        self.slot[i] = -1
        self.m[i] = 0
        self.reserve_to[i] = 0

    def admit(self, i: int, c: int, need: int, b: Batch, slot: int | None = None) -> None:
        """Start waiting request ``i`` (already taken off the queue) with a first chunk of
        ``c`` tokens, reserving ``need`` KVs, on ``slot`` (default: the lowest free one)."""
        self.status[i] = RUNNING
        if slot is None:
            slot = heapq.heappop(self._free_slots)
        else:
            self._free_slots.remove(slot)
            heapq.heapify(self._free_slots)
        self.slot[i] = self._state.last_slot[i] = slot
        c = self._reserve(i, c, need, b)
        self.prefilling.add(i)
        self.n_running += 1
        b.add_chunk(i, c)

    def _reserve(self, i: int, c: int, need: int, b: Batch) -> int:
        """Request ``i`` starting reserves ``need`` KVs from the batch's free memory; the
        chunk it computes."""
        self.reserve_to[i] = need
        b.free -= need
        return c

    def evict(self, victim: int) -> None:
        """Preempt running request ``victim``: its KVs are freed (to be recomputed) and it
        waits again."""
        freed = self.m_of(victim)
        self._rec.segment(victim, self.slot[victim], "evict", self.t, self.t, freed)
        self._stop(victim)
        self.evicted_now += 1
        self.just_evicted.add(victim)
        self._state.evictions[victim] += 1
        self.outstanding_tokens += freed
        self.status[victim] = WAITING
        self._push_waiting(victim)

    # ------------------------------------------------------------------ running

    def step(self, next_arrival: float | None) -> bool:
        """Form and run the next batch (or a run of identical ones); False when the policy has
        nothing to run now (it sleeps until a request is routed here, or until ``wake_at``
        when the policy set it)."""
        b = self.policy.next_batch(self)
        self.just_evicted.clear()
        if b is None or (not b.chunks and not b.n_dec):
            return False
        rounds = self._steady_rounds(b, next_arrival) if self.fast else 1
        if rounds == 1:
            self._process(b)
        else:
            self._decode_run(rounds)
        return True

    def _join(self, i: int) -> None:
        if self.gen[i] == 0:  # its first token comes from this stream iteration
            self._state.first_g[i] = self._stream.G
        self._stream.join(i, self.slot[i])

    def _set_decoders(self, b: Batch) -> int:
        """Make the stream exactly the batch's decoders; how many decode."""
        stream = self._stream
        if b.all_decodes:
            for i in self._idle:
                self._join(i)
            self._idle.clear()
            return len(stream)
        chosen = set(b.dec)
        if chosen != stream.members:
            for i in stream.members - chosen:
                stream.leave(i)
                self._idle.add(i)
            for i in chosen - stream.members:
                self._idle.discard(i)
                self._join(i)
        return len(chosen)

    def _process(self, b: Batch) -> None:
        """One batch of prefill/refill chunks and decodes."""
        m, S, gen, O = self.m, self.S, self.gen, self.O
        stream = self._stream
        n_dec = self._set_decoders(b) if b.n_dec else 0
        decode_kv = stream.kv() if n_dec else 0
        chunks = b.chunks
        pre_tokens = units = 0
        for i, c in chunks:
            pre_tokens += c
            units += c * c + 2 * m[i] * c
        start = self.t
        end = start + self._iteration_ms(pre_tokens, n_dec, decode_kv, units, len(chunks))
        other_kv = 0
        for i in self.prefilling:
            other_kv += m[i]
        for i in self._idle:
            other_kv += m[i]
        finished = []  # by their prefill or refill, then by decoding
        self._allocate(chunks, n_dec)
        for i, c in chunks:
            self._rec.segment(i, self.slot[i], "refill" if gen[i] >= 1 else "prefill", start,
                             end, c)
            m[i] += c
            if m[i] == S[i]:
                if gen[i] == 0 and not self.first_from_prefill:
                    self._into_decode_phase(i)  # the first decode gives the first token
                    continue
                gen[i] += 1
                S[i] += 1
                if gen[i] == 1:
                    self._state.first_ms[i] = end
            if gen[i] >= 1 and m[i] == S[i] - 1:
                if gen[i] >= O[i]:
                    finished.append(i)
                else:
                    self._into_decode_phase(i)
        if chunks:
            self._filled(chunks)
        running = self.n_running
        if n_dec:
            finished += stream.step(start, end)
            self.tokens_since_prefill = 0 if chunks else self.tokens_since_prefill + n_dec
            if not chunks:
                self.decode_iterations += 1
        else:
            stream.pause()
            self.tokens_since_prefill = 0
        self.outstanding_tokens -= pre_tokens + n_dec
        kv = stream.kv() + other_kv + pre_tokens
        phase = "mixed" if chunks and n_dec else "prefill" if chunks else "decode"
        self._rec.iteration(start, end, phase, len(chunks) + n_dec, pre_tokens, n_dec, kv,
                           self.evicted_now, running)
        self.evicted_now = 0
        self.t, self.last_start = end, start
        for i in finished:
            self._finish(i)

    def _steady_rounds(self, b: Batch, next_arrival: float | None) -> int:
        """How many iterations, from this one, are the same batch: every running request
        decodes and nothing else, for as long as the policy promises (``steady``), no member
        outgrows its reservation or finishes, and the KVs last; before the next arrival when
        the policy asks. Requests that have just entered the decode phase join the stream
        first, as the batch's processing would have them."""
        if b.chunks or not b.all_decodes or self.evicted_now:
            return 1
        if self._idle:
            self._set_decoders(b)
        promise = self.policy.steady(self, b)
        if promise is None:
            return 1
        stream = self._stream
        rounds = stream.horizon() - stream.G
        if promise.rounds < rounds:
            rounds = promise.rounds
        rounds = int(min(self._rounds_in_memory(rounds), 1 << 20))
        if rounds > 1 and (promise.until_arrival or self.stop_at_arrivals) \
                and next_arrival is not None:
            rounds = self._rounds_before(next_arrival, rounds)
        return max(rounds, 1)

    def _rounds_in_memory(self, rounds: float) -> float:
        """At most ``rounds`` decode-only iterations of the whole stream whose new KVs fit the
        free memory."""
        needs = self._stream.needs()
        free = self.M - self._held()
        if needs and free != math.inf:
            return min(rounds, free // needs)
        return rounds

    def _allocate(self, chunks: list[tuple[int, int]], n_dec: int) -> None:
        """The memory of a batch about to run (its chunks, and the stream's decodes when
        ``n_dec``): the token ledger needs no bookkeeping."""

    def _filled(self, chunks: list[tuple[int, int]]) -> None:
        """The batch's chunks have been computed (m grew by each chunk)."""

    def _rounds_before(self, arrival: float, rounds: int) -> int:
        """How many of ``rounds`` decode-only iterations of the whole stream from now start
        before ``arrival`` (the first always counts). The first STEPWISE_ROUNDS are timed
        first, as an arrival is often near."""
        horizon = min(rounds, STEPWISE_ROUNDS)
        while True:
            starts = self._decode_times(horizon)[0]
            before = 1 + int(np.count_nonzero(starts[1:] + 1e-9 < arrival))
            if before < horizon or horizon == rounds:
                return before
            horizon = rounds

    def _decode_times(self, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of ``rounds`` decode-only iterations of the whole stream from now,
        summed in the order the iteration-by-iteration simulation sums them (up to
        STEPWISE_ROUNDS one by one, as most runs are short; more with numpy)."""
        per_batch, per_kv = self.profile.decode_iteration_costs(len(self._stream))
        n = len(self._stream)
        kv, t = self._stream.kv(), self.t
        if rounds <= STEPWISE_ROUNDS:
            times = [t]
            for _ in range(rounds):
                t += per_batch + per_kv * kv
                times.append(t)
                kv += n
            ends = np.array(times)
        else:
            durations = per_batch + per_kv * (kv + n * np.arange(rounds))
            ends = np.add.accumulate(np.concatenate([[t], durations]))
        return ends[:-1], ends[1:]

    def _decode_run(self, rounds: int) -> None:
        """``rounds`` iterations of the same decode-only batch (see ``_steady_rounds``)."""
        self._allocate_run(rounds)
        stream = self._stream
        n = len(stream)
        kv = stream.kv() + sum(self.m[i] for i in self.prefilling)
        starts, ends = self._decode_times(rounds)
        finished = stream.advance(starts, ends)
        self._rec.iterations(starts, ends, "decode", n, 0, n,
                            kv + n * np.arange(1, rounds + 1), evictions=0,
                            running=self.n_running)
        self.decode_iterations += rounds
        self.tokens_since_prefill += n * rounds
        self.outstanding_tokens -= n * rounds
        self.t, self.last_start = float(ends[-1]), float(starts[-1])
        for i in finished:
            self._finish(i)

    def _allocate_run(self, rounds: int) -> None:
        """The memory of ``rounds`` decode-only iterations of the stream about to run."""

    def _finish(self, i: int) -> None:
        self._stop(i)
        self._state.finish_ms[i] = self.t
        self.status[i] = DONE
        if self._finished_hook:
            self.policy.finished(self, i)

    # ------------------------------------------------------------------ output

    def tables(self, ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Segments and iterations of this replica (decode segments built from the stream)."""
        decodes = self._stream.segments()
        self._rec.segments(*decodes[:2], "decode", *decodes[2:])
        del decodes  # the recorder holds them now, and releases them as it builds the table
        ends = self._stream.ends
        state = self._state
        for i in self.members:
            g = state.first_g[i]
            if g >= 0 and math.isnan(state.first_ms[i]):
                state.first_ms[i] = ends[g]
        return self._rec.segment_frame(ids), self._rec.iteration_frame()
