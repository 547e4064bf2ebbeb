"""PD competition (Pang et al. 2025, III.A) as iteration policies: every iteration is a prefill
stage or a decode round.

At most J requests are in flight, each pinned to its client (batch slot) from its prefill until
its last token. A prefill stage processes the whole prompts of the requests admitted in it; a
decode round gives one token to every request in flight. A request's first output token comes
from its first decode round (eq 8: decode work is N^d_i tokens per request), so these policies
set ``first_token_from_prefill = False``. Memory follows ``llmopt.problems.pang.kv``: a request is
admitted only when the KV tokens reserved by the requests in flight (input + output each) plus
its own fit the capacity.

A policy is a queue discipline (which request a free client takes) and a prefill timing rule
(when a prefill stage interrupts decoding):

=========== ============================================ ==============================
policy      queue discipline                             prefill timing
=========== ============================================ ==============================
baseline    one FCFS queue; any free client takes the    eager: prefill-first, as the
            next waiting request (vLLM's default)        paper describes vLLM
offline     per-client queues from the bin packing of    eager
            eqs 26–30, FCFS within a queue
online      Algorithm 1 without the offline assignment:  eager
            requests dealt round-robin in arrival order,
            each client's queue sorted by N^p + N^d
            (longest first), idle clients with an empty
            queue steal the longest request of the
            client with the most remaining tokens
iteration   one FCFS queue                               Lagrangian rule, eqs 41–43
hybrid      Algorithm 1 on the bin-packing queues        Lagrangian rule
plan        per-client queues (and order) from a         eager
            solver's plan, or its stages exactly
=========== ============================================ ==============================

Lagrangian rule (eqs 41–43). Adding a prefill stage costs C_p = Σ_l T^p_l y_kl, its duration
(eq 42); the decode already waited in the current decode stage is C_d = T_d Σ N^d_i w_ijk (eq 43),
T_d times the decode tokens produced since the last prefill stage, with T_d the per-client
marginal decode time of the profile (0.21 ms for the Pang profile, Table III). A prefill stage
runs only once C_d ≥ C_p; until then the free clients wait and more prompts gather for one stage.

Fast path: a decode round is repeated until the timing rule's wait ends, a request finishes, or
(while a client is free) the next request arrives (``steady``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from llmopt.data.cost import PangLinearProfile
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError
from llmopt.policies.base import Batch, IterationPolicy, ReplicaView, Steady
from llmopt.problems.pang.kv import footprint


@dataclass(frozen=True)
class Budget:
    """What one prefill stage may still take: prompt tokens and reserved KV tokens."""

    prefill_tokens: float
    kv_tokens: float


class QueueDiscipline(Protocol):
    def setup(self, replica: ReplicaView) -> None: ...

    def arrive(self, request: int) -> None: ...

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        """(client, request) pairs the free clients would start now, within ``budget``; must
        not change the discipline's state."""
        ...

    def take(self, pairs: list[tuple[int, int]]) -> None: ...


Timing = Callable[[ReplicaView, list[tuple[int, int]]], float]


# --------------------------------------------------------------------- queue disciplines


class FCFSQueue:
    """One global queue in arrival order."""

    def __init__(self) -> None:
        self.queue: deque[int] = deque()

    def setup(self, replica: ReplicaView) -> None:
        self.inp = replica.instance.input_tokens
        self.out = replica.instance.output_tokens
        self.queue.clear()

    def arrive(self, request: int) -> None:
        self.queue.append(request)

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        pairs, tokens, kv = [], 0, 0
        inp, out = self.inp, self.out
        for client, req in zip(free, self.queue, strict=False):
            tokens += int(inp[req])
            kv += int(inp[req] + out[req])
            if tokens > budget.prefill_tokens or kv > budget.kv_tokens:
                break
            pairs.append((client, req))
        return pairs

    def take(self, pairs: list[tuple[int, int]]) -> None:
        for _ in pairs:
            self.queue.popleft()


