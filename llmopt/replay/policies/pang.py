"""Policies of the PD-competition paper (Pang et al. 2025) for :class:`~llmopt.replay.pd.PDEngine`.

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
            solver's plan
=========== ============================================ ==============================

Lagrangian rule (eqs 41–43). Adding a prefill stage costs C_p = Σ_l T^p_l y_kl, its duration
(eq 42); the decode already waited in the current decode stage is C_d = T_d Σ N^d_i w_ijk (eq 43),
T_d times the decode tokens produced since the last prefill stage, with T_d the per-client
marginal decode time of the profile (0.21 ms for the Pang profile, Table III). A prefill stage
runs only once C_d ≥ C_p; until then the free clients wait and more prompts gather for one stage.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

from llmopt.replay.pd import Budget, PDEngine

# --------------------------------------------------------------------- queue disciplines


class FCFSQueue:
    """One global queue in arrival order."""

    def __init__(self) -> None:
        self.queue: deque[int] = deque()

    def setup(self, engine: PDEngine) -> None:
        self.engine = engine
        self.queue.clear()

    def arrive(self, request: int) -> None:
        self.queue.append(request)

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        pairs, tokens, kv = [], 0, 0
        inp, out = self.engine.inp, self.engine.out
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
        self.assignment = assignment  # local request -> client; None: round-robin on arrival
        self.order = order
        self.steal = steal
        self.explicit_order = explicit_order

    def setup(self, engine: PDEngine) -> None:
        self.engine = engine
        self.queues: list[list[int]] = [[] for _ in range(engine.J)]
        self.arrived = np.zeros(engine.n, dtype=bool)
        self.remain = np.zeros(engine.J, dtype=np.int64)
        self.dealt = 0
        self.size = engine.inp + engine.out
        self.owner = np.full(engine.n, -1, dtype=np.int64)
        if self.assignment is not None:
            if self.explicit_order is not None:
                for client, reqs in self.explicit_order.items():
                    self.queues[client] = list(reqs)
            else:
                for req in range(engine.n):
                    self.queues[self.assignment[req]].append(req)
            for client, q in enumerate(self.queues):
                if self.order == "longest":
                    q.sort(key=lambda r: (-int(self.size[r]), r))
                self.remain[client] = int(self.size[q].sum()) if q else 0
                self.owner[q] = client

    def arrive(self, request: int) -> None:
        self.arrived[request] = True
        if self.assignment is None:
            client = self.dealt % self.engine.J
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
        inp, out = self.engine.inp, self.engine.out
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


class StagePlan:
    """Follows a plan's stages: stage k's requests are prefilled together, on their clients,
    once the engine has run the decode rounds the plan puts before stage k (B_k). Empty stages
    are merged into the previous one. A stage whose clients are not yet free, or that does not
    fit the KV budget, waits (the replay is then later than the plan)."""

    def __init__(self, stages: Sequence[tuple[Sequence[int], int]], client: Mapping[int, int],
                 name: str = "plan") -> None:
        self.name = name
        merged: list[tuple[list[int], int]] = []
        for reqs, rounds in stages:
            if reqs or not merged:
                merged.append((list(reqs), int(rounds)))
            else:
                merged[-1] = (merged[-1][0], merged[-1][1] + int(rounds))
        self.stages = merged
        self.client = client

    def setup(self, engine: PDEngine) -> None:
        self.engine = engine
        self.k = 0
        self.position = 0
        self.arrived = np.zeros(engine.n, dtype=bool)

    def arrive(self, request: int) -> None:
        self.arrived[request] = True

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        if self.k >= len(self.stages):
            return []
        reqs = self.stages[self.k][0]
        free_set = set(free)
        inp, out = self.engine.inp, self.engine.out
        if not all(self.client[r] in free_set and self.arrived[r] for r in reqs):
            return []
        if (int(inp[reqs].sum()) > budget.prefill_tokens
                or int((inp[reqs] + out[reqs]).sum()) > budget.kv_tokens):
            return []
        return [(self.client[r], r) for r in reqs]

    def take(self, pairs: list[tuple[int, int]]) -> None:
        self.position += self.stages[self.k][1]
        self.k += 1

    def rounds_before_prefill(self, engine: PDEngine, pairs: list[tuple[int, int]]) -> int:
        target = self.position
        return max(0, target - engine.rounds)


# --------------------------------------------------------------------- timing rules


def eager(engine: PDEngine, pairs: list[tuple[int, int]]) -> int:
    """Prefill-first: a waiting prompt with a free client interrupts decoding at once."""
    return 0


def lagrangian(engine: PDEngine, pairs: list[tuple[int, int]]) -> int:
    """Eqs 41–43: wait while C_p (the stage's duration) exceeds C_d (T_d × decode tokens since
    the last prefill stage); returns the decode rounds still to wait."""
    tokens = int(engine.inp[[r for _, r in pairs]].sum())
    c_p = engine.profile.prefill_stage_ms(tokens)
    t_d = engine.profile.decode.per_client_ms
    c_d = t_d * engine.tokens_since_prefill
    if c_d >= c_p or t_d <= 0:
        return 0
    per_round = t_d * len(engine.decoding)
    return max(1, math.ceil((c_p - c_d) / per_round - 1e-12))


class Policy:
    """A queue discipline with a prefill timing rule."""

    def __init__(self, name: str, queue, timing) -> None:
        self.name = name
        self.queue = queue
        self.timing = timing

    def setup(self, engine: PDEngine) -> None:
        self.queue.setup(engine)

    def arrive(self, request: int) -> None:
        self.queue.arrive(request)

    def candidates(self, free: list[int], budget: Budget) -> list[tuple[int, int]]:
        return self.queue.candidates(free, budget)

    def take(self, pairs: list[tuple[int, int]]) -> None:
        self.queue.take(pairs)

    def rounds_before_prefill(self, engine: PDEngine, pairs: list[tuple[int, int]]) -> int:
        return self.timing(engine, pairs)
