"""The interfaces every scheduler plugs into: iteration policies (one per replica) and routers.

An :class:`IterationPolicy` is asked, at each iteration boundary of its replica, for the next
batch (vLLM V1's ``schedule()`` step): which waiting requests start and with how many prompt
tokens, which running requests decode or continue a chunked prefill, and which are preempted
(evicted, to be recomputed later). It forms the batch through the replica's actions
(``Replica.admit``, ``Replica.evict``, ``Batch.add_chunk``, ``Batch.add_decodes``,
``Batch.add_all_decodes``) and returns it; the replica times it by the cost model and runs it.
The budgets (memory, tokens, prefill tokens, requests) are the policy's choice at every
iteration, within the replica's limits.

Fast path by contract: a replica may run many identical decode-only iterations in one step
(one numpy pass) only when the policy says, through :meth:`IterationPolicy.steady`, that it
would form the same batch again until then. A policy that says nothing is simulated iteration by
iteration.

A :class:`Router` is asked, when a request arrives, which replica takes it; it sees every
replica as it stands then (``Replica`` attributes documented as a view: ``t``, ``n_running``,
``waiting_count``, ``free_kv()``, ``outstanding_tokens``).
"""

from __future__ import annotations

from typing import Protocol

from llmopt.sim.replica import IterationPolicy, Steady


class ReplicaView(Protocol):
    """What a router may read of a replica."""

    index: int
    t: float
    n_running: int

    @property
    def waiting_count(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...

    def free_kv(self) -> float: ...


class Router(Protocol):
    """Chooses the replica of each arriving request."""

    name: str
    reads_state: bool  # the choice depends on the replicas' state

    def route(self, request: int, now: float, replicas: list[ReplicaView]) -> int: ...


__all__ = ["IterationPolicy", "ReplicaView", "Router", "Steady"]