class ClientQueues:
    """Per-client queues from an assignment (Algorithm 1's I_j), optionally sorted longest
    first and with stealing by idle clients whose own queue is empty."""

    def __init__(self, assignment: Mapping[int, int] | None, order: str = "fcfs",
                 steal: bool = False, explicit_order: Mapping[int, Sequence[int]] | None = None
                 ) -> None:
        self.assignment = assignment  # request -> client; None: round-robin on arrival
        self.order = order
        self.steal = steal
        self.explicit_order = explicit_order

    def setup(self, replica: ReplicaView) -> None:
        instance = replica.instance
        n, J = instance.num_requests, replica.J
        self.inp, self.out = instance.input_tokens, instance.output_tokens
        self.J = J
        self.queues: list[list[int]] = [[] for _ in range(J)]
        self.arrived = np.zeros(n, dtype=bool)
        self.remain = np.zeros(J, dtype=np.int64)
        self.dealt = 0
        self.size = self.inp + self.out
        self.owner = np.full(n, -1, dtype=np.int64)
        if self.assignment is not None:
            if self.explicit_order is not None:
                for client, reqs in self.explicit_order.items():
                    self.queues[client] = list(reqs)
            else:
                for req in sorted(self.assignment):
                    self.queues[self.assignment[req]].append(req)
            for client, q in enumerate(self.queues):
                if self.order == "longest":
                    q.sort(key=lambda r: (-int(self.size[r]), r))
                self.remain[client] = int(self.size[q].sum()) if q else 0
                self.owner[q] = client

    def arrive(self, request: int) -> None:
        self.arrived[request] = True
        if self.assignment is None:
            client = self.dealt % self.J
            self.dealt += 1
            q = self.queues[client]
            q.append(request)
            if self.order == "longest":
                q.sort(key=lambda r: (-int(self.size[r]), r))
            self.remain[client] += int(self.size[request])
            self.owner[request] = client

    def _head(self, client: int, taken: set[int]) -> int | None:
        for req in self.queues[client]:
            if req in taken:
                continue
            return req if self.arrived[req] else None
        return None

    def _steal_from(self, remain: np.ndarray, taken: set[int]) -> int | None:
        for victim in np.argsort(-remain, kind="stable"):
            if remain[victim] <= 0:
                return None
            for req in self.queues[int(victim)]:
                if req not in taken and self.arrived[req]:
                    return req
        return None

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        pairs: list[tuple[int, int]] = []
        taken: set[int] = set()
        remain = self.remain.copy()
        tokens = kv = 0
        inp, out = self.inp, self.out
        for client in free:
            req = self._head(client, taken)
            if req is None and self.steal and not any(
                    r not in taken for r in self.queues[client]):
                req = self._steal_from(remain, taken)
            if req is None:
                continue
            if (tokens + int(inp[req]) > budget.prefill_tokens
                    or kv + int(inp[req] + out[req]) > budget.kv_tokens):
                continue
            tokens += int(inp[req])
            kv += int(inp[req] + out[req])
            taken.add(req)
            remain[self.owner[req]] -= int(self.size[req])
            pairs.append((client, req))
        return pairs

    def take(self, pairs: list[tuple[int, int]]) -> None:
        for _, req in pairs:
            owner = int(self.owner[req])
            self.queues[owner].remove(req)
            self.remain[owner] -= int(self.size[req])


class StageQueue:
    """Follows a plan's stages: stage k's requests are prefilled together, on their clients,
    once the replica has run the decode rounds the plan puts before stage k (B_k). Empty
    stages are merged into the previous one. A stage whose clients are not yet free, or that
    does not fit the KV budget, waits (the replay is then later than the plan)."""

    def __init__(self, stages: Sequence[tuple[Sequence[int], int]],
                 client: Mapping[int, int]) -> None:
        merged: list[tuple[list[int], int]] = []
        for reqs, rounds in stages:
            if reqs or not merged:
                merged.append((list(reqs), int(rounds)))
            else:
                merged[-1] = (merged[-1][0], merged[-1][1] + int(rounds))
        self.stages = merged
        self.client = client

    def setup(self, replica: ReplicaView) -> None:
        self.inp = replica.instance.input_tokens
        self.out = replica.instance.output_tokens
        self.k = 0
        self.position = 0
        self.arrived = np.zeros(replica.instance.num_requests, dtype=bool)

    def arrive(self, request: int) -> None:
        self.arrived[request] = True

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        if self.k >= len(self.stages):
            return []
        reqs = self.stages[self.k][0]
        free_set = set(free)
        if not all(self.client[r] in free_set and self.arrived[r] for r in reqs):
            return []
        if (int(self.inp[reqs].sum()) > budget.prefill_tokens
                or int((self.inp[reqs] + self.out[reqs]).sum()) > budget.kv_tokens):
            return []
        return [(self.client[r], r) for r in reqs]

    def take(self, pairs: list[tuple[int, int]]) -> None:
        self.position += self.stages[self.k][1]
        self.k += 1

    def rounds_before_prefill(self, replica: ReplicaView, pairs: list[tuple[int, int]]) -> float:
        return max(0, self.position - replica.decode_iterations)


