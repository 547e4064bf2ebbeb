"""Replay: turn policies and solver plans into timed schedules under one cost model.

``replay(instance, "hybrid")`` simulates every model instance of the system with the policy and
returns a :class:`~llmopt.schedule.Schedule`; ``replay_result`` wraps it in a solution
:class:`~llmopt.result.Result` (problem ``replay``). Requests are routed to model instances by
the policy's client assignment (client c of the J × instances slots lives on instance c // J),
or round-robin in arrival order for policies without one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from llmopt.errors import OptionError, SolutionFileError
from llmopt.instance import Instance
from llmopt.kv import footprint
from llmopt.limits import resolve_limits
from llmopt.progress import SILENT, Progress
from llmopt.replay.continuous import ContinuousEngine
from llmopt.replay.pd import PDEngine, PDPolicy
from llmopt.replay.policies import pang
from llmopt.replay.policies.infermax import SCHEDULERS
from llmopt.replay.recorder import merge
from llmopt.result import Result
from llmopt.schedule import Schedule

PD_POLICIES = ("baseline", "offline", "online", "iteration", "hybrid", "plan")
DEFAULT_POLICIES = ("baseline", "offline", "online", "hybrid")


def policy_names() -> tuple[str, ...]:
    return PD_POLICIES + tuple(SCHEDULERS)


def mode_of(policy: str) -> str:
    """``pd_competition`` for the Pang policies, ``continuous`` for InferMax's schedulers."""
    return "continuous" if policy in SCHEDULERS else "pd_competition"


def replay(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
           binpacking_time_limit_s: float = 30.0, progress: Progress = SILENT) -> Schedule:
    """Simulate ``instance`` under ``policy``; ``plan`` is a solution dict for policy ``plan``."""
    if policy not in policy_names():
        raise OptionError(f"unknown policy (known: {', '.join(policy_names())})",
                          field="--policy", value=policy)
    if policy in SCHEDULERS:
        return _replay_continuous(instance, SCHEDULERS[policy], progress)
    J = instance.system.clients
    assignment = _global_assignment(instance, policy, plan, binpacking_time_limit_s, progress)
    order = _plan_order(instance, plan) if policy == "plan" else None
    stages = (plan or {}).get("stages") if policy == "plan" else None
    if stages is not None:
        _check_stages_fit(instance, stages)
    schedules = []
    for e, members in enumerate(_route(instance, assignment)):
        local_assign = ({k: int(assignment[m]) % J for k, m in enumerate(members)}
                        if assignment is not None else None)
        local_order = (_local_order(order, instance.ids, members, J, e, assignment)
                       if order is not None and assignment is not None else None)
        progress.stage(f"replaying {policy} on instance {e} ({len(members)} requests)")
        if stages is not None:
            chosen: PDPolicy = pang.StagePlan(_local_stages(stages, instance.ids, members),
                                                   local_assign or {})
        else:
            chosen = _make_policy(policy, local_assign, local_order)
        engine = PDEngine(instance, chosen, members, instance_index=e)
        schedules.append(engine.run())
    return merge(schedules, policy, J * instance.system.instances)


def _replay_continuous(instance: Instance, config, progress: Progress) -> Schedule:
    """Continuous batching on every model instance; requests dealt round-robin in arrival
    order (the usual routing of serving systems)."""
    schedules = []
    for e, members in enumerate(_route(instance, None)):
        progress.stage(f"replaying {config.name} on instance {e} ({len(members)} requests)")
        schedules.append(ContinuousEngine(instance, config, members, instance_index=e).run())
    return merge(schedules, config.name, instance.system.clients * instance.system.instances)


def _make_policy(name: str, assign: dict[int, int] | None,
                 order: dict[int, list[int]] | None) -> pang.Policy:
    factories: dict[str, Callable[[], pang.Policy]] = {
        "baseline": lambda: pang.Policy(name, pang.FCFSQueue(), pang.eager),
        "iteration": lambda: pang.Policy(name, pang.FCFSQueue(), pang.lagrangian),
        "offline": lambda: pang.Policy(name, pang.ClientQueues(assign), pang.eager),
        "online": lambda: pang.Policy(name, pang.ClientQueues(None, "longest", steal=True),
                                      pang.eager),
        "hybrid": lambda: pang.Policy(name, pang.ClientQueues(assign, "longest", steal=True),
                                      pang.lagrangian),
        "plan": lambda: pang.Policy(name, pang.ClientQueues(assign, explicit_order=order),
                                    pang.eager),
    }
    return factories[name]()


def _global_assignment(instance: Instance, policy: str, plan: Mapping[str, Any] | None,
                       time_limit_s: float, progress: Progress) -> np.ndarray | None:
    """Client (0 .. J·instances − 1) per request for assignment-based policies, else None."""
    if policy in ("offline", "hybrid"):
        from llmopt.formulations import binpacking

        progress.stage("offline assignment: bin packing (eqs 26–30)")
        result = binpacking.solve(instance, "auto", time_limit_s, progress)
        mapping = result.data["assignment"]
        return np.array([mapping[rid] for rid in instance.ids], dtype=np.int64)
    if policy == "plan":
        if plan is None:
            raise OptionError("policy plan needs a solution file", field="--plan")
        if not isinstance(plan, Mapping):
            raise SolutionFileError("a plan must be a solution mapping", field="--plan")
        mapping = plan.get("assignment")
        if not isinstance(mapping, dict) or set(mapping) != set(instance.ids):
            raise SolutionFileError("the plan must assign every request of the instance",
                                    field="assignment")
        clients = instance.total_clients
        bad = [rid for rid, c in mapping.items() if not isinstance(c, int) or not 0 <= c < clients]
        if bad:
            raise SolutionFileError(f"client out of range 0..{clients - 1}",
                                    field=f"assignment.{bad[0]}", value=mapping[bad[0]])
        return np.array([mapping[rid] for rid in instance.ids], dtype=np.int64)
    return None


