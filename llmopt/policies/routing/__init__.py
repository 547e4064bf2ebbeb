"""Routers: which replica takes an arriving request.

Each sees every replica as it stands when the request arrives (``RouterView``);
ties go to the lowest replica index. A router that reads replica state says so
(``reads_state``): replicas then never run ahead of an arrival, even where their policy would
not change its decision, so that the state read is the state at the arrival.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmopt.policies.base import RouterView


class RoundRobin:
    """Requests dealt to the replicas in turn, in arrival order (the usual default of serving
    systems, and llmopt's when a policy has no assignment)."""

    name = "round-robin"
    reads_state = False

    def __init__(self) -> None:
        self.next = 0

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        k = self.next % len(replicas)
        self.next += 1
        return k


class ByAssignment:
    """A plan's client per request (0 .. J·replicas − 1): client c lives on replica c // J."""

    name = "assignment"
    reads_state = False

    def __init__(self, client_of: Mapping[int, int], clients_per_replica: int) -> None:
        self.client_of = client_of
        self.J = clients_per_replica

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        return self.client_of[request] // self.J


class LeastOutstandingTokens:
    """The replica with the fewest tokens still to process (prompts, outputs and recomputes of
    its waiting and running requests): live load, as a load-aware gateway would use."""

    name = "least-outstanding-tokens"
    reads_state = True

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        return min(range(len(replicas)), key=lambda k: (replicas[k].outstanding_tokens, k))


class ShortestQueue:
    """The replica with the fewest requests waiting or running."""

    name = "shortest-queue"
    reads_state = True

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        return min(range(len(replicas)),
                   key=lambda k: (replicas[k].waiting_count + replicas[k].n_running, k))


class MostFreeMemory:
    """The replica with the most KV memory not held by running requests."""

    name = "most-free-memory"
    reads_state = True

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        return min(range(len(replicas)), key=lambda k: (-replicas[k].free_kv(), k))


class PrefixAffinity:
    """The replica whose prefix cache holds the longest prefix of the request's prompt, under a
    load guard: the *affine* replica (the longest hit, ties to the fewest outstanding tokens,
    then the lowest index) takes the request unless its outstanding tokens exceed
    ``load_factor`` × the least-loaded replica's plus the request's own prompt; the least-loaded
    replica (fewest outstanding tokens, as ``least-outstanding-tokens``) takes it then. Without
    a prefix cache (no hits anywhere) it routes as ``least-outstanding-tokens``.

    The rule is ours; the idea, scoring replicas by the cached prefix they hold and guarding
    against piling load on them, is that of llm-d's inference scheduler (its prefix-cache scorer
    weighed with load-aware scorers) and of BLIS's prefix-affinity routing."""

    name = "prefix-affinity"
    reads_state = True

    def __init__(self, load_factor: float = 2.0) -> None:
        self.load_factor = load_factor

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int:
        loads = [replica.outstanding_tokens for replica in replicas]
        hits = [replica.prefix_hit(request) for replica in replicas]
        least = min(range(len(replicas)), key=lambda k: (loads[k], k))
        affine = min(range(len(replicas)), key=lambda k: (-hits[k], loads[k], k))
        prompt = replicas[affine].I[request]
        if loads[affine] > self.load_factor * loads[least] + prompt:
            return least
        return affine


__all__ = ["ByAssignment", "LeastOutstandingTokens", "MostFreeMemory", "PrefixAffinity",
           "RoundRobin", "ShortestQueue"]