# --------------------------------------------------------------------- timing rules


def eager(replica: ReplicaView, pairs: list[tuple[int, int]]) -> float:
    """Prefill-first: a waiting prompt with a free client interrupts decoding at once."""
    return 0


def lagrangian(replica: ReplicaView, pairs: list[tuple[int, int]]) -> float:
    """Eqs 41–43: wait while C_p (the stage's duration) exceeds C_d (T_d × decode tokens since
    the last prefill stage); returns the decode rounds still to wait."""
    profile: PangLinearProfile = replica.profile  # type: ignore[assignment]
    tokens = sum(replica.I[r] for _, r in pairs)
    c_p = profile.prefill_stage_ms(tokens)
    t_d = profile.decode.per_client_ms
    c_d = t_d * replica.tokens_since_prefill
    if c_d >= c_p or t_d <= 0:
        return 0
    per_round = t_d * replica.n_running
    return max(1, math.ceil((c_p - c_d) / per_round - 1e-12))


# --------------------------------------------------------------------- the policy


class StagePolicy(IterationPolicy):
    """A queue discipline with a prefill timing rule (see the module doc)."""

    first_token_from_prefill = False

    def __init__(self, name: str, queue: QueueDiscipline, timing: Timing) -> None:
        self.name = name
        self.queue = queue
        self.timing = timing
        self._wait: float = math.inf
        self._free_clients = False

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        profile = instance.profile
        if not isinstance(profile, PangLinearProfile):
            raise InstanceError("PD-competition replay needs a pang_linear profile",
                                file=instance.label(), field="model", value=profile.name)
        too_long = np.flatnonzero(instance.input_tokens > replica.P_system)
        if len(too_long):
            i = int(too_long[0])
            raise InstanceError(
                f"request {instance.ids[i]} has {int(instance.input_tokens[i])} prompt tokens, "
                "more than one prefill stage may hold", file=instance.label(),
                field="system.max_prefill_tokens", value=replica.P_system)
        need = footprint(instance.input_tokens, instance.output_tokens)
        too_big = np.flatnonzero(need > replica.M)
        if len(too_big):
            i = int(too_big[0])
            raise InstanceError(
                f"request {instance.ids[i]} needs {int(need[i])} KV tokens, more than the cache",
                file=instance.label(), field="system.kv_capacity", value=replica.M)

    def attach(self, replica: ReplicaView) -> None:
        self.queue.setup(replica)

    def arrived(self, replica: ReplicaView, i: int) -> None:
        self.queue.arrive(i)

    def reservation(self, replica: ReplicaView, i: int) -> int:
        return int(footprint(replica.I[i], replica.O[i]))

    def next_batch(self, r: ReplicaView) -> Batch | None:
        free = r.free_clients()
        budget = Budget(r.P_system, r.free_kv())
        pairs = self.queue.candidates(free, budget) if free else []
        wait: float = math.inf
        if pairs:
            wait = 0 if not r.n_running else self._rounds_before_prefill(r, pairs)
            if wait <= 0:
                self.queue.take(pairs)
                b = Batch(budget.kv_tokens, math.inf, math.inf)
                for client, i in pairs:
                    r.take_waiting(i)
                    r.admit(i, r.I[i], self.reservation(r, i), b, slot=client)
                return b
        if not r.n_running:
            return None
        b = Batch(budget.kv_tokens, math.inf, math.inf)
        b.add_all_decodes(r.n_decoders())
        self._wait, self._free_clients = wait, bool(free)
        return b

    def _rounds_before_prefill(self, r: ReplicaView, pairs: list[tuple[int, int]]) -> float:
        if isinstance(self.queue, StageQueue):
            return self.queue.rounds_before_prefill(r, pairs)
        return self.timing(r, pairs)

    def steady(self, replica: ReplicaView, batch: Batch) -> Steady | None:
        return Steady(self._wait, until_arrival=self._free_clients)
