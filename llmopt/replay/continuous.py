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
one of J slots (the schedule's ``client``) until it finishes or is evicted. Runs of identical
decode-only batches (all running requests decode, nothing can be admitted, no eviction) are
advanced in one step up to the next completion, arrival that could be admitted, or KV shortage.
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
from llmopt.replay.policies.infermax import SchedulerConfig
from llmopt.replay.recorder import Recorder
from llmopt.schedule import Schedule

PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3


class _Batch:
    """A batch being formed: members, chunk sizes, KV and token budgets, phase so far."""

    def __init__(self, free: float, tokens: int, prefill: int) -> None:
        self.free, self.tokens, self.prefill = free, tokens, prefill
        self.pre: list[int] = []
        self.chunks: list[int] = []
        self.dec: list[np.ndarray] = []
        self.n_dec = 0
        self.phase: str | None = None

    def members(self) -> set[int]:
        out = set(self.pre)
        for part in self.dec:
            out.update(part.tolist())
        return out

    def decodes(self) -> np.ndarray:
        return np.concatenate(self.dec) if self.dec else np.zeros(0, dtype=np.int64)

    def add_chunk(self, i: int, c: int) -> None:
        self.pre.append(i)
        self.chunks.append(c)
        self.tokens -= c
        self.prefill -= c
        self.phase = self.phase or "prefill"

    def add_decodes(self, idx: np.ndarray) -> None:
        self.dec.append(idx)
        self.n_dec += len(idx)
        self.tokens -= len(idx)
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
        self.M = math.inf if config.unlimited_memory else float(M)
        self._check_fits()

        n = self.n
        self.S = self.I.copy()
        self.m = np.zeros(n, dtype=np.int64)
        self.gen = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, PENDING, dtype=np.int8)
        self.reserve_to = np.zeros(n, dtype=np.int64)
        self.evictions = np.zeros(n, dtype=np.int64)
        self.slot = np.full(n, -1, dtype=np.int64)
        self.last_slot = np.full(n, -1, dtype=np.int64)
        self.first_ms = np.full(n, np.nan)
        self.finish_ms = np.full(n, np.nan)
        self.seg_start = np.full(n, np.nan)
        self.seg_tokens = np.zeros(n, dtype=np.int64)
        self.seg_last = np.full(n, -2, dtype=np.int64)
        self.seg_end_t = np.full(n, np.nan)
        self.evicted_now = 0
        self.just_evicted: set[int] = set()
        self.key = self._priority_keys()
        self.free_slots = list(range(self.J))
        heapq.heapify(self.free_slots)
        self.waiting: list[tuple] = []
        self.running: list[int] = []
        self.outputs_seen: list[int] = []  # sorted: the online output-length histogram
        self.t = 0.0
        self.iteration = 0
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
        heapq.heappush(self.waiting, (float(self.key[i]), float(self.arr[i]), i))

    # ------------------------------------------------------------------ memory

    def _held(self, idx) -> int:
        idx = np.asarray(idx, dtype=np.int64)
        return int(np.maximum(self.m[idx], self.reserve_to[idx]).sum()) if len(idx) else 0

    def _reservation(self, i: int) -> int:
        """KVs a waiting request reserves when it starts (m_reserve of CANALLOCATE)."""
        if self.cfg.eviction_free:
            return int(self.I[i] + self.O[i] - 1)
        if self.cfg.histogram_quantile is not None and self.gen[i] == 0 and self.outputs_seen:
            seen = self.outputs_seen
            est = seen[int(self.cfg.histogram_quantile * (len(seen) - 1))]
            return int(max(self.S[i], min(self.I[i] + max(est, 1) - 1, self.M)))
        return int(self.S[i])

    def _decode_phase(self, i: int) -> bool:
        return bool(self.gen[i] >= 1 and self.m[i] == self.S[i] - 1)

    # ------------------------------------------------------------------ run

    def _arrive(self) -> int | None:
        """Queue every request that has arrived by now; the next one to arrive, if any."""
        while self._nxt < self.n and self.arr[self._order[self._nxt]] <= self.t + 1e-9:
            i = int(self._order[self._nxt])
            self.status[i] = WAITING
            self._push_waiting(i)
            self._nxt += 1
        return int(self._order[self._nxt]) if self._nxt < self.n else None

    def run(self) -> Schedule:
        self._order = np.argsort(self.arr, kind="stable")
        self._nxt = 0
        done = 0
        while done < self.n:
            next_arrival = self._arrive()
            if not self.running and not self.waiting:
                self.t = max(self.t, float(self.arr[next_arrival]))
                continue
            batch = self._form_batch()
            if batch is None:
                if next_arrival is not None and not self.running:
                    self.t = max(self.t, float(self.arr[next_arrival]))
                    continue
                stuck = [self.ids[i] for i in np.flatnonzero(self.status != DONE)[:3]]
                raise InstanceError(f"scheduler {self.cfg.name} cannot make progress, e.g. "
                                    f"{stuck}", file=self.instance.label(), field="requests")
            pre, chunks, dec, steady = batch
            if steady and not pre:
                k = self._steady_rounds(dec, next_arrival)
                done += self._decode_run(dec, k)
            else:
                done += self._process(pre, chunks, dec)
        return self._schedule()

    # ------------------------------------------------------------------ batch formation

    def _evict(self, victim: int) -> None:
        self.rec.segments(np.array([victim]), np.array([self.slot[victim]]), "evict", self.t,
                          self.t, np.array([self.m[victim]]))
        self._close_decode(np.array([victim]))
        self.evicted_now += 1
        self.just_evicted.add(victim)
        self.running.remove(victim)
        heapq.heappush(self.free_slots, int(self.slot[victim]))
        self.slot[victim] = -1
        self.m[victim] = 0
        self.reserve_to[victim] = 0
        self.evictions[victim] += 1
        self.status[victim] = WAITING
        self._push_waiting(victim)

    def _running_order(self) -> list[int]:
        """Running requests from highest to lowest priority."""
        if self.cfg.groups == "sarathi":
            dec = [i for i in self.running if self._decode_phase(i)]
            pre = [i for i in self.running if not self._decode_phase(i)]
            if self.cfg.long_first:
                dec.sort(key=lambda i: (-int(self.m[i]), self.arr[i], i))
            else:
                dec.sort(key=lambda i: (self.key[i], self.arr[i], i))
            pre.sort(key=lambda i: (self.key[i], self.arr[i], i))
            return dec + pre
        return sorted(self.running, key=lambda i: (self.key[i], self.arr[i], i))

    def _form_batch(self):
        """One GETNEXTBATCH: (prefill requests, their chunk sizes, decode requests, steady)."""
        b = _Batch(free=self.M - self._held(self.running), tokens=self.C, prefill=self.P)
        if self.cfg.groups == "vllm":
            self._admit_waiting(b, probe_all=False)
            self._add_running(b)
        elif self.cfg.groups == "sarathi":
            self._add_running(b)
            self._admit_waiting(b, probe_all=False)
        else:
            self._rank_batch(b)
        self.just_evicted.clear()
        if not b.pre and not b.n_dec:
            return None
        steady = (not b.pre and b.n_dec == len(self.running)
                  and not self._admissible_soon(b.free))
        return b.pre, b.chunks, b.decodes(), steady

    def _chunk(self, i: int, b: _Batch) -> int:
        remaining = int(self.S[i] - self.m[i])
        c = min(remaining, b.prefill, b.tokens) if self.cfg.chunked else remaining
        return c if 0 < c <= b.prefill and c <= b.tokens else 0

    def _admit(self, i: int, c: int, need: int, b: _Batch) -> None:
        self.status[i] = RUNNING
        self.slot[i] = heapq.heappop(self.free_slots)
        self.last_slot[i] = self.slot[i]
        self.reserve_to[i] = need
        self.running.append(i)
        b.free -= need
        b.add_chunk(i, c)

    def _admit_waiting(self, b: _Batch, probe_all: bool) -> None:
        """Waiting requests in priority order while they fit; FCFS groups stop at the first
        that does not (head-of-line), ranked ones probe further."""
        skipped: list[tuple] = []
        while self.waiting and len(self.running) < self.J:
            if not self.cfg.hybrid and b.phase == "decode":
                break
            i = self.waiting[0][2]
            c = self._chunk(i, b) if i not in self.just_evicted else 0
            need = self._reservation(i)
            if c == 0 or need > b.free:
                if not probe_all:
                    break
                skipped.append(heapq.heappop(self.waiting))
                if len(skipped) >= 64:
                    break
                continue
            heapq.heappop(self.waiting)
            self._admit(i, c, need, b)
        for entry in skipped:
            heapq.heappush(self.waiting, entry)

    def _add_running(self, b: _Batch) -> None:
        """Running decodes (all at once when KV and tokens suffice, else one by one in priority
        order with evictions), then running requests in the middle of a chunked prefill."""
        run = np.asarray(self.running, dtype=np.int64)
        if b.pre:
            run = run[~np.isin(run, b.pre)]
        decoding = (self.gen[run] >= 1) & (self.m[run] == self.S[run] - 1)
        decs, pres = run[decoding], run[~decoding]
        if len(decs) and (self.cfg.hybrid or b.phase != "prefill"):
            needy = self.m[decs] + 1 > self.reserve_to[decs]
            needs = int(needy.sum())
            if needs <= b.free and len(decs) <= b.tokens:
                b.free -= needs
                b.add_decodes(decs)
            else:
                self._decodes_with_evictions(decs, needy, b)
        if len(pres) and (self.cfg.hybrid or b.phase != "decode"):
            alive = set(self.running)  # the decodes may have evicted some
            for i in sorted(pres.tolist(), key=lambda i: (self.key[i], self.arr[i], i)):
                if i not in alive:
                    continue
                c = self._chunk(i, b)
                if c:
                    b.add_chunk(i, c)

    def _decodes_with_evictions(self, decs: np.ndarray, needy: np.ndarray, b: _Batch) -> None:
        """Decodes in priority order, each needing a new KV unless reserved: while KV is short,
        the lowest-priority running request outside the batch is evicted (possibly a decode
        candidate itself). Taking candidates one by one and evicting from the bottom as each
        runs short evicts the same requests as evicting from the bottom until all survivors
        fit, which is what is done here."""
        ranked = self._running_order()
        need = dict(zip(decs.tolist(), needy.tolist(), strict=True))
        keep = [i for i in ranked if i in need][: max(b.tokens, 0)]
        total = sum(need[i] for i in keep)
        members = b.members()
        for victim in reversed(ranked):
            if total <= b.free:
                break
            if victim in members:
                continue
            b.free += max(int(self.m[victim]), int(self.reserve_to[victim]))
            self._evict(victim)
            if victim in need and victim in keep:
                keep.remove(victim)
                total -= need[victim]
        if total > b.free:
            return
        b.free -= total
        if keep:
            b.add_decodes(np.asarray(keep, dtype=np.int64))

    def _add_decode(self, i: int, b: _Batch) -> None:
        """One decode candidate; evicts lower-priority running requests when KV is short (the
        candidate itself when none is lower)."""
        if i not in self.running or b.tokens < 1:
            return
        need = 1 if self.m[i] + 1 > self.reserve_to[i] else 0
        while need > b.free:
            members = b.members()
            victim = next((v for v in reversed(self._running_order()) if v not in members),
                          None)
            if victim is None:
                return
            freed = max(int(self.m[victim]), int(self.reserve_to[victim]))
            self._evict(victim)
            b.free += freed
            if victim == i:
                return
        b.free -= need
        b.add_decodes(np.array([i], dtype=np.int64))

    def _rank_batch(self, b: _Batch) -> None:
        """One group of running and waiting requests ordered by the rank key."""
        waiting = heapq.nsmallest(64, self.waiting)
        entries = [(float(self.key[i]), float(self.arr[i]), i, True) for i in self.running]
        entries += [(k, a, i, False) for k, a, i in waiting]
        for _, _, i, running in sorted(entries):
            if running and (i not in self.running or i in b.members()):
                continue  # evicted earlier in this batch
            if running:
                if self._decode_phase(i):
                    if self.cfg.hybrid or b.phase != "prefill":
                        self._add_decode(i, b)
                elif self.cfg.hybrid or b.phase != "decode":
                    c = self._chunk(i, b)
                    if c:
                        b.add_chunk(i, c)
            elif len(self.running) < self.J and (self.cfg.hybrid or b.phase != "decode") \
                    and i not in self.just_evicted:
                c, need = self._chunk(i, b), self._reservation(i)
                if c and need <= b.free:
                    self.waiting.remove((self.key[i], self.arr[i], i))
                    heapq.heapify(self.waiting)
                    self._admit(i, c, need, b)

    def _admissible_soon(self, free: float) -> bool:
        """Could a waiting request start if nothing else changed?"""
        if not self.waiting or len(self.running) >= self.J:
            return False
        if self.cfg.groups == "rank":
            return any(self._reservation(e[2]) <= free for e in self.waiting[:64])
        return self._reservation(self.waiting[0][2]) <= free

    def _steady_rounds(self, dec: np.ndarray, next_arrival: int | None) -> int:
        """How many identical decode-only iterations can run before something changes: a
        completion, a KV shortage, or an arrival that could be admitted."""
        idx = dec
        k = int((self.O[idx] - self.gen[idx]).min())
        needing = int((self.m[idx] + 1 > self.reserve_to[idx]).sum())
        free = self.M - self._held(idx)
        if needing and free != math.inf:
            k = min(k, max(1, int(free // needing)))
        if next_arrival is not None and len(self.running) < self.J:
            need = self._reservation(next_arrival)
            if need <= free:
                n = len(idx)
                kv = int(self.m[idx].sum())
                base = self.profile.batch_ms(n, kv, 0, 0)
                gap = self.arr[next_arrival] - self.t
                k = min(k, max(1, math.ceil(gap / max(base, 1e-9))))
        return max(k, 1)

    # ------------------------------------------------------------------ processing

    def _close_decode(self, idx: np.ndarray) -> None:
        """Close open decode segments at the end of their last decode iteration."""
        idx = idx[~np.isnan(self.seg_start[idx])]
        if len(idx):
            self.rec.segments(idx, self.last_slot[idx], "decode", self.seg_start[idx],
                              self.seg_end_t[idx], self.seg_tokens[idx])
            self.seg_start[idx] = np.nan
            self.seg_tokens[idx] = 0

    def _open_decode(self, idx: np.ndarray) -> None:
        """Requests decoding in the coming iteration: a segment interrupted by an iteration
        without them ends; those without an open segment start one now."""
        open_ = ~np.isnan(self.seg_start[idx])
        stale = idx[open_ & (self.seg_last[idx] != self.iteration - 1)]
        self._close_decode(stale)
        fresh = idx[np.isnan(self.seg_start[idx])]
        self.seg_start[fresh] = self.t

    def _decode_run(self, dec: np.ndarray, k: int) -> int:
        """k identical decode-only iterations of every running request."""
        idx = dec
        n = len(idx)
        kv0 = int(self.m[idx].sum())
        steps = np.arange(k)
        prof = self.profile
        durations = (prof.bias_ms + prof.per_token_ms * n
                     + prof.decode_kv_ms * (kv0 + n * steps))
        starts = self.t + np.concatenate([[0.0], np.cumsum(durations)[:-1]])
        ends = starts + durations
        self._open_decode(idx)
        self.m[idx] += k
        self.S[idx] += k
        self.gen[idx] += k
        self.seg_tokens[idx] += k
        self.seg_last[idx] = self.iteration + k - 1
        evictions: int | np.ndarray = 0
        if self.evicted_now:
            evictions = np.zeros(k, dtype=np.int64)
            evictions[0] = self.evicted_now
        self.evicted_now = 0
        self.rec.iterations(starts, ends, "decode", n, 0, n, kv0 + n * (steps + 1),
                            evictions=evictions, running=len(self.running))
        self.iteration += k
        self.t = float(ends[-1])
        self.seg_end_t[idx] = self.t
        return self._finish(idx)

    def _process(self, pre: list[int], chunks: list[int], dec: np.ndarray) -> int:
        """One batch of prefill/refill chunks and decodes."""
        prof = self.profile
        p_idx = np.asarray(pre, dtype=np.int64)
        c = np.asarray(chunks, dtype=np.int64)
        d_idx = dec
        m_before = self.m[p_idx]
        tokens = int(c.sum()) + len(d_idx)
        dur = prof.batch_ms(tokens, int(self.m[d_idx].sum()),
                            float((c * c + 2 * m_before * c).sum()), len(p_idx))
        start, end = self.t, self.t + dur
        if len(d_idx):
            self._open_decode(d_idx)
        if len(p_idx):
            phases = np.where(self.gen[p_idx] >= 1, 2, 1)
            for code, name in ((1, "prefill"), (2, "refill")):
                sel = phases == code
                self.rec.segments(p_idx[sel], self.slot[p_idx[sel]], name, start, end, c[sel])
        self.m[p_idx] += c
        self.m[d_idx] += 1
        if len(d_idx):
            self.seg_tokens[d_idx] += 1
            self.seg_last[d_idx] = self.iteration
        touched = np.concatenate([p_idx, d_idx])
        complete = touched[self.m[touched] == self.S[touched]]
        self.gen[complete] += 1
        self.S[complete] += 1
        first = complete[self.gen[complete] == 1]
        self.first_ms[first] = end
        kv = int(self.m[np.asarray(self.running)].sum()) if self.running else 0
        phase = ("mixed" if len(p_idx) and len(d_idx) else "prefill" if len(p_idx)
                 else "decode")
        self.rec.iterations(np.array([start]), np.array([end]), phase,
                            len(p_idx) + len(d_idx), int(c.sum()), len(d_idx), kv,
                            evictions=self.evicted_now, running=len(self.running))
        self.evicted_now = 0
        self.iteration += 1
        self.t = end
        if len(d_idx):
            self.seg_end_t[d_idx] = end
        return self._finish(complete)

    def _finish(self, idx: np.ndarray) -> int:
        done = idx[self.gen[idx] >= self.O[idx]]
        if not len(done):
            return 0
        self._close_decode(done)
        self.finish_ms[done] = self.t
        self.status[done] = DONE
        for i in done:
            self.running.remove(int(i))
            heapq.heappush(self.free_slots, int(self.slot[i]))
            self.slot[i] = -1
            bisect.insort(self.outputs_seen, int(self.O[i]))
        self.m[done] = 0
        self.reserve_to[done] = 0
        return len(done)

    def _schedule(self) -> Schedule:
        self._close_decode(np.flatnonzero(~np.isnan(self.seg_start)))
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
        from llmopt.replay.policies.infermax import SchedulerConfig

        config = SchedulerConfig(name, "vllm", hybrid=True, chunked=True, prefill_budget=None)
        super().__init__(instance, config)
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

    def _form_batch(self):
        if self._step >= len(self.plan):
            self._fail("the plan ends before every request has finished")
        evict, chunks, dec = self.plan[self._step]
        members = [i for i, _ in chunks] + dec
        start = max([self.t, *(float(self.arr[i]) for i in members)])
        if start > self.t:
            self.t = start
            self._arrive()
        for i in evict:
            if i not in self.running:
                self._fail(f"evicts {self.ids[i]}, which is not running")
            self._evict(i)
        self.just_evicted.clear()
        b = _Batch(free=math.inf, tokens=self.C, prefill=self.C)
        for i, c in chunks:
            if self.status[i] == WAITING:
                self.waiting = [e for e in self.waiting if e[2] != i]
                heapq.heapify(self.waiting)
                if len(self.running) >= self.J:
                    self._fail(f"more than {self.J} requests running")
                self._admit(i, c, 0, b)
            elif i in self.running and not self._decode_phase(i):
                b.add_chunk(i, c)
            else:
                self._fail(f"prefill chunk for {self.ids[i]}, which is not waiting or prefilling")
            if not 0 < c <= self.S[i] - self.m[i]:
                self._fail(f"chunk of {c} tokens for {self.ids[i]} with "
                           f"{int(self.S[i] - self.m[i])} left to process")
        for i in dec:
            if i not in self.running or not self._decode_phase(i):
                self._fail(f"{self.ids[i]} is not in the decode phase")
        if dec:
            b.add_decodes(np.asarray(dec, dtype=np.int64))
        if b.tokens < 0:
            self._fail(f"more than C = {self.C} tokens")
        held = int(self.m[np.asarray(self.running)].sum())
        kv_after = held + sum(c for _, c in chunks) + len(dec)
        if kv_after > self.M:
            self._fail(f"{kv_after} KV tokens > M = {int(self.M)}")
        self._step += 1
        if not b.pre and not b.n_dec:
            return self._form_batch() if self._step < len(self.plan) else None
        return b.pre, b.chunks, b.decodes(), False
