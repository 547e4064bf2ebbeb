"""A plan of batches followed exactly (as the InferMax CSP gives it): for each batch, the
requests evicted before it, the prefill/refill chunks ``{request: tokens}`` and the decoding
requests. Times come from the cost model; a batch starts once its requests have arrived. A plan
that breaks a rule (a chunk larger than what is left, KV above M, more than C tokens, a request
in the wrong phase) raises :class:`~llmopt.errors.SolutionFileError` naming the batch."""

from __future__ import annotations

import math
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import SolutionFileError
from llmopt.policies.base import RUNNING, WAITING, Batch, IterationPolicy, ReplicaView


class PlannedBatches(IterationPolicy):
    def __init__(self, instance: Instance, batches: list[dict[str, Any]],
                 name: str = "plan") -> None:
        self.name = name
        index = {rid: k for k, rid in enumerate(instance.ids)}
        self.plan: list[tuple[list[int], list[tuple[int, int]], list[int]]] = []
        for k, batch in enumerate(batches):
            try:
                evict = [index[r] for r in batch.get("evict", [])]
                chunks = [(index[r], int(c)) for r, c in batch.get("prefill", {}).items()]
                dec = [index[r] for r in batch.get("decode", [])]
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise SolutionFileError(f"batch {k} of the plan names an unknown request or a "
                                        f"bad chunk: {exc}", field=f"plan[{k}]") from None
            self.plan.append((evict, chunks, dec))
        self._step = 0

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        if replica.kv_limit is None or math.inf == replica.C:
            raise SolutionFileError("a plan of batches needs M and C", file=instance.label(),
                                    field="system")

    def _fail(self, r: ReplicaView, why: str) -> None:
        raise SolutionFileError(f"plan batch {self._step}: {why}", field="plan")

    def next_batch(self, r: ReplicaView) -> Batch | None:
        while True:
            if self._step >= len(self.plan):
                if r.n_running or r.waiting:
                    self._fail(r, "the plan ends before every request has finished")
                return None
            evict, chunks, dec = self.plan[self._step]
            members = [i for i, _ in chunks] + dec
            start = max([r.t, *(r.arr[i] for i in members)])
            if start > r.t:
                r.wake_at = start  # the batch waits for its requests to arrive
                return None
            for i in evict:
                if r.status[i] != RUNNING:
                    self._fail(r, f"evicts {r.instance.ids[i]}, which is not running")
                r.evict(i)
            b = Batch(free=math.inf, tokens=r.C, prefill=r.C)
            for i, c in chunks:
                if r.status[i] == WAITING:
                    r.take_waiting(i)
                    if r.n_running >= r.J:
                        self._fail(r, f"more than {r.J} requests running")
                    r.admit(i, c, 0, b)
                elif i in r.prefilling:
                    b.add_chunk(i, c)
                else:
                    self._fail(r, f"prefill chunk for {r.instance.ids[i]}, which is not waiting "
                                  "or prefilling")
                if not 0 < c <= r.S[i] - r.m[i]:
                    self._fail(r, f"chunk of {c} tokens for {r.instance.ids[i]} with "
                                  f"{r.S[i] - r.m[i]} left to process")
            for i in dec:
                if r.status[i] != RUNNING or not r.decoding(i):
                    self._fail(r, f"{r.instance.ids[i]} is not in the decode phase")
            if dec:
                b.add_decodes(dec)
            if b.tokens < 0:
                self._fail(r, f"more than C = {r.C} tokens")
            held = r.cached_kv()
            kv_after = held + sum(c for _, c in chunks) + len(dec)
            if kv_after > r.M:
                self._fail(r, f"{kv_after} KV tokens > M = {r.M}")
            self._step += 1
            if not b.empty:
                return b
            if self._step >= len(self.plan):
                return None
