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


__all__ = ["ByAssignment", "LeastOutstandingTokens", "MostFreeMemory", "RoundRobin",
           "ShortestQueue"]
