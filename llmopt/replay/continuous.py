"""Iteration-level simulator of continuous batching with a paged KV cache (InferMax, Kim et al.
2025, sections 2–3): hybrid batches, chunked prefill, KV-capacity evictions with recompute.

Request state follows the CSP's notation: S = prompt plus generated tokens, m = tokens whose KVs
are cached. A request in a batch processes c tokens (a prefill/refill chunk, or 1 for a decode);
when m reaches S it generates a token (S grows by one). The prefill generates the first output
token, so a request decodes O − 1 times and holds at most I + O − 1 KVs; the last token is not
processed. An evicted request frees its KVs and keeps S: its refill recomputes them.

Batch time: the profile's InferMax cost model (``InferMaxProfile.batch_ms``). The scheduler is one
of ``llmopt.replay.policies.infermax.SCHEDULERS`` (Algorithm 1 and Table 1).

At most J requests run at once (``system.clients``, vLLM's max_num_seqs); a running request holds
one of J slots (the schedule's ``client``) until it finishes or is evicted.

Every iteration is simulated. The running requests in the decode phase that decode in every batch
form a :class:`~llmopt.replay.decode_stream.DecodeStream`, advanced in O(1) per iteration, so
that a batch costs Python work in proportion to its prefill chunks, admissions, completions and
evictions, not to the number of running requests.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np
import pandas as pd

from llmopt.errors import InstanceError
from llmopt.instance import Instance
from llmopt.profiles import InferMaxProfile
from llmopt.replay.decode_stream import DecodeStream
from llmopt.replay.policies.infermax import SchedulerConfig
from llmopt.replay.recorder import Recorder
from llmopt.schedule import Schedule

PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3
RANK_WINDOW = 64  # ranked schedulers look at this many waiting requests per batch
NO_NEED = -(1 << 62)  # the reservation of a running request: it always "fits"
STEPWISE_ROUNDS = 32  # decode-only runs up to this long are timed round by round, not numpy


class _Batch:
    """A batch being formed: prefill/refill chunks, decodes (every request in the decode phase,
    or an explicit list), KV and token budgets, phase so far."""

    __slots__ = (
        "all_decodes",
        "chunks",
        "dec",
        "free",
        "members",
        "n_dec",
        "phase",
        "prefill",
        "tokens",
    )

    def __init__(self, free: float, tokens: int, prefill: int) -> None:
        self.free, self.tokens, self.prefill = free, tokens, prefill
        self.chunks: list[tuple[int, int]] = []  # (request, tokens)
        self.dec: list[int] = []
        self.all_decodes = False
        self.n_dec = 0
        self.members: set[int] = set()
        self.phase: str | None = None

    def add_chunk(self, i: int, c: int) -> None:
        self.chunks.append((i, c))
        self.members.add(i)
        self.tokens -= c
        self.prefill -= c
        self.phase = self.phase or "prefill"

    def add_decodes(self, idx: list[int]) -> None:
        self.dec.extend(idx)
        self.members.update(idx)
        self.count_decodes(len(idx))

    def add_all_decodes(self, n: int) -> None:
        """Every running request in the decode phase (``n`` of them) decodes."""
        self.all_decodes = True
        self.count_decodes(n)

    def count_decodes(self, n: int) -> None:
        """``n`` more decodes, their requests listed later (``dec``/``all_decodes``)."""
        self.n_dec += n
        self.tokens -= n
        self.phase = self.phase or "decode"


class ContinuousEngine:
    def __init__(self, instance: Instance, config: SchedulerConfig,
                 members: np.ndarray | None = None, instance_index: int = 0) -> None:
        profile = instance.profile
        if not isinstance(profile, InferMaxProfile):
            raise InstanceError("continuous-batching replay needs an infermax profile",
                                file=instance.label(), field="model", value=profile.name)
        self.instance, self.profile, self.cfg = instance, profile, config
        self.index = instance_index
        members = np.arange(instance.num_requests) if members is None else np.asarray(members)
        self.ids = [instance.ids[i] for i in members]
        self.I = instance.input_tokens[members].astype(np.int64)
        self.O = instance.output_tokens[members].astype(np.int64)
        self.arr = instance.arrival_ms[members].astype(float)
        self.n = len(members)
        self.J = instance.system.clients
        C = instance.system.max_batch_tokens or profile.max_batch_tokens
        if C is None:
            raise InstanceError("continuous batching needs C, the tokens per batch",
                                file=instance.label(), field="system.max_batch_tokens")
        self.C = C
        P = config.prefill_budget or instance.system.max_prefill_tokens or C
        self.P = min(P, C)
        M = instance.system.kv_capacity or profile.kv_capacity
        if M is None and not config.unlimited_memory:
            raise InstanceError("continuous batching needs M, the KV capacity",
                                file=instance.label(), field="system.kv_capacity")
        self.M = math.inf if config.unlimited_memory else int(M)
        self._check_fits()

        n = self.n
        # per-request state as Python lists (scalar access in the batch loop)
        self._I, self._O, self._arr = self.I.tolist(), self.O.tolist(), self.arr.tolist()
        self.S = list(self._I)
        self.m = [0] * n
        self.gen = [0] * n
        self.status = [PENDING] * n
        self.reserve_to = [0] * n
        self.evictions = [0] * n
        self.slot = [-1] * n
        self.last_slot = [-1] * n
        self.first_ms = [math.nan] * n
        self.finish_ms = [math.nan] * n
        # the priority order (key, arrival, index) as one integer per request: 0 is first
        self.by_rank = np.lexsort((np.arange(n), self.arr, self._priority_keys())).tolist()
        self.rank_of = [0] * n
        for r, i in enumerate(self.by_rank):
            self.rank_of[i] = r
        self.stream = DecodeStream(self.m, self.S, self.gen, self.reserve_to, self._O)
        self.idle: set[int] = set()        # decode phase, outside the stream
        self.prefilling: set[int] = set()  # running, before or in a prefill/refill
        self.evicted_now = 0
        self.just_evicted: set[int] = set()
        self.free_slots = list(range(self.J))
        heapq.heapify(self.free_slots)
        self.waiting: list[int] = []  # ranks of the waiting requests, sorted
        # their reservations alongside, and by rank with NO_NEED for running requests (fixed
        # while a request waits, except a histogram's estimate: ranked batches refresh it)
        self.waiting_need: list[int] = []
        self.need_by_rank = [NO_NEED] * n
        self.n_running = 0
        self.dec_keys: list[int] | None = [] if config.groups == "rank" else None  # ranks
        self.steady_runs = True
        self.outputs_seen: list[int] = []  # sorted: the online output-length histogram
        self.t = 0.0
        self.rec = Recorder(instance_index)

    # ------------------------------------------------------------------ setup

    def _check_fits(self) -> None:
        need = self.I + self.O - 1
        too_big = np.flatnonzero(need > self.M)
        if len(too_big):
            i = int(too_big[0])
            raise InstanceError(f"request {self.ids[i]} needs {int(need[i])} KV tokens, more "
                                f"than the cache", file=self.instance.label(),
                                field="system.kv_capacity", value=self.M)
        if not self.cfg.chunked:
            too_long = np.flatnonzero(need > min(self.P, self.C))
            if len(too_long):
                i = int(too_long[0])
                raise InstanceError(
                    f"request {self.ids[i]} may need to (re)fill {int(need[i])} tokens at once, "
                    f"more than a batch allows without chunked prefill (policy "
                    f"{self.cfg.name})", file=self.instance.label(),
                    field="system.max_batch_tokens", value=min(self.P, self.C))

    def _priority_keys(self) -> np.ndarray:
        if self.cfg.groups == "rank" and self.cfg.rank_key == "input":
            return self.I.astype(float)
        if self.cfg.groups == "rank" and self.cfg.rank_key == "output":
            return self.O.astype(float)
        return self.arr

    def _push_waiting(self, i: int) -> None:
        rank = self.rank_of[i]
        at = bisect.bisect_left(self.waiting, rank)
        self.waiting.insert(at, rank)
        need = self._reservation(i)
        self.waiting_need.insert(at, need)
        self.need_by_rank[rank] = need

    def _take_waiting(self, i: int) -> None:
        rank = self.rank_of[i]
        at = bisect.bisect_left(self.waiting, rank)
        del self.waiting[at]
        del self.waiting_need[at]
        self.need_by_rank[rank] = NO_NEED

    def _into_decode_phase(self, i: int) -> None:
        self.prefilling.discard(i)
        self.idle.add(i)
        if self.dec_keys is not None:
            bisect.insort(self.dec_keys, self.rank_of[i])

    def _stop(self, i: int) -> None:
        """Request i stops running (it finished or is evicted) and frees its slot."""
        in_stream = i in self.stream.members
        if self.dec_keys is not None and (in_stream or i in self.idle):
            del self.dec_keys[bisect.bisect_left(self.dec_keys, self.rank_of[i])]
        if in_stream:
            self.stream.leave(i)
        self.idle.discard(i)
        self.prefilling.discard(i)
        self.n_running -= 1
        heapq.heappush(self.free_slots, self.slot[i])
        self.slot[i] = -1
        self.m[i] = 0
        self.reserve_to[i] = 0

    # ------------------------------------------------------------------ state

    def _running(self) -> list[int]:
        return [*self.stream.members, *self.idle, *self.prefilling]

    def _decoding(self, i: int) -> bool:
        return i in self.stream or i in self.idle

    def _m(self, i: int) -> int:
        return self.stream.m_of(i)

    def _held(self) -> float:
        """KV memory held by the running requests: Σ max(m, m_reserve)."""
        m, r = self.m, self.reserve_to
        held = self.stream.held()
        for group in (self.prefilling, self.idle):
            for i in group:
                held += m[i] if m[i] > r[i] else r[i]
        return held

    def _reservation(self, i: int) -> int:
        """KVs a waiting request reserves when it starts (m_reserve of CANALLOCATE)."""
        if self.cfg.eviction_free:
            return self._I[i] + self._O[i] - 1
        if self.cfg.histogram_quantile is not None and self.gen[i] == 0 and self.outputs_seen:
            seen = self.outputs_seen
            est = seen[int(self.cfg.histogram_quantile * (len(seen) - 1))]
            return int(max(self.S[i], min(self._I[i] + max(est, 1) - 1, self.M)))
        return self.S[i]

    # ------------------------------------------------------------------ run

    def _arrive(self) -> int | None:
        """Queue every request that has arrived by now; the next one to arrive, if any."""
        while self._nxt < self.n and self._arr[self._order[self._nxt]] <= self.t + 1e-9:
            i = self._order[self._nxt]
            self.status[i] = WAITING
            self._push_waiting(i)
            self._nxt += 1
        return self._order[self._nxt] if self._nxt < self.n else None

    def run(self) -> Schedule:
        self._order = np.argsort(self.arr, kind="stable").tolist()
        self._nxt = 0
        done = 0
        while done < self.n:
            next_arrival = self._arrive()
            if not self.n_running and not self.waiting:
                self.t = max(self.t, self._arr[next_arrival])
                continue
            batch = self._form_batch()
            if batch is None:
                if next_arrival is not None and not self.n_running:
                    self.t = max(self.t, self._arr[next_arrival])
                    continue
                stuck = [self.ids[i] for i in range(self.n) if self.status[i] != DONE][:3]
                raise InstanceError(f"scheduler {self.cfg.name} cannot make progress, e.g. "
                                    f"{stuck}", file=self.instance.label(), field="requests")
            rounds = self._steady_rounds(batch, next_arrival) if self.steady_runs else 1
            done += self._process(batch) if rounds == 1 else self._decode_run(rounds)
        return self._schedule()

    # ------------------------------------------------------------------ batch formation

    def _evict(self, victim: int) -> None:
        self.rec.segment(victim, self.slot[victim], "evict", self.t, self.t, self._m(victim))
        self._stop(victim)
        self.evicted_now += 1
        self.just_evicted.add(victim)
        self.evictions[victim] += 1
        self.status[victim] = WAITING
        self._push_waiting(victim)

    def _running_order(self) -> list[int]:
        """Running requests from highest to lowest priority."""
        if self.cfg.groups == "sarathi":
            dec = [*self.stream.members, *self.idle]
            if self.cfg.long_first:
                dec.sort(key=lambda i: (-self._m(i), self._arr[i], i))
            else:
                dec.sort(key=self.rank_of.__getitem__)
            return dec + sorted(self.prefilling, key=self.rank_of.__getitem__)
        return sorted(self._running(), key=self.rank_of.__getitem__)

    def _form_batch(self) -> _Batch | None:
        """One GETNEXTBATCH."""
        b = _Batch(self.M - self._held(), self.C, self.P)
        if self.cfg.groups == "vllm":
            self._admit_waiting(b)
            self._add_running(b)
        elif self.cfg.groups == "sarathi":
            self._add_running(b)
            self._admit_waiting(b)
        else:
            self._rank_batch(b)
        self.just_evicted.clear()
        if not b.chunks and not b.n_dec:
            return None
        return b

    def _chunk(self, i: int, b: _Batch) -> int:
        """The chunk request i processes given the batch's prefill and token budgets left (0:
        none)."""
        prefill, tokens = b.prefill, b.tokens
        remaining = self.S[i] - self.m[i]
        c = min(remaining, prefill, tokens) if self.cfg.chunked else remaining
        return c if 0 < c <= prefill and c <= tokens else 0

    def _admit(self, i: int, c: int, need: int, b: _Batch) -> None:
        self.status[i] = RUNNING
        self.slot[i] = heapq.heappop(self.free_slots)
        self.last_slot[i] = self.slot[i]
        self.reserve_to[i] = need
        self.prefilling.add(i)
        self.n_running += 1
        b.free -= need
        b.add_chunk(i, c)

    def _admit_waiting(self, b: _Batch) -> None:
        """Waiting requests in priority order while they fit; the first that does not blocks
        the rest (head-of-line, as vLLM)."""
        while self.waiting and self.n_running < self.J:
            if not self.cfg.hybrid and b.phase == "decode":
                break
            i = self.by_rank[self.waiting[0]]
            c = self._chunk(i, b) if i not in self.just_evicted else 0
            need = self._reservation(i)
            if c == 0 or need > b.free:
                break
            self._take_waiting(i)
            self._admit(i, c, need, b)

    def _decode_needs(self, i: int) -> int:
        """1 if request i's next decode needs a new KV (m + 1 > m_reserve), else 0."""
        return 1 if self._m(i) >= self.reserve_to[i] else 0

    def _all_decode_needs(self) -> int:
        """New KVs the next decode of every request in the decode phase needs."""
        needs = self.stream.needs()
        if self.idle:
            needs += sum(self._decode_needs(i) for i in self.idle)
        return needs

    def _held_by(self, i: int) -> int:
        """KVs running request i holds: max(m, m_reserve)."""
        return max(self._m(i), self.reserve_to[i])

    def _add_running(self, b: _Batch) -> None:
        """Running decodes (all at once when KV and tokens suffice, else one by one in priority
        order with evictions), then running requests in the middle of a chunked prefill."""
        pres = [i for i in self.prefilling if i not in b.members]
        n_dec = len(self.stream) + len(self.idle)
        if n_dec and (self.cfg.hybrid or b.phase != "prefill"):
            needs = self._all_decode_needs()
            if needs <= b.free and n_dec <= b.tokens:
                b.free -= needs
                b.add_all_decodes(n_dec)
            else:
                self._decodes_with_evictions(b)
        if pres and (self.cfg.hybrid or b.phase != "decode"):
            for i in sorted(pres, key=self.rank_of.__getitem__):
                if i not in self.prefilling:
                    continue  # evicted by the decodes
                c = self._chunk(i, b)
                if c:
                    b.add_chunk(i, c)

    def _decodes_with_evictions(self, b: _Batch) -> None:
        """Decodes in priority order, each needing a new KV unless reserved: while KV is short,
        the lowest-priority running request outside the batch is evicted (possibly a decode
        candidate itself). Taking candidates one by one and evicting from the bottom as each
        runs short evicts the same requests as evicting from the bottom until all survivors
        fit, which is what is done here."""
        ranked = self._running_order()
        need = self.stream.need_of_each()
        for i in self.idle:
            need[i] = self._decode_needs(i)
        keep = [i for i in ranked if i in need][: max(b.tokens, 0)]
        total = sum(need[i] for i in keep)
        for victim in reversed(ranked):
            if total <= b.free:
                break
            if victim in b.members:
                continue
            b.free += self._held_by(victim)
            self._evict(victim)
            if victim in need and victim in keep:
                keep.remove(victim)
                total -= need[victim]
        if total > b.free:
            return
        b.free -= total
        if keep:
            b.add_decodes(keep)

    def _add_decode(self, i: int, b: _Batch) -> None:
        """One decode candidate; evicts lower-priority running requests when KV is short (the
        candidate itself when none is lower)."""
        if self.status[i] != RUNNING or b.tokens < 1:
            return
        need = self._decode_needs(i)
        while need > b.free:
            victim = next((v for v in reversed(self._running_order()) if v not in b.members),
                          None)
            if victim is None:
                return
            freed = self._held_by(victim)
            self._evict(victim)
            b.free += freed
            if victim == i:
                return
        b.free -= need
        b.add_decodes([i])

    def _rank_batch(self, b: _Batch) -> None:
        """One group of running and waiting requests ordered by the rank key: each decode takes
        a token and (unless reserved) a KV, evicting the lowest-priority running requests
        outside the batch when KVs are short (itself when none is lower); each running prefill
        takes a chunk; each of the first RANK_WINDOW waiting requests is admitted if a slot,
        a chunk and its reservation fit."""
        n_dec = len(self.stream) + len(self.idle)
        needs = self._all_decode_needs()
        if not self.cfg.hybrid or needs not in (0, n_dec):
            self._rank_batch_one_by_one(b)
            return
        self._rank_batch_in_runs(b, unit=1 if needs else 0)

    def _rank_batch_in_runs(self, b: _Batch, unit: int) -> None:
        """``_rank_batch`` when every decode needs the same KVs (``unit``): the decodes between
        two prefill candidates are taken as a run, in bulk, and victims come from a pointer
        that moves up from the bottom of the running order (it never passes the decode being
        added, which would be the victim itself).

        Candidates are priority ranks like the decoders; the running ones are those
        in a prefill (one evicted in this batch is skipped as just evicted). Until an
        eviction, free KVs only shrink, so waiting requests are left out when their
        reservation does not fit in what the decodes ranked before them leave, or no longer
        fits after an admission; the first eviction brings back every one ranked after it.
        Waiting candidates ranked before the decode that runs short of KVs, and not fitting
        now, are passed over in one step."""
        status, members, dec = self.status, b.members, self.dec_keys  # dec: live, sorted
        req = self.by_rank
        bisect_left = bisect.bisect_left
        just_evicted = self.just_evicted
        prefilling = sorted(map(self.rank_of.__getitem__, self.prefilling)) \
            if self.prefilling else []
        window = self.waiting[:RANK_WINDOW]
        free0 = b.free
        need = self.need_by_rank  # NO_NEED: running
        unlimited = self.cfg.unlimited_memory
        after_all = free0 - unit * len(dec)  # free KVs at most, after every decode
        last = dec[-1] if dec else None
        fits = []
        if self.n_running < self.J and window:
            if self.cfg.histogram_quantile is None:
                needs = self.waiting_need[:RANK_WINDOW]
            else:  # the estimate moves as requests finish
                needs = [self._reservation(req[e]) for e in window]
                for e, nd in zip(window, needs, strict=True):
                    need[e] = nd
            if min(needs) <= free0:  # often none fits: one pass in C says so
                fits = [e for e, s in zip(window, needs, strict=True)
                        if s <= after_all
                        or (s <= free0 and e < last
                            and s <= free0 - unit * bisect_left(dec, e))]
        cands = sorted(prefilling + fits) if prefilling and fits else prefilling or fits
        order: list[int] | None = None  # the running order, built at the first eviction
        back = dp = k = 0
        while True:
            cand = cands[k] if k < len(cands) else None
            if cand is not None and need[cand] > b.free:
                # free KVs only shrink until the decode that runs short of them: the waiting
                # candidates ranked before it that do not fit now are passed over at once
                free = b.free
                reach = len(dec) if not unit or unlimited else dp + max(free, 0)
                bound = dec[reach] if reach < len(dec) else self.n  # n: after every rank
                n_cands = len(cands)
                while cand < bound:  # cand is waiting and does not fit
                    k += 1
                    if k == n_cands:
                        cand = None
                        break
                    cand = cands[k]
                    if need[cand] <= free:  # running, or fits
                        break
            while True:  # the decodes ranked before cand
                if dp >= len(dec):
                    break
                hi = len(dec) if cand is None else bisect.bisect_left(dec, cand)
                if dp >= hi:
                    break
                if b.tokens < 1:
                    self._decodes_taken(b, dp)
                    return  # nothing else can enter the batch
                take = hi - dp if hi - dp <= b.tokens else b.tokens
                if unit and take > b.free:
                    take = int(b.free)
                if take > 0:
                    b.count_decodes(take)
                    b.free -= unit * take
                    dp += take
                    if dp == hi:
                        break  # every decode before cand is in (none left, none evicted)
                    continue
                if order is None:
                    order = sorted(dec + prefilling) if prefilling else dec[:]
                    back = len(order) - 1
                    # evictions free KVs: every waiting candidate ranked after this decode
                    # counts again (the running ones left are still candidates)
                    start = bisect.bisect_right(window, dec[dp])
                    if start < len(window):
                        running_left = [e for e in cands[k:] if status[req[e]] == RUNNING]
                        cands = window[start:]
                        if running_left:
                            cands = sorted(cands + running_left)
                        k = 0
                        cand = cands[0]
                        continue
                while back >= 0 and (status[req[order[back]]] != RUNNING
                                     or req[order[back]] in members):
                    back -= 1
                if back < 0:
                    dp += 1  # no victim: the decode is dropped
                    continue
                victim = req[order[back]]
                back -= 1
                b.free += self._held_by(victim)
                self._evict(victim)  # leaves dec (at dp when the victim is the decode itself)
            if cand is None:
                break
            k += 1
            if b.prefill < 1 or b.tokens < 1:
                k = len(cands)  # no chunk fits any more: only decodes are left
                continue
            i = req[cand]
            if status[i] == RUNNING:
                if i not in members:
                    c = self._chunk(i, b)
                    if c:
                        b.add_chunk(i, c)
            elif self.n_running < self.J and i not in just_evicted:
                nd = need[cand]
                if nd <= b.free:
                    c = self._chunk(i, b)
                    if c:
                        self._take_waiting(i)
                        self._admit(i, c, nd, b)
                        if order is None and dp < len(dec):
                            # until an eviction, free KVs only shrink (one widens the
                            # candidates again); the candidates after every decode cost
                            # little without the filter
                            free = b.free
                            cands = cands[:k] + [e for e in cands[k:] if need[e] <= free]
        self._decodes_taken(b, dp)

    def _decodes_taken(self, b: _Batch, dp: int) -> None:
        """The decodes of a ranked batch are the first ``dp`` decoders in rank order (victims
        only ever leave below them)."""
        if b.n_dec == len(self.stream) + len(self.idle):
            b.all_decodes = bool(b.n_dec)
        else:
            b.dec = [self.by_rank[r] for r in self.dec_keys[:dp]]
            b.members.update(b.dec)

    def _rank_batch_one_by_one(self, b: _Batch) -> None:
        """``_rank_batch`` entry by entry (decodes with different KV needs)."""
        waiting = self.waiting[:RANK_WINDOW]
        entries = [(self.rank_of[i], True) for i in self._running()]
        entries += [(r, False) for r in waiting]
        for r, running in sorted(entries):
            i = self.by_rank[r]
            if running and (self.status[i] != RUNNING or i in b.members):
                continue  # evicted earlier in this batch
            if running:
                if self._decoding(i):
                    if self.cfg.hybrid or b.phase != "prefill":
                        self._add_decode(i, b)
                elif self.cfg.hybrid or b.phase != "decode":
                    c = self._chunk(i, b)
                    if c:
                        b.add_chunk(i, c)
            elif self.n_running < self.J and (self.cfg.hybrid or b.phase != "decode") \
                    and i not in self.just_evicted:
                c, need = self._chunk(i, b), self._reservation(i)
                if c and need <= b.free:
                    self._take_waiting(i)
                    self._admit(i, c, need, b)

    # ------------------------------------------------------------------ processing

    def _set_decoders(self, b: _Batch) -> int:
        """Make the stream exactly the batch's decoders; how many decode."""
        stream = self.stream
        if b.all_decodes:
            for i in self.idle:
                stream.join(i, self.slot[i])
            self.idle.clear()
            return len(stream)
        chosen = set(b.dec)
        if chosen != stream.members:
            for i in stream.members - chosen:
                stream.leave(i)
                self.idle.add(i)
            for i in chosen - stream.members:
                self.idle.discard(i)
                stream.join(i, self.slot[i])
        return len(chosen)

    def _process(self, b: _Batch) -> int:
        """One batch of prefill/refill chunks and decodes."""
        m, S, gen = self.m, self.S, self.gen
        stream = self.stream
        n_dec = self._set_decoders(b) if b.n_dec else 0
        decode_kv = stream.kv() if n_dec else 0
        chunks = b.chunks
        pre_tokens = units = 0
        for i, c in chunks:
            pre_tokens += c
            units += c * c + 2 * m[i] * c
        start = self.t
        end = start + self.profile.batch_ms(pre_tokens + n_dec, decode_kv, units, len(chunks))
        other_kv = 0
        for i in self.prefilling:
            other_kv += m[i]
        for i in self.idle:
            other_kv += m[i]
        finished = []  # by their prefill or refill, then by decoding
        for i, c in chunks:
            self.rec.segment(i, self.slot[i], "refill" if gen[i] >= 1 else "prefill", start,
                             end, c)
            m[i] += c
            if m[i] == S[i]:
                gen[i] += 1
                S[i] += 1
                if gen[i] == 1:
                    self.first_ms[i] = end
            if gen[i] >= 1 and m[i] == S[i] - 1:
                if gen[i] >= self._O[i]:
                    finished.append(i)
                else:
                    self._into_decode_phase(i)
        running = self.n_running
        if n_dec:
            finished += stream.step(start, end)
        else:
            stream.pause()
        kv = stream.kv() + other_kv + pre_tokens
        phase = "mixed" if chunks and n_dec else "prefill" if chunks else "decode"
        self.rec.iteration(start, end, phase, len(chunks) + n_dec, pre_tokens, n_dec, kv,
                           self.evicted_now, running)
        self.evicted_now = 0
        self.t = end
        for i in finished:
            self._finish(i)
        return len(finished)

    def _steady_rounds(self, b: _Batch, next_arrival: int | None) -> int:
        """How many iterations, from this one, are the same batch: every running request
        decodes and nothing else. Until a member outgrows its reservation or finishes, the
        KVs run short, or an arrival could be admitted, the schedulers form it again:
        the running requests in a prefill wait (without hybrid batching) or there are none,
        and no waiting request is admitted — no free slot, SARATHI without hybrid batching
        (decodes first), or a queue head whose reservation does not fit (FCFS: arrivals queue
        behind it, and free KVs only shrink). A ranked batch that admitted none of its
        waiting candidates admits none of them later either (free KVs only shrink); only an
        arrival could enter. Requests that have just entered the decode phase join the
        stream first, as the batch's processing would have them."""
        cfg, stream = self.cfg, self.stream
        if b.chunks or not b.all_decodes or self.evicted_now \
                or (cfg.hybrid and self.prefilling):
            return 1
        if self.idle:
            self._set_decoders(b)
        needs = stream.needs()
        free = self.M - self._held()
        blocked = self.n_running >= self.J or (cfg.groups == "sarathi" and not cfg.hybrid)
        if not blocked and self.waiting and cfg.groups != "rank":
            head = self.by_rank[self.waiting[0]]
            if self._reservation(head) <= free - (needs if cfg.groups == "sarathi" else 0):
                return 1
            blocked = True
        rounds = stream.horizon() - stream.G
        if needs and free != math.inf:
            rounds = min(rounds, free // needs)
        rounds = int(min(rounds, 1 << 20))
        if rounds > 1 and not blocked and next_arrival is not None:
            rounds = self._rounds_before(self._arr[next_arrival], rounds)
        return max(rounds, 1)

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
        per_batch, per_kv, n = self._decode_cost()
        kv, t = self.stream.kv(), self.t
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

    def _decode_cost(self) -> tuple[float, float, int]:
        """A decode-only batch of the whole stream costs ``per_batch + per_kv · KVs read``
        (``InferMaxProfile.batch_ms``, summed in the same order); and the stream's size."""
        prof, n = self.profile, len(self.stream)
        return prof.bias_ms + prof.per_token_ms * n, prof.decode_kv_ms, n

    def _decode_run(self, rounds: int) -> int:
        """``rounds`` iterations of the same decode-only batch (see ``_steady_rounds``)."""
        stream = self.stream
        n = len(stream)
        kv = stream.kv() + sum(self.m[i] for i in self.prefilling)
        starts, ends = self._decode_times(rounds)
        finished = stream.advance(starts, ends)
        self.rec.iterations(starts, ends, "decode", n, 0, n,
                            kv + n * np.arange(1, rounds + 1), evictions=0,
                            running=self.n_running)
        self.t = float(ends[-1])
        for i in finished:
            self._finish(i)
        return len(finished)

    def _finish(self, i: int) -> None:
        self._stop(i)
        self.finish_ms[i] = self.t
        self.status[i] = DONE
        if self.cfg.histogram_quantile is not None:
            bisect.insort(self.outputs_seen, self._O[i])

    def _schedule(self) -> Schedule:
        decodes = list(self.stream.segments())
        self.rec.segments(*decodes[:2], "decode", *decodes[2:])
        del decodes  # the recorder holds them now, and releases them as it builds the table
        requests = pd.DataFrame({
            "request": self.ids, "instance": self.index, "client": self.last_slot,
            "input_tokens": self.I, "output_tokens": self.O, "arrival_ms": self.arr,
            "first_token_ms": self.first_ms, "finish_ms": self.finish_ms,
            "evictions": self.evictions,
        })
        return Schedule(policy=self.cfg.name, segments=self.rec.segment_frame(self.ids),
                        iterations=self.rec.iteration_frame(), requests=requests,
                        clients=self.J)


class PlannedEngine(ContinuousEngine):
    """Replays a plan of batches (as the CSP gives): for each batch, the requests evicted
    before it, the prefill/refill chunks ``{request: tokens}`` and the decoding requests. Times
    come from the cost model; a batch starts once its requests have arrived. Infeasible plans
    (a chunk larger than what is left, KV above M, more than C tokens) raise an error."""

    def __init__(self, instance: Instance, batches: list[dict], name: str = "plan") -> None:
        config = SchedulerConfig(name, "vllm", hybrid=True, chunked=True, prefill_budget=None)
        super().__init__(instance, config)
        self.steady_runs = False
        index = {rid: k for k, rid in enumerate(self.ids)}
        self.plan: list[tuple[list[int], list[tuple[int, int]], list[int]]] = []
        for k, batch in enumerate(batches):
            try:
                evict = [index[r] for r in batch.get("evict", [])]
                chunks = [(index[r], int(c)) for r, c in batch.get("prefill", {}).items()]
                dec = [index[r] for r in batch.get("decode", [])]
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise InstanceError(f"batch {k} of the plan names an unknown request or a bad "
                                    f"chunk: {exc}", file=instance.label(), field="plan") from None
            self.plan.append((evict, chunks, dec))
        self._step = 0

    def _fail(self, why: str) -> None:
        raise InstanceError(f"plan batch {self._step}: {why}", file=self.instance.label(),
                            field="plan")

    def _form_batch(self) -> _Batch | None:
        if self._step >= len(self.plan):
            self._fail("the plan ends before every request has finished")
        evict, chunks, dec = self.plan[self._step]
        members = [i for i, _ in chunks] + dec
        start = max([self.t, *(self._arr[i] for i in members)])
        if start > self.t:
            self.t = start
            self._arrive()
        for i in evict:
            if self.status[i] != RUNNING:
                self._fail(f"evicts {self.ids[i]}, which is not running")
            self._evict(i)
        self.just_evicted.clear()
        b = _Batch(free=math.inf, tokens=self.C, prefill=self.C)
        for i, c in chunks:
            if self.status[i] == WAITING:
                self._take_waiting(i)
                if self.n_running >= self.J:
                    self._fail(f"more than {self.J} requests running")
                self._admit(i, c, 0, b)
            elif i in self.prefilling:
                b.add_chunk(i, c)
            else:
                self._fail(f"prefill chunk for {self.ids[i]}, which is not waiting or prefilling")
            if not 0 < c <= self.S[i] - self.m[i]:
                self._fail(f"chunk of {c} tokens for {self.ids[i]} with "
                           f"{self.S[i] - self.m[i]} left to process")
        for i in dec:
            if self.status[i] != RUNNING or not self._decoding(i):
                self._fail(f"{self.ids[i]} is not in the decode phase")
        if dec:
            b.add_decodes(dec)
        if b.tokens < 0:
            self._fail(f"more than C = {self.C} tokens")
        held = self.stream.kv() + sum(self.m[i] for i in (*self.idle, *self.prefilling))
        kv_after = held + sum(c for _, c in chunks) + len(dec)
        if kv_after > self.M:
            self._fail(f"{kv_after} KV tokens > M = {int(self.M)}")
        self._step += 1
        if not b.chunks and not b.n_dec:
            return self._form_batch() if self._step < len(self.plan) else None
        return b
