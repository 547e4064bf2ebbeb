"""GETNEXTBATCH of the InferMax unified scheduler (Kim et al. 2025, Algorithm 1), one iteration
policy for every configuration of ``configs.SCHEDULERS``.

Groups and priorities decide the order in which requests enter the batch: ``vllm`` admits
waiting requests first (head-of-line: the first that does not fit blocks the rest), then adds
the running ones; ``sarathi`` adds the running decodes and chunked prefills first, then admits;
``rank`` takes one group of running and waiting requests in the order of a rank key. A decode
needs one new KV unless reserved; when KVs are short the lowest-priority running request outside
the batch is evicted (the candidate itself when none is lower). Prefill and refill candidates
take min(remaining, P left, C left) tokens with chunked prefill, else their whole remaining
prompt must fit; without hybrid batching a candidate in the other phase is skipped.

A batch takes at most C tokens, or the configuration's ``token_budget`` when smaller (vLLM's
``max_num_batched_tokens`` with chunked prefill, decodes included: ``vllm-s``). The waiting
queue of the ``vllm`` and ``sarathi`` groups is the replica's, sorted by the priority keys
(arrival, or the true output length for ``sjf``), whose head is admitted first; for
``sjf-predicted`` the head is the waiting request of smallest predicted output (ties by
arrival), found in one arrival-ordered heap per power-of-two input bucket (the prediction is
the bucket's median output so far, so one bucket's requests share it), or, before any request
has finished, in one heap ordered by input length. The whole queue is searched, not a window.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError
from llmopt.policies.base import RUNNING, WAITING, Batch, IterationPolicy, ReplicaView, Steady
from llmopt.policies.infermax.configs import Groups, RankKey, SchedulerConfig, WaitingOrder

RANK_WINDOW = 64  # ranked schedulers look at this many waiting requests per batch
UNTIL_ARRIVAL = Steady(math.inf, until_arrival=True)
BLOCKED = Steady(math.inf, until_arrival=False)


def check_continuous(instance: Instance, replica: ReplicaView, *,
                     unlimited_memory: bool = False) -> None:
    """What every continuous-batching policy needs: a profile timing the infermax family's
    iterations (an infermax or roofline profile), C, M (unless the memory is unlimited), and
    room in M for every request's I + O − 1 KVs."""
    label = instance.label()
    if instance.profile.policy_family != "infermax":
        raise InstanceError("continuous-batching replay needs an infermax or roofline profile",
                            file=label, field="model", value=instance.profile.name)
    if math.inf == replica.C:
        raise InstanceError("continuous batching needs C, the tokens per batch",
                            file=label, field="system.max_batch_tokens")
    if replica.kv_limit is None and not unlimited_memory:
        raise InstanceError("continuous batching needs M, the KV capacity", file=label,
                            field="system.kv_capacity")
    refuse_oversized(instance, replica, instance.input_tokens + instance.output_tokens - 1)


def refuse_oversized(instance: Instance, replica: ReplicaView, need: np.ndarray,
                     what: str = "") -> None:
    """Refuse the instance when a request needs more KVs (``need``, per request) than the
    replica's cache holds."""
    too_big = np.flatnonzero(need > replica.M)
    if len(too_big):
        i = int(too_big[0])
        raise InstanceError(f"request {instance.ids[i]} needs {int(need[i])} KV tokens{what}, "
                            "more than the cache", file=instance.label(),
                            field="system.kv_capacity", value=replica.M)


