"""The interfaces the simulation floor offers the schedulers above it: iteration policies (one
per replica), the replica view they read and act on, and routers.

An :class:`IterationPolicy` is asked, at each iteration boundary of its replica, for the next
batch (vLLM V1's ``schedule()`` step): which waiting requests start and with how many prompt
tokens, which running requests decode or continue a chunked prefill, and which are preempted
(evicted, to be recomputed later). It reads its replica through :class:`ReplicaView`, forms the
batch through the view's actions (``new_batch``, ``take_waiting``, ``admit``, ``evict``) and the
batch's own (``Batch.add_chunk``, ``Batch.add_decodes``, ``Batch.add_all_decodes``), and returns
it; the replica times it by the cost model and runs it. The budgets (memory, tokens, prefill
tokens, requests) are the policy's choice at every iteration, within the replica's limits.

Fast path by contract: a replica may run many identical decode-only iterations in one step
(one numpy pass) only when the policy says, through :meth:`IterationPolicy.steady`, that it
would form the same batch again until then. A policy that says nothing is simulated iteration by
iteration.

A :class:`Router` is asked, when a request arrives, which replica takes it; it sees every
replica as it stands then, through :class:`RouterView`.

Request state follows the InferMax CSP's notation (Kim et al. 2025): per request (lists indexed
by the request's position in the instance) I (prompt), O (output), arr (arrival, ms), S (prompt
plus generated tokens), m (KVs cached), gen (tokens generated), status (``PENDING``,
``WAITING``, ``RUNNING``, ``DONE``) and reserve_to (m_reserve, the KVs reserved at admission).
A request decoding in every iteration is advanced lazily: read its m and generated count with
``m_of(i)`` and ``generated(i)``, not from the lists.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    import numpy as np

    from llmopt.data.cost.base import IterationCosts
    from llmopt.data.instance import Instance
    from llmopt.sim.batch import Batch

PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3


class Steady(NamedTuple):
    """A policy's promise for a decode-only batch of every running decoder: it would form the
    same batch for ``rounds`` iterations (``math.inf``: until something else changes), and,
    when ``until_arrival``, only until the next request arrives."""

    rounds: float = math.inf
    until_arrival: bool = True


class RouterView(Protocol):
    """What a router may read of a replica (``I``: every request's prompt tokens)."""

    index: int
    t: float
    n_running: int
    I: list[int]  # noqa: E741

    @property
    def waiting_count(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...

    def free_kv(self) -> float: ...

    def prefix_hit(self, i: int) -> int:
        """Prompt tokens of request ``i`` this replica's prefix cache holds now (0 without
        ``system.prefix_caching``)."""
        ...


class ReplicaView(RouterView, Protocol):
    """What an iteration policy may read of its replica, and the actions it may take (see the
    module doc for the per-request lists). Nothing else of the replica is the policy's."""

    instance: Instance
    profile: IterationCosts
    # limits: client slots J, tokens per batch C and prompt tokens per batch (math.inf when the
    # system gives none), the KV capacity the policy plans with (math.inf when unlimited) and
    # the system's own (None when not given)
    J: int
    C: float
    P_system: float
    M: float
    kv_limit: int | None
    # the KV memory a decode that needs memory takes: 1 token, or a block with a prefix cache
    # (memory then comes in block multiples: free_kv, decode needs, chunk_kv, admission_kv)
    kv_unit: int
    # per request (see the module doc)
    O: list[int]  # noqa: E741
    arr: list[float]
    S: list[int]
    m: list[int]
    gen: list[int]
    status: list[int]
    reserve_to: list[int]
    first_ms: list[float]
    replica_of: list[int]
    # the policy's priority order: rank of each request, request of each rank; the ranks of the
    # waiting requests (sorted) with their reservations alongside, and the reservation of each
    # rank (NO_NEED for a running request); the sorted ranks of the requests in the decode
    # phase when the policy tracks them (``tracks_decode_ranks``), else None
    rank_of: list[int]
    by_rank: list[int]
    waiting: list[int]
    waiting_need: list[int]
    need_by_rank: list[int]
    dec_keys: list[int] | None
    # running requests in a prefill or refill; those evicted while forming this batch
    prefilling: set[int]
    just_evicted: set[int]
    # time: the end of the iteration in flight (or of the last), its start, the decode-only
    # iterations so far and the decode tokens since the last prefill
    last_start: float
    decode_iterations: int
    tokens_since_prefill: int
    # when the policy waits for a time (nothing to run before it), it sets this
    wake_at: float | None

    def running(self) -> list[int]: ...

    def decoders(self) -> list[int]:
        """Running requests in the decode phase."""
        ...

    def n_decoders(self) -> int: ...

    def decoding(self, i: int) -> bool: ...

    def free_clients(self) -> list[int]:
        """The client slots no running request holds, lowest first."""
        ...

    def m_of(self, i: int) -> int: ...

    def generated(self, i: int) -> int: ...

    def held_by(self, i: int) -> int: ...

    def decode_needs(self, i: int) -> int: ...

    def all_decode_needs(self) -> int: ...

    def decode_needs_each(self) -> dict[int, int]: ...

    def decode_kv(self) -> int:
        """KVs cached by the requests in the decode phase (Σ m)."""
        ...

    def chunk_kv(self, i: int, c: int) -> int:
        """New KV memory a chunk of ``c`` tokens of running request ``i`` takes."""
        ...

    def admission_kv(self, i: int, c: int) -> int:
        """Free KV memory admitting waiting request ``i`` with a first chunk of ``c`` tokens
        after its prefix-cache hit takes when it reserves only those tokens."""
        ...

    def cached_kv(self) -> int:
        """KVs cached by every running request (Σ m)."""
        ...

    def new_batch(self, tokens: float, prefill: float) -> Batch:
        """An empty batch with the free KVs (``free_kv()``) and these token budgets."""
        ...

    def take_waiting(self, i: int) -> None: ...

    def admit(self, i: int, c: int, need: int, b: Batch, slot: int | None = None) -> None: ...

    def evict(self, victim: int) -> None: ...


class IterationPolicy:
    """Base class of iteration-level schedulers (see the module doc). Subclasses implement
    :meth:`next_batch`; the rest has defaults."""

    name: str = "policy"
    #: prompt tokens also produce the first output token (InferMax, vLLM); False when the first
    #: token comes from the first decode iteration (Pang et al.'s stage model, eq 8)
    first_token_from_prefill: bool = True
    #: the replica ignores the KV capacity (hypothetical policies such as vllm-unlimited)
    unlimited_memory: bool = False
    #: the replica keeps the ranks of its decode-phase requests sorted (``dec_keys``)
    tracks_decode_ranks: bool = False

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        """Raise :class:`~llmopt.errors.LlmoptError` when the policy cannot run ``instance``
        (a limit it needs is missing, a request can never fit)."""

    def priority_keys(self, instance: Instance) -> np.ndarray:
        """One key per request; the replica keeps its waiting requests sorted by (key,
        arrival, index). Default: arrival (FCFS)."""
        return instance.arrival_ms

    def attach(self, replica: ReplicaView) -> None:
        """Called once before the run."""

    def arrived(self, replica: ReplicaView, i: int) -> None:
        """Request ``i`` was routed to this replica (it is in ``replica.waiting`` already)."""

    def finished(self, replica: ReplicaView, i: int) -> None:
        """Request ``i`` finished."""

    def reservation(self, replica: ReplicaView, i: int) -> int:
        """KV tokens waiting request ``i`` reserves when it starts (m_reserve): by default its
        prompt (or, after an eviction, everything it must recompute)."""
        return replica.S[i]

    def next_batch(self, replica: ReplicaView) -> Batch | None:
        """The next iteration's batch, or None when nothing can run now."""
        raise NotImplementedError

    def steady(self, replica: ReplicaView, batch: Batch) -> Steady | None:
        """For a decode-only batch of every running decoder, whether (and how long) the
        policy would form it again; None: no promise, simulate the next iteration on its own."""
        return None


class Router(Protocol):
    """Chooses the replica of each arriving request."""

    name: str
    reads_state: bool  # the choice depends on the replicas' state

    def route(self, request: int, now: float, replicas: list[RouterView]) -> int: ...


__all__ = ["DONE", "PENDING", "RUNNING", "WAITING", "IterationPolicy", "ReplicaView", "Router",
           "RouterView", "Steady"]
