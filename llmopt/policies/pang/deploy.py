"""The PD-competition policies of Pang et al. 2025 (``stages``) deployed on a cluster: one
policy per replica, and the router that feeds them (the offline assignment's client, or
round-robin in arrival order without one).

A plan from a solution file (``plan``) is user input: it is checked here, at the boundary,
so that a plan the simulation cannot follow is a solution-file error, never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from llmopt.data.instance import Instance
from llmopt.data.limits import resolve_limits
from llmopt.errors import OptionError, SolutionFileError
from llmopt.policies.base import IterationPolicy, Router
from llmopt.policies.pang.stages import (
    ClientQueues,
    FCFSQueue,
    QueueDiscipline,
    StagePolicy,
    StageQueue,
    Timing,
    eager,
    lagrangian,
)
from llmopt.policies.routing import ByAssignment, RoundRobin
from llmopt.problems.pang import binpacking
from llmopt.problems.pang.kv import footprint
from llmopt.progress import SILENT, Progress
from llmopt.sim.cluster import Deployment

# name -> (queue by local assignment or None, timing rule, needs the offline assignment)
_POLICIES: dict[str, tuple[Any, Timing, bool]] = {
    "baseline": (lambda assign: FCFSQueue(), eager, False),
    "iteration": (lambda assign: FCFSQueue(), lagrangian, False),
    "offline": (lambda assign: ClientQueues(assign), eager, True),
    "online": (lambda assign: ClientQueues(None, "longest", steal=True), eager, False),
    "hybrid": (lambda assign: ClientQueues(assign, "longest", steal=True), lagrangian, True),
}


def deploy(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
           router: Router | None = None, progress: Progress = SILENT) -> Deployment:
    """One :class:`StagePolicy` per replica for policy ``name``."""
    J, replicas = instance.system.clients, instance.system.instances
    queue_of, timing, needs_assignment = _POLICIES[name]
    if needs_assignment:
        client_of = offline_assignment(instance, progress)
        policies: list[IterationPolicy] = [
            StagePolicy(name, queue_of(_local(client_of, e, J)), timing)
            for e in range(replicas)]
        return Deployment(name, policies, router or ByAssignment(client_of, J))
    return Deployment(name, [StagePolicy(name, queue_of(None), timing)
                             for _ in range(replicas)], router or RoundRobin())


def offline_assignment(instance: Instance, progress: Progress = SILENT) -> dict[int, int]:
    """The client of every request in the bin packing of eqs 26–30 (Algorithm 1's I_j), by
    ``binpacking.reproducible_assignment``: optimal whenever bin completion proves it within
    its step budget, and in any case the same on every run, whatever the machine's load (a
    time-limited solve's incumbent would not be)."""
    progress.stage("offline assignment: bin packing (eqs 26–30)")
    assign, _ = binpacking.reproducible_assignment(binpacking.BinPacking.from_instance(instance))
    return {i: int(c) for i, c in enumerate(assign)}


def _local(client_of: Mapping[int, int], replica: int, J: int) -> dict[int, int]:
    """The requests of one replica and their client on it."""
    return {i: c % J for i, c in client_of.items() if c // J == replica}


def deploy_plan(instance: Instance, name: str = "plan", *,
                plan: Mapping[str, Any] | None = None, router: Router | None = None,
                progress: Progress = SILENT) -> Deployment:
    """A solver's plan (its ``assignment``, and its ``order`` or ``stages`` when given) on
    every replica."""
    J, replicas = instance.system.clients, instance.system.instances
    client_of = plan_assignment(instance, plan)
    queues: list[QueueDiscipline]
    stages = plan.get("stages") if plan is not None else None
    if stages is not None:
        check_stages_fit(instance, stages)
        index = {rid: i for i, rid in enumerate(instance.ids)}
        queues = []
        for e in range(replicas):
            local = _local(client_of, e, J)
            own = [([index[r] for r in stage["requests"] if index[r] in local],
                    stage["decode_rounds"]) for stage in stages]
            queues.append(StageQueue(own, local))
    else:
        order = _plan_order(plan)
        queues = [ClientQueues(_local(client_of, e, J),
                               explicit_order=(_local_order(instance, order, client_of, e)
                                               if order is not None else None))
                  for e in range(replicas)]
    policies: list[IterationPolicy] = [StagePolicy(name, q, eager) for q in queues]
    return Deployment(name, policies, router or ByAssignment(client_of, J))


def plan_assignment(instance: Instance, plan: Mapping[str, Any] | None) -> dict[int, int]:
    """The client (0 .. J·replicas − 1) of every request in a solution's ``assignment``."""
    if plan is None:
        raise OptionError("policy plan needs a solution file", field="--plan")
    if not isinstance(plan, Mapping):
        raise SolutionFileError("a plan must be a solution mapping", field="--plan")
    mapping = plan.get("assignment")
    if not isinstance(mapping, dict):
        raise SolutionFileError("must map every request id of the instance to a client",
                                field="assignment", value=mapping)
    odd = [rid for rid in instance.ids if rid not in mapping] + sorted(
        str(rid) for rid in set(mapping) - set(instance.ids))
    if odd:
        raise SolutionFileError("the plan must assign every request of the instance, and only "
                                "those", field="assignment", value=odd[0])
    clients = instance.total_clients
    bad = [rid for rid, c in mapping.items()
           if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < clients]
    if bad:
        raise SolutionFileError(f"client out of range 0..{clients - 1}",
                                field=f"assignment.{bad[0]}", value=mapping[bad[0]])
    return {i: int(mapping[rid]) for i, rid in enumerate(instance.ids)}


def _plan_order(plan: Mapping[str, Any] | None) -> dict[int, list[str]] | None:
    order = (plan or {}).get("order")
    if order is None:
        return None
    if not isinstance(order, dict) or not all(isinstance(v, list) for v in order.values()):
        raise SolutionFileError("order must map clients to lists of request ids", field="order")
    try:
        return {int(c): list(ids) for c, ids in order.items()}
    except ValueError:
        raise SolutionFileError("order must map clients (integers) to lists of request ids",
                                field="order") from None


def _local_order(instance: Instance, order: dict[int, list[str]], client_of: Mapping[int, int],
                 e: int) -> dict[int, list[int]]:
    """The plan's per-client order for replica ``e``; each client's list must be exactly the
    requests the plan assigns to it."""
    J = instance.system.clients
    index = {rid: i for i, rid in enumerate(instance.ids)}
    out: dict[int, list[int]] = {}
    for client in range(e * J, (e + 1) * J):
        rids = order.get(client, [])
        mine = {instance.ids[i] for i, c in client_of.items() if c == client}
        if sorted(map(str, rids)) != sorted(mine):
            stray = sorted(set(map(str, rids)) ^ mine) or rids
            raise SolutionFileError("order must list each request assigned to the client "
                                    "exactly once", field=f"order.{client}", value=stray[0])
        out[client % J] = [index[r] for r in rids]
    return out


def check_stages_fit(instance: Instance, stages: Any) -> None:
    """Every request in exactly one stage; no stage alone over the prefill budget or the KV
    capacity (such a plan cannot be followed)."""
    if not isinstance(stages, list):
        raise SolutionFileError("stages must be a list of {requests, decode_rounds}",
                                field="stages")
    seen: dict[str, int] = {}
    ids = set(instance.ids)
    for k, stage in enumerate(stages):
        reqs = stage.get("requests") if isinstance(stage, dict) else None
        rounds = stage.get("decode_rounds") if isinstance(stage, dict) else None
        if not isinstance(reqs, list) or not isinstance(rounds, int) or isinstance(
                rounds, bool) or rounds < 0:
            raise SolutionFileError("each stage needs requests (a list) and decode_rounds "
                                    "(an integer ≥ 0)", field=f"stages[{k}]")
        for rid in reqs:
            if not isinstance(rid, str) or rid in seen or rid not in ids:
                why = ("is in two stages" if rid in seen else "is not a request id of the "
                       "instance")
                raise SolutionFileError(why, field=f"stages[{k}].requests", value=rid)
            seen[rid] = k
    missing = [rid for rid in instance.ids if rid not in seen]
    if missing:
        raise SolutionFileError("every request must be in one stage", field="stages",
                                value=missing[0])
    index = {rid: i for i, rid in enumerate(instance.ids)}
    limits = resolve_limits(instance)
    most_tokens = limits.prefill_tokens or float("inf")
    most_kv = limits.kv_tokens or float("inf")
    for k, stage in enumerate(stages):
        members = np.array([index[r] for r in stage["requests"]], dtype=np.int64)
        tokens = int(instance.input_tokens[members].sum())
        need = int(footprint(instance.input_tokens[members],
                             instance.output_tokens[members]).sum())
        if tokens > most_tokens or need > most_kv:
            raise SolutionFileError(
                f"stage prefills {tokens} prompt tokens reserving {need} KV tokens; one stage "
                f"may take at most {most_tokens} and {most_kv}", field=f"stages[{k}]")
