"""Iteration-level simulator of one model instance in PD competition (Pang et al. 2025, III.A).

Every iteration is all-prefill or all-decode. At most J requests are in flight, each pinned to
its client (batch slot) from its prefill until its last token. A prefill stage processes the
whole prompts of the requests admitted in it and lasts ``profile.prefill_stage_ms(tokens)``; a
decode round gives one token to every in-flight request and lasts
``profile.decode_round_ms(clients decoding)``. A request's first output token comes from its
first decode round (eq 8: decode work is N^d_i tokens per request).

Which requests free clients take, and when a prefill stage interrupts decoding, is the policy's
business (``llmopt.replay.policies``). The engine advances runs of identical decode rounds in one
step: a policy says how many rounds it will not change its mind for, and the engine stops early
at the next completion or, when a client is free, the next arrival.

KV memory (the rule of ``llmopt.kv``): a request is admitted only when the KV tokens reserved by
in-flight requests (input + output each) plus its own fit ``system.kv_capacity`` (else the
profile's KV cache); the tokens actually held (input + decoded so far) are recorded per
iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from llmopt.errors import InstanceError, InternalError
from llmopt.instance import Instance
from llmopt.kv import footprint
from llmopt.limits import resolve_limits
from llmopt.profiles import PangLinearProfile
from llmopt.replay.recorder import Recorder
from llmopt.schedule import Schedule

PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3


@dataclass(frozen=True)
class Budget:
    """What one prefill stage may still take: prompt tokens and reserved KV tokens."""

    prefill_tokens: float
    kv_tokens: float


class PDPolicy(Protocol):
    """A scheduling policy of the PD-competition engine."""

    name: str

    def setup(self, engine: PDEngine) -> None:
        """Called once before the run (build queues from offline knowledge)."""

    def arrive(self, request: int) -> None:
        """Request (local index) has arrived and may be scheduled."""

    def candidates(self, free_clients: list[int], budget: Budget) -> list[tuple[int, int]]:
        """(client, request) pairs the free clients would start now, within ``budget``;
        must not change the policy's state."""

    def take(self, pairs: list[tuple[int, int]]) -> None:
        """Commit to starting ``pairs`` (remove them from queues)."""

    def rounds_before_prefill(self, engine: PDEngine, pairs: list[tuple[int, int]]) -> int:
        """0 to run the prefill stage of ``pairs`` now, else how many decode rounds to wait."""


