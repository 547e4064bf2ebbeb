"""The cluster: one event clock over all replicas.

Events are request arrivals and replicas becoming ready for their next iteration. They are taken
in time order (an arrival before a replica ready at the same instant, so that a request arriving
at t can join the batch formed at t); ties between replicas go to the lower index. An arrival is
routed at once by the router, which sees every replica as it stands: a replica's state includes
the iteration in flight at that instant (state advances when an iteration is formed), so a
request routed at t sees the load each replica will have when it next forms a batch. A replica
that has nothing to run sleeps until a request is routed to it (or until the time its policy
asked to be woken, ``Replica.wake_at``). Requests left unfinished when no event remains mean the
policy cannot make progress: an internal error.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmopt.data.instance import Instance
from llmopt.data.limits import block_size
from llmopt.data.prefix import PrefixIndex
from llmopt.errors import InternalError
from llmopt.progress import SILENT, Progress
from llmopt.schedule import Schedule
from llmopt.sim.clock import Clock
from llmopt.sim.policy import DONE, IterationPolicy, Router
from llmopt.sim.prefix_replica import PrefixReplica
from llmopt.sim.replica import Replica, RequestState

ARRIVAL, READY = 0, 1  # the clock's events: an arrival goes first at the same instant
SAME_INSTANT_MS = 1e-9  # a replica ready this close before an arrival waits for it


@dataclass
class Deployment:
    """What runs: one iteration policy per replica and the router that feeds them."""

    name: str
    policies: Sequence[IterationPolicy]
    router: Router


def simulate(instance: Instance, deployment: Deployment, *, fast: bool = True,
             progress: Progress = SILENT) -> Schedule:
    """Run ``deployment`` on ``instance`` (``system.instances`` replicas) and return the timed
    schedule. ``fast=False`` simulates every iteration on its own (no promised runs)."""
    n_rep = instance.system.instances
    if len(deployment.policies) != n_rep:
        raise InternalError(f"{len(deployment.policies)} policies for {n_rep} replicas")
    state = RequestState.of(instance)
    keys = deployment.policies[0].priority_keys(instance)
    n = instance.num_requests
    by_rank = np.lexsort((np.arange(n), instance.arrival_ms, keys)).tolist()
    rank_of = [0] * n
    for r, i in enumerate(by_rank):
        rank_of[i] = r
    replicas = _replicas(instance, deployment, state, rank_of, by_rank, fast)
    if n_rep > 1 and getattr(deployment.router, "reads_state", True):
        for replica in replicas:  # the router's view must be the state at each arrival
            replica.stop_at_arrivals = True
    for replica in replicas:
        replica.policy.check(instance, replica)
        replica.policy.attach(replica)
    progress.stage(f"simulating {deployment.name} on {n_rep} replica(s), {n} requests")
    with _collector_paused():
        _run(replicas, state, deployment.router)
    for replica in replicas:
        if isinstance(replica, PrefixReplica):
            replica.check_drained()
    return _schedule(instance, replicas, state, deployment.name)


def _replicas(instance: Instance, deployment: Deployment, state: RequestState,
              rank_of: list[int], by_rank: list[int], fast: bool) -> list[Replica]:
    """One replica per policy; with ``system.prefix_caching`` each keeps a prefix cache
    (:class:`~llmopt.sim.prefix_replica.PrefixReplica`), the prompts' block keys shared."""
    policies = deployment.policies
    if not instance.system.prefix_caching:
        return [Replica(k, instance, state, policy, rank_of, by_rank, fast)
                for k, policy in enumerate(policies)]
    prefix = PrefixIndex(instance.requests, block_size(instance))
    keys: dict[int, np.ndarray] = {}
    return [PrefixReplica(k, instance, state, policy, rank_of, by_rank, fast, prefix, keys)
            for k, policy in enumerate(policies)]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the clock runs: the loop allocates millions of
    short-lived, acyclic tuples and lists (freed by reference counting), and each generation-0
    pass would otherwise rescan everything the process holds."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run(replicas: list[Replica], state: RequestState, router: Router) -> None:
    clock = Clock(state.arr, arrival_kind=ARRIVAL, tolerance_ms=SAME_INSTANT_MS)
    if len(replicas) == 1:
        _run_one(replicas[0], state, clock)
        return
    awake = [False] * len(replicas)
    while clock:
        t, kind, k = clock.pop()
        if kind == READY:
            replica = replicas[k]
            if replica.step(clock.next_arrival_ms()):
                clock.push(replica.t, READY, k, key=k)
            elif replica.wake_at is not None:
                replica.t, replica.wake_at = max(replica.t, replica.wake_at), None
                clock.push(replica.t, READY, k, key=k)
            else:
                awake[k] = False
            continue
        i = k
        k = router.route(i, t, replicas)  # type: ignore[arg-type]
        replica = replicas[k]
        replica.enqueue(i)
        if not awake[k]:
            awake[k] = True
            replica.t = max(replica.t, t)
            clock.push(replica.t, READY, k, key=k)
    for replica in replicas:
        if any(state.status[i] != DONE for i in replica.members):
            _stuck(replica)