def _route(instance: Instance, assignment: np.ndarray | None) -> list[np.ndarray]:
    n_inst = instance.system.instances
    if assignment is not None:
        owner = assignment // instance.system.clients
    else:
        order = np.argsort(instance.arrival_ms, kind="stable")
        owner = np.empty(instance.num_requests, dtype=np.int64)
        owner[order] = np.arange(instance.num_requests) % n_inst
    return [np.flatnonzero(owner == e) for e in range(n_inst)]


def _plan_order(instance: Instance, plan: Mapping[str, Any] | None) -> dict[int, list[str]] | None:
    order = (plan or {}).get("order")
    if order is None:
        return None
    if not isinstance(order, dict):
        raise SolutionFileError("order must map clients to lists of request ids", field="order")
    return {int(c): list(ids) for c, ids in order.items()}


def _local_order(order: dict[int, list[str]], ids: list[str], members: np.ndarray, J: int,
                 e: int, assignment: np.ndarray) -> dict[int, list[int]]:
    """The plan's per-client order for model instance ``e``, in the engine's local indices;
    each client's list must be exactly the requests the plan assigns to it."""
    local = {ids[m]: k for k, m in enumerate(members)}
    out: dict[int, list[int]] = {}
    for client in range(e * J, (e + 1) * J):
        rids = order.get(client, [])
        mine = {ids[m] for m in members if assignment[m] == client}
        if sorted(rids) != sorted(mine):
            stray = sorted(set(rids) ^ mine) or rids
            raise SolutionFileError("order must list each request assigned to the client "
                                    "exactly once", field=f"order.{client}", value=stray[0])
        out[client % J] = [local[r] for r in rids]
    return out


def _check_stages_fit(instance: Instance, stages: Any) -> None:
    """Every request in exactly one stage; no stage alone over the prefill budget or the KV
    capacity (such a plan cannot be followed)."""
    if not isinstance(stages, list):
        raise SolutionFileError("stages must be a list of {requests, decode_rounds}",
                                field="stages")
    seen: dict[str, int] = {}
    for k, stage in enumerate(stages):
        reqs = stage.get("requests") if isinstance(stage, dict) else None
        if not isinstance(reqs, list):
            raise SolutionFileError("each stage needs requests (a list) and decode_rounds "
                                    "(an integer ≥ 0)", field=f"stages[{k}]")
        for rid in reqs:
            if not isinstance(rid, str) or rid in seen or rid not in instance.ids:
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
        members = [index[r] for r in stage["requests"]]
        tokens = int(instance.input_tokens[members].sum())
        need = int(footprint(instance.input_tokens[members],
                             instance.output_tokens[members]).sum())
        if tokens > most_tokens or need > most_kv:
            raise SolutionFileError(
                f"stage prefills {tokens} prompt tokens reserving {need} KV tokens; one stage "
                f"may take at most {most_tokens} and {most_kv}", field=f"stages[{k}]")


def _local_stages(stages: Any, ids: list[str], members: np.ndarray
                  ) -> list[tuple[list[int], int]]:
    """A plan's stages (request ids, decode rounds after) in one engine's local indices; stages
    of other model instances contribute their decode rounds only."""
    if not isinstance(stages, list):
        raise SolutionFileError("stages must be a list of {requests, decode_rounds}",
                                field="stages")
    local = {ids[m]: k for k, m in enumerate(members)}
    out = []
    for k, stage in enumerate(stages):
        if not isinstance(stage, dict) or not isinstance(stage.get("requests"), list) \
                or not isinstance(stage.get("decode_rounds"), int) or stage["decode_rounds"] < 0:
            raise SolutionFileError("each stage needs requests (a list) and decode_rounds "
                                    "(an integer ≥ 0)", field=f"stages[{k}]")
        out.append(([local[r] for r in stage["requests"] if r in local],
                    stage["decode_rounds"]))
    return out


def replay_result(instance: Instance, policy: str, *, plan: Mapping[str, Any] | None = None,
                  progress: Progress = SILENT) -> tuple[Result, Schedule]:
    """Replay and wrap the schedule as a solution (problem ``replay``, solver = policy)."""
    from llmopt import __version__

    t0 = time.perf_counter()
    schedule = replay(instance, policy, plan=plan, progress=progress)
    runtime = time.perf_counter() - t0
    metrics = schedule.metrics()
    result = Result(
        problem="replay", solver=policy, status="feasible",
        objective=round(metrics["makespan_ms"], 3), bound=None, runtime_s=runtime,
        time_limit_s=None, solver_version=f"llmopt {__version__} replay",
        data={"mode": mode_of(policy), "clients": instance.total_clients,
              "metrics": metrics, "segments": schedule.segments_records(),
              "iterations": schedule.iterations_columns()},
    )
    if policy in SCHEDULERS and SCHEDULERS[policy].unlimited_memory:
        result.data["unlimited_memory"] = True
        result.notes.append("a hypothetical schedule: the KV capacity is ignored")
    return result, schedule