class UnifiedScheduler(IterationPolicy):
    def __init__(self, config: SchedulerConfig) -> None:
        self.cfg = config
        self.name = config.name
        self.unlimited_memory = config.unlimited_memory
        self.tracks_decode_ranks = config.groups is Groups.RANK
        self.outputs_seen: list[int] = []  # sorted: the online output-length histogram
        self.P: float = 0
        self.C: float = 0  # the batch token budget: C, or the configuration's when smaller
        self.predicted = config.waiting_order is WaitingOrder.PREDICTED_OUTPUT
        # sjf-predicted: waiting ranks by input length (before any finish) and per input bucket
        self._by_input: list[tuple[int, int]] = []
        self._buckets: dict[int, list[int]] = {}
        self._bucket_outputs: dict[int, list[int]] = {}  # sorted outputs finished, per bucket
        self._outputs: list[int] = []  # every output finished, sorted

    # ------------------------------------------------------------------ setup

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        check_continuous(instance, replica, unlimited_memory=self.cfg.unlimited_memory)
        label = instance.label()
        system_p = replica.P_system if replica.P_system != math.inf else None
        P = self.cfg.prefill_budget or system_p or replica.C
        self.C = min(self.cfg.token_budget or replica.C, replica.C)
        self.P = min(P, self.C)
        need = instance.input_tokens + instance.output_tokens - 1
        if not self.cfg.chunked:
            too_long = np.flatnonzero(need > min(self.P, replica.C))
            if len(too_long):
                i = int(too_long[0])
                raise InstanceError(
                    f"request {instance.ids[i]} may need to (re)fill {int(need[i])} tokens at "
                    f"once, more than a batch allows without chunked prefill (policy "
                    f"{self.cfg.name})", file=label, field="system.max_batch_tokens",
                    value=min(self.P, replica.C))

    def priority_keys(self, instance: Instance) -> np.ndarray:
        if self.cfg.groups is Groups.RANK and self.cfg.rank_key is RankKey.INPUT:
            return instance.input_tokens.astype(float)
        if self.cfg.groups is Groups.RANK and self.cfg.rank_key is RankKey.OUTPUT:
            return instance.output_tokens.astype(float)
        if self.cfg.waiting_order is WaitingOrder.OUTPUT:
            return instance.output_tokens.astype(float)
        return instance.arrival_ms

    def reservation(self, r: ReplicaView, i: int) -> int:
        """KVs a waiting request reserves when it starts (m_reserve of CANALLOCATE)."""
        if self.cfg.eviction_free:
            return r.I[i] + r.O[i] - 1
        if self.cfg.histogram_quantile is not None and r.gen[i] == 0 and self.outputs_seen:
            seen = self.outputs_seen
            est = seen[int(self.cfg.histogram_quantile * (len(seen) - 1))]
            return int(max(r.S[i], min(r.I[i] + max(est, 1) - 1, r.M)))
        return r.S[i]

    def finished(self, r: ReplicaView, i: int) -> None:
        if self.cfg.histogram_quantile is not None:
            bisect.insort(self.outputs_seen, r.O[i])
        if self.predicted:
            bisect.insort(self._bucket_outputs.setdefault(r.I[i].bit_length(), []), r.O[i])
            bisect.insort(self._outputs, r.O[i])

    def arrived(self, r: ReplicaView, i: int) -> None:
        if self.predicted:
            self._queue_predicted(r, i)

    # ------------------------------------------------------------------ waiting head

    def _head(self, r: ReplicaView) -> int:
        """The waiting request admitted next (the replica's waiting queue is not empty)."""
        if self.predicted:
            return self._predicted_head(r)
        return r.by_rank[r.waiting[0]]

    def _queue_predicted(self, r: ReplicaView, i: int) -> None:
        rank = r.rank_of[i]
        if not self._outputs:
            heapq.heappush(self._by_input, (r.I[i], rank))
        heapq.heappush(self._buckets.setdefault(r.I[i].bit_length(), []), rank)

    def predicted_output(self, bucket: int) -> float:
        """sjf-predicted's output length of a request in input bucket ``bucket`` once a
        request has finished: the median output of the bucket's finished requests, else of
        all finished ones."""
        seen = self._bucket_outputs.get(bucket) or self._outputs  # sorted
        n = len(seen)
        return seen[n // 2] if n % 2 else (seen[n // 2 - 1] + seen[n // 2]) / 2

    def _predicted_head(self, r: ReplicaView) -> int:
        """The waiting request of smallest predicted output, ties by arrival (stale heap
        entries, of requests no longer waiting, are dropped on the way)."""
        status, req = r.status, r.by_rank
        if not self._outputs:  # nothing finished: the prediction is the input length
            h = self._by_input
            while status[req[h[0][1]]] != WAITING:
                heapq.heappop(h)
            return req[h[0][1]]
        best: tuple[float, int] | None = None
        for bucket, heap in self._buckets.items():
            while heap and status[req[heap[0]]] != WAITING:
                heapq.heappop(heap)
            if heap:
                key = (self.predicted_output(bucket), heap[0])
                if best is None or key < best:
                    best = key
        assert best is not None, "a waiting request outside the predictor's heaps"
        return req[best[1]]

    # ------------------------------------------------------------------ GETNEXTBATCH

    def next_batch(self, r: ReplicaView) -> Batch | None:
        b = r.new_batch(self.C, self.P)
        groups = self.cfg.groups
        if groups is Groups.VLLM:
            self._admit_waiting(r, b)
            self._add_running(r, b)
        elif groups is Groups.SARATHI:
            self._add_running(r, b)
            self._admit_waiting(r, b)
        else:
            self._rank_batch(r, b)
        if self.predicted:
            for i in r.just_evicted:  # back in the waiting queue
                self._queue_predicted(r, i)
        return b if b.chunks or b.n_dec else None

    def steady(self, r: ReplicaView, b: Batch) -> Steady | None:
        """The same decode-only batch comes back until an arrival, unless the running
        requests in a prefill would join it (hybrid batching) or a waiting request could be
        admitted: no free slot, SARATHI without hybrid batching (decodes first), or a queue
        head whose reservation does not fit (FCFS: arrivals queue behind it, and free KVs only
        shrink) block admissions. A ranked batch that admitted none of its waiting candidates
        admits none of them later either (free KVs only shrink); only an arrival could
        enter. When the waiting order is not FCFS (``sjf``, ``sjf-predicted``) an arrival may
        take the head's place, so a head that does not fit blocks only until the next arrival
        (the predictions move only when a request finishes, which ends the run)."""
        cfg = self.cfg
        if cfg.hybrid and r.prefilling:
            return None
        if r.n_running >= r.J or (cfg.groups is Groups.SARATHI and not cfg.hybrid):
            return BLOCKED
        if r.waiting and cfg.groups is not Groups.RANK:
            head = self._head(r)
            needs = r.all_decode_needs()
            free = r.free_kv()
            if self.reservation(r, head) <= free - (needs if cfg.groups is Groups.SARATHI else 0):
                return None
            return BLOCKED if cfg.waiting_order is WaitingOrder.ARRIVAL else UNTIL_ARRIVAL
        return UNTIL_ARRIVAL

    def _chunk(self, r: ReplicaView, i: int, b: Batch) -> int:
        """The chunk request i processes given the batch's prefill and token budgets left (0:
        none)."""
        prefill, tokens = b.prefill, b.tokens
        remaining = r.S[i] - r.m[i]
        c = min(remaining, prefill, tokens) if self.cfg.chunked else remaining
        # an int: the budgets are typed float only to hold math.inf, and a finite budget is an
        # int (no cast: this runs for every candidate of every batch)
        return c if 0 < c <= prefill and c <= tokens else 0  # type: ignore[return-value]

    def _admit_waiting(self, r: ReplicaView, b: Batch) -> None:
        """Waiting requests in priority order while they fit; the first that does not blocks
        the rest (head-of-line, as vLLM)."""
        while r.waiting and r.n_running < r.J:
            if not self.cfg.hybrid and b.phase == "decode":
                break
            i = self._head(r)
            c = self._chunk(r, i, b) if i not in r.just_evicted else 0
            need = self.reservation(r, i)
            if c == 0 or need > b.free:
                break
            r.take_waiting(i)
            r.admit(i, c, need, b)

    def _running_order(self, r: ReplicaView) -> list[int]:
        """Running requests from highest to lowest priority (for ``vllm`` groups whose waiting
        order is not FCFS, vLLM's running order still is: by arrival)."""
        if self.cfg.groups is Groups.VLLM and self.cfg.waiting_order is not WaitingOrder.ARRIVAL:
            return sorted(r.running(), key=lambda i: (r.arr[i], i))
        if self.cfg.groups is Groups.SARATHI:
            dec = r.decoders()
            if self.cfg.long_first:
                dec.sort(key=lambda i: (-r.m_of(i), r.arr[i], i))
            else:
                dec.sort(key=r.rank_of.__getitem__)
            return dec + sorted(r.prefilling, key=r.rank_of.__getitem__)
        return sorted(r.running(), key=r.rank_of.__getitem__)

    def _add_running(self, r: ReplicaView, b: Batch) -> None:
        """Running decodes (all at once when KV and tokens suffice, else one by one in priority
        order with evictions), then running requests in the middle of a chunked prefill."""
        pres = [i for i in r.prefilling if i not in b.members]
        n_dec = r.n_decoders()
        if n_dec and (self.cfg.hybrid or b.phase != "prefill"):
            needs = r.all_decode_needs()
            if needs <= b.free and n_dec <= b.tokens:
                b.free -= needs
                b.add_all_decodes(n_dec)
            else:
                self._decodes_with_evictions(r, b)
        if pres and (self.cfg.hybrid or b.phase != "decode"):
            for i in sorted(pres, key=r.rank_of.__getitem__):
                if i not in r.prefilling:
                    continue  # evicted by the decodes
                c = self._chunk(r, i, b)
                if c:
                    b.add_chunk(i, c)

    def _decodes_with_evictions(self, r: ReplicaView, b: Batch) -> None:
        """Decodes in priority order, each needing a new KV unless reserved: while KV is short,
        the lowest-priority running request outside the batch is evicted (possibly a decode
        candidate itself). Taking candidates one by one and evicting from the bottom as each
        runs short evicts the same requests as evicting from the bottom until all survivors
        fit, which is what is done here."""
        ranked = self._running_order(r)
        need = r.decode_needs_each()
        keep = [i for i in ranked if i in need][: max(int(b.tokens), 0)]
        total = sum(need[i] for i in keep)
        for victim in reversed(ranked):
            if total <= b.free:
                break
            if victim in b.members:
                continue
            b.free += r.held_by(victim)
            r.evict(victim)
            if victim in need and victim in keep:
                keep.remove(victim)
                total -= need[victim]
        if total > b.free:
            return
        b.free -= total
        if keep:
            b.add_decodes(keep)

    def _add_decode(self, r: ReplicaView, i: int, b: Batch) -> None:
        """One decode candidate; evicts lower-priority running requests when KV is short (the
        candidate itself when none is lower)."""
        if r.status[i] != RUNNING or b.tokens < 1:
            return
        need = r.decode_needs(i)
        while need > b.free:
            victim = next((v for v in reversed(self._running_order(r)) if v not in b.members),
                          None)
            if victim is None:
                return
            freed = r.held_by(victim)
            r.evict(victim)
            b.free += freed
            if victim == i:
                return
        b.free -= need
        b.add_decodes([i])

    def _rank_batch(self, r: ReplicaView, b: Batch) -> None:
        """One group of running and waiting requests ordered by the rank key: each decode takes
        a token and (unless reserved) a KV, evicting the lowest-priority running requests
        outside the batch when KVs are short (itself when none is lower); each running prefill
        takes a chunk; each of the first RANK_WINDOW waiting requests is admitted if a slot,
        a chunk and its reservation fit."""
        n_dec = r.n_decoders()
        needs = r.all_decode_needs()
        if not self.cfg.hybrid or needs not in (0, n_dec * r.kv_unit):
            self._rank_batch_one_by_one(r, b)
            return
        self._rank_batch_in_runs(r, b, unit=r.kv_unit if needs else 0)

    def _rank_batch_in_runs(self, r: ReplicaView, b: Batch, unit: int) -> None:
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
        status, members, dec = r.status, b.members, r.dec_keys  # dec: live, sorted
        assert dec is not None
        req = r.by_rank
        bisect_left = bisect.bisect_left
        just_evicted = r.just_evicted
        prefilling = sorted(map(r.rank_of.__getitem__, r.prefilling)) \
            if r.prefilling else []
        window = r.waiting[:RANK_WINDOW]
        free0 = b.free
        need = r.need_by_rank  # NO_NEED: running
        unlimited = self.cfg.unlimited_memory
        after_all = free0 - unit * len(dec)  # free KVs at most, after every decode
        last = dec[-1] if dec else None
        fits = []
        if r.n_running < r.J and window:
            if self.cfg.histogram_quantile is None:
                needs = r.waiting_need[:RANK_WINDOW]
            else:  # the estimate moves as requests finish
                needs = [self.reservation(r, req[e]) for e in window]
                for e, nd in zip(window, needs, strict=True):
                    need[e] = nd
            if min(needs) <= free0:  # often none fits: one pass in C says so
                fits = [e for e, s in zip(window, needs, strict=True)
                        if s <= after_all
                        or (s <= free0 and last is not None and e < last
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
                reach = len(dec) if not unit or unlimited else dp + max(int(free // unit), 0)
                bound = dec[reach] if reach < len(dec) else len(req)  # after every rank
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
                    self._decodes_taken(r, b, dp)
                    return  # nothing else can enter the batch
                take = hi - dp if hi - dp <= b.tokens else int(b.tokens)
                if unit and take * unit > b.free:
                    take = int(b.free // unit)
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
                b.free += r.held_by(victim)
                r.evict(victim)  # leaves dec (at dp when the victim is the decode itself)
            if cand is None:
                break
            k += 1
            if b.prefill < 1 or b.tokens < 1:
                k = len(cands)  # no chunk fits any more: only decodes are left
                continue
            i = req[cand]
            if status[i] == RUNNING:
                if i not in members:
                    c = self._chunk(r, i, b)
                    if c:
                        b.add_chunk(i, c)
            elif r.n_running < r.J and i not in just_evicted:
                nd = need[cand]
                if nd <= b.free:
                    c = self._chunk(r, i, b)
                    if c:
                        r.take_waiting(i)
                        r.admit(i, c, nd, b)
                        if order is None and dp < len(dec):
                            # until an eviction, free KVs only shrink (one widens the
                            # candidates again); the candidates after every decode cost
                            # little without the filter
                            free = b.free
                            cands = cands[:k] + [e for e in cands[k:] if need[e] <= free]
        self._decodes_taken(r, b, dp)

    def _decodes_taken(self, r: ReplicaView, b: Batch, dp: int) -> None:
        """The decodes of a ranked batch are the first ``dp`` decoders in rank order (victims
        only ever leave below them)."""
        if b.n_dec == r.n_decoders():
            b.all_decodes = bool(b.n_dec)
        else:
            assert r.dec_keys is not None
            b.dec = [r.by_rank[k] for k in r.dec_keys[:dp]]
            b.members.update(b.dec)

    def _rank_batch_one_by_one(self, r: ReplicaView, b: Batch) -> None:
        """``_rank_batch`` entry by entry (decodes with different KV needs)."""
        waiting = r.waiting[:RANK_WINDOW]
        entries = [(r.rank_of[i], True) for i in r.running()]
        entries += [(k, False) for k in waiting]
        for k, running in sorted(entries):
            i = r.by_rank[k]
            if running and (r.status[i] != RUNNING or i in b.members):
                continue  # evicted earlier in this batch
            if running:
                if r.decoding(i):
                    if self.cfg.hybrid or b.phase != "prefill":
                        self._add_decode(r, i, b)
                elif self.cfg.hybrid or b.phase != "decode":
                    c = self._chunk(r, i, b)
                    if c:
                        b.add_chunk(i, c)
            elif r.n_running < r.J and (self.cfg.hybrid or b.phase != "decode") \
                    and i not in r.just_evicted:
                c, nd = self._chunk(r, i, b), self.reservation(r, i)
                if c and nd <= b.free:
                    r.take_waiting(i)
                    r.admit(i, c, nd, b)



class UnifiedOnFamily(UnifiedScheduler):
    """A configuration of the unified scheduler on another paper's profile family, one that
    times iterations per request (SCLS's eqs 3–4, Huang et al.'s eqs 14–15): the first output
    token comes from the first decode, as those papers count decodes, so a request holds up to
    I + O KVs and one that needs more than the cache is refused; the paper sets the batch
    budgets (:meth:`budgets`)."""

    first_token_from_prefill = False

    def __init__(self, config: SchedulerConfig, family: str, runs_on: str) -> None:
        super().__init__(config)
        self.family = family
        self.runs_on = runs_on  # the family and the paper's equations, for the error

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        if instance.profile.family != self.family:
            raise InstanceError(f"{self.name} replays on {self.runs_on}", file=instance.label(),
                                field="model", value=instance.profile.name)
        refuse_oversized(instance, replica, instance.input_tokens + instance.output_tokens,
                         " (input + output)")
        self.C, self.P = self.budgets(replica)

    def budgets(self, replica: ReplicaView) -> tuple[float, float]:
        """The batch's token budget and prefill budget."""
        raise NotImplementedError