def _run_one(replica: Replica, state: RequestState, clock: Clock) -> None:
    """``_run`` for one replica: the same events in the same order, the clock's arrivals taken
    at once and the replica's ready times kept here (a replay of a trace takes millions of
    steps: no heap, no call per step)."""
    arr, arrivals, same = state.arr, clock.take_all_arrivals(), SAME_INSTANT_MS
    n, nxt = len(arrivals), 0
    awake = False
    while True:
        t_arrival = arr[arrivals[nxt]] if nxt < n else math.inf
        if awake and replica.t < t_arrival - same:
            if replica.step(t_arrival if nxt < n else None):
                continue
            if replica.wake_at is not None:
                replica.t, replica.wake_at = max(replica.t, replica.wake_at), None
            else:
                awake = False
            continue
        if nxt >= n:
            break
        replica.enqueue(arrivals[nxt])
        nxt += 1
        if not awake:
            awake = True
            replica.t = max(replica.t, t_arrival)
    if any(state.status[i] != DONE for i in replica.members):
        _stuck(replica)


def _stuck(replica: Replica) -> None:
    ids = replica.instance.ids
    stuck = [ids[i] for i in replica.members if replica.status[i] != DONE][:3]
    raise InternalError(f"{replica.instance.label()}: {replica.policy.name} cannot make "
                        f"progress on replica {replica.index}, e.g. {stuck}")


def _schedule(instance: Instance, replicas: list[Replica], state: RequestState,
              name: str) -> Schedule:
    ids = list(instance.ids)
    segments, iterations = [], []
    for replica in replicas:
        seg, its = replica.tables(ids)
        segments.append(seg)
        iterations.append(its)
    order = [i for replica in replicas for i in sorted(replica.members)]
    requests = pd.DataFrame({
        "request": [ids[i] for i in order],
        "instance": [state.replica[i] for i in order],
        "client": [state.last_slot[i] for i in order],
        "input_tokens": [state.I[i] for i in order],
        "output_tokens": [state.O[i] for i in order],
        "arrival_ms": [state.arr[i] for i in order],
        "first_token_ms": [state.first_ms[i] for i in order],
        "finish_ms": [state.finish_ms[i] for i in order],
        "evictions": [state.evictions[i] for i in order],
    })
    prefix_block = 0
    if instance.system.prefix_caching:
        prefix_block = block_size(instance)
        requests["cached_tokens"] = [state.cached_first[i] for i in order]
        requests["refill_cached_tokens"] = [state.cached_total[i] - state.cached_first[i]
                                            for i in order]
    if len(replicas) == 1:
        seg, its = segments[0], iterations[0]
    else:  # a replica that ran nothing has untyped empty tables: left out of the concat
        seg = pd.concat([t for t in segments if len(t)] or segments[:1], ignore_index=True)
        its = pd.concat([t for t in iterations if len(t)] or iterations[:1], ignore_index=True)
    return Schedule(policy=name, segments=seg, iterations=its, requests=requests,
                    clients=instance.system.clients * len(replicas), prefix_block=prefix_block)