class PDEngine:
    """Simulates one model instance; ``members`` are the instance's request indices."""

    def __init__(self, instance: Instance, policy: PDPolicy, members: np.ndarray | None = None,
                 instance_index: int = 0) -> None:
        profile = instance.profile
        if not isinstance(profile, PangLinearProfile):
            raise InstanceError("PD-competition replay needs a pang_linear profile",
                                file=instance.label(), field="model", value=profile.name)
        self.instance = instance
        self.profile = profile
        self.policy = policy
        self.index = instance_index
        members = np.arange(instance.num_requests) if members is None else np.asarray(members)
        self.members = members
        self.ids = [instance.ids[i] for i in members]
        self.inp = instance.input_tokens[members]
        self.out = instance.output_tokens[members]
        self.arr = instance.arrival_ms[members]
        self.n = len(members)
        self.J = instance.system.clients
        limits = resolve_limits(instance)
        self.P = limits.prefill_tokens or math.inf
        self.M = limits.kv_tokens or math.inf
        self._check_fits(instance)

        self.status = np.full(self.n, PENDING, dtype=np.int8)
        self.decoded = np.zeros(self.n, dtype=np.int64)
        self.client = np.full(self.n, -1, dtype=np.int64)
        self.first_ms = np.full(self.n, np.nan)
        self.finish_ms = np.full(self.n, np.nan)
        self.seg_start = np.full(self.n, np.nan)
        self.seg_tokens = np.zeros(self.n, dtype=np.int64)
        self.client_req = np.full(self.J, -1, dtype=np.int64)
        self.client_free_round = np.zeros(self.J, dtype=np.int64)
        self.t = 0.0
        self.rounds = 0
        self.tokens_since_prefill = 0
        self.kv_held = 0
        self.kv_reserved = 0
        self.decoding = np.zeros(0, dtype=np.int64)
        self.rec = Recorder(instance_index)

    def _check_fits(self, instance: Instance) -> None:
        too_long = np.flatnonzero(self.inp > self.P)
        if len(too_long):
            i = int(too_long[0])
            raise InstanceError(
                f"request {self.ids[i]} has {int(self.inp[i])} prompt tokens, more than one "
                "prefill stage may hold", file=instance.label(),
                field="system.max_prefill_tokens", value=self.P)
        need = footprint(self.inp, self.out)
        too_big = np.flatnonzero(need > self.M)
        if len(too_big):
            i = int(too_big[0])
            raise InstanceError(
                f"request {self.ids[i]} needs {int(need[i])} KV tokens, more than the cache",
                file=instance.label(), field="system.kv_capacity", value=self.M)

    # ------------------------------------------------------------------ run

    def run(self) -> Schedule:
        self.policy.setup(self)
        order = np.argsort(self.arr, kind="stable")
        next_arrival = 0
        finished = 0
        while finished < self.n:
            while next_arrival < self.n and self.arr[order[next_arrival]] <= self.t + 1e-9:
                i = int(order[next_arrival])
                self.status[i] = WAITING
                self.policy.arrive(i)
                next_arrival += 1
            free = [int(j) for j in np.flatnonzero(self.client_req < 0)]
            budget = Budget(self.P, self.M - self.kv_reserved)
            pairs = self.policy.candidates(free, budget) if free else []
            wait = math.inf
            if pairs:
                wait = (0 if not len(self.decoding)
                        else self.policy.rounds_before_prefill(self, pairs))
                if wait <= 0:
                    self.policy.take(pairs)
                    self._prefill(pairs)
                    continue
            if len(self.decoding):
                k = min(wait, int((self.out[self.decoding] - self.decoded[self.decoding]).min()))
                if free and next_arrival < self.n:
                    d = self.profile.decode_round_ms(len(self.decoding))
                    gap = self.arr[order[next_arrival]] - self.t
                    k = min(k, max(1, math.ceil(gap / d - 1e-9)))
                finished += self._decode(max(int(k), 1))
                continue
            if next_arrival < self.n:
                self.t = max(self.t, float(self.arr[order[next_arrival]]))
                continue
            stuck = [self.ids[i] for i in np.flatnonzero(self.status != DONE)[:3]]
            raise InternalError(f"{self.instance.label()}: policy {self.policy.name} left "
                                f"requests unscheduled with nothing running, e.g. {stuck}")
        return self._schedule()

    def _prefill(self, pairs: list[tuple[int, int]]) -> None:
        reqs = np.array([r for _, r in pairs], dtype=np.int64)
        clients = np.array([c for c, _ in pairs], dtype=np.int64)
        tokens = int(self.inp[reqs].sum())
        dur = self.profile.prefill_stage_ms(tokens)
        self._close_decode_segments(self.t)
        start, end = self.t, self.t + dur
        self.rec.segments(reqs, clients, "prefill", start, end, self.inp[reqs])
        self.status[reqs] = RUNNING
        self.client[reqs] = clients
        self.client_req[clients] = reqs
        self.kv_held += tokens
        self.kv_reserved += int(footprint(self.inp[reqs], self.out[reqs]).sum())
        self.rec.iterations(np.array([start]), np.array([end]), "prefill", len(reqs), tokens, 0,
                            self.kv_held, running=len(self.decoding) + len(reqs))
        self.decoding = np.concatenate([self.decoding, reqs])
        self.tokens_since_prefill = 0
        self.t = end

    def _close_decode_segments(self, at: float) -> None:
        idx = self.decoding[~np.isnan(self.seg_start[self.decoding])]
        self.rec.segments(idx, self.client[idx], "decode", self.seg_start[idx], at,
                          self.seg_tokens[idx])
        self.seg_start[idx] = np.nan
        self.seg_tokens[idx] = 0

    def _decode(self, k: int) -> int:
        """Run k decode rounds over all in-flight requests; returns how many finished."""
        idx = self.decoding
        n = len(idx)
        d = self.profile.decode_round_ms(n)
        starts = self.t + d * np.arange(k)
        ends = starts + d
        fresh = np.isnan(self.seg_start[idx])
        self.seg_start[idx[fresh]] = self.t
        first = idx[self.decoded[idx] == 0]
        self.first_ms[first] = self.t + d
        self.decoded[idx] += k
        self.seg_tokens[idx] += k
        self.rec.iterations(starts, ends, "decode", n, 0, n,
                            self.kv_held + n * np.arange(1, k + 1), running=n)
        self.kv_held += n * k
        self.rounds += k
        self.tokens_since_prefill += n * k
        self.t = float(ends[-1])
        finished = self.decoded[idx] >= self.out[idx]
        done = idx[finished]
        if len(done):
            self.rec.segments(done, self.client[done], "decode", self.seg_start[done], self.t,
                              self.seg_tokens[done])
            self.seg_start[done] = np.nan
            self.finish_ms[done] = self.t
            self.status[done] = DONE
            self.client_req[self.client[done]] = -1
            self.client_free_round[self.client[done]] = self.rounds
            self.kv_held -= int((self.inp[done] + self.out[done]).sum())
            self.kv_reserved -= int(footprint(self.inp[done], self.out[done]).sum())
            self.decoding = idx[~finished]
        return len(done)

    def _schedule(self) -> Schedule:
        requests = pd.DataFrame({
            "request": self.ids,
            "instance": self.index,
            "client": self.client,
            "input_tokens": self.inp,
            "output_tokens": self.out,
            "arrival_ms": self.arr,
            "first_token_ms": self.first_ms,
            "finish_ms": self.finish_ms,
            "evictions": 0,
        })
        return Schedule(policy=self.policy.name, segments=self.rec.segment_frame(self.ids),
                        iterations=self.rec.iteration_frame(), requests=requests,
                        clients=self.J)
