"""Algorithm 2 of Huang et al. 2025 (section 4.4), planning part: requests are assigned to the
model instances, then each instance's requests get their own priority mapping (Algorithm 1, or
the exact model), and G (eq 2) is taken over all requests: Σ n / Σ t.

Instance assignment (InstAssign, line 4): requests in input order, each to the instance with the
largest remaining memory, in tokens (eq 20: token_num(m) = m·μ/σ; here ``system.kv_capacity``,
already in tokens, per instance). When that instance cannot hold the request (input + output
tokens), every instance's remaining memory is reset to its capacity ("a maximum possible number
of requests have been allocated and a fresh iteration starts") and the request goes to the one
with the most, as the paper describes. A request larger than an instance's whole memory is an
error.

Each instance then runs its batches one after another from time 0, independently of the others
(the paper's instance queues). ``replayed.replay_cluster_plan`` serves a ``ClusterPlan`` on the
simulation core, the instances on one cluster clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmopt.errors import InstanceError
from llmopt.problems.slo_priority import sa
from llmopt.problems.slo_priority.exact import solve_exact
from llmopt.problems.slo_priority.model import Batches, SloPriorityData, evaluate, g_per_s


def assign_instances(data: SloPriorityData, capacity_tokens: list[int]) -> list[list[int]]:
    """InstAssign: the request indices of each instance, in input order (see the module doc)."""
    if not capacity_tokens or any(c < 1 for c in capacity_tokens):
        raise InstanceError("every instance needs a positive memory (tokens)",
                            field="system.kv_capacity", value=capacity_tokens)
    remaining = list(capacity_tokens)
    out: list[list[int]] = [[] for _ in capacity_tokens]
    for i in range(data.n):
        need = data.input_tokens[i] + data.output_tokens[i]
        if need > max(capacity_tokens):
            raise InstanceError(f"needs {need} tokens, more than any instance's memory "
                                f"({max(capacity_tokens)})", field=f"request {data.ids[i]}",
                                value=need)
        k = max(range(len(remaining)), key=lambda j: (remaining[j], -j))
        if remaining[k] < need:  # the reset rule
            remaining = list(capacity_tokens)
            k = max(range(len(remaining)), key=lambda j: (remaining[j], -j))
        out[k].append(i)
        remaining[k] -= need
    return out


def subset(data: SloPriorityData, members: list[int]) -> SloPriorityData:
    """The problem restricted to ``members`` (re-indexed 0..len−1 in that order)."""
    def pick(xs: list) -> list:
        return [xs[i] for i in members]
    return replace(data, ids=pick(data.ids), input_tokens=pick(data.input_tokens),
                   output_tokens=pick(data.output_tokens), ttft_slo_ms=pick(data.ttft_slo_ms),
                   tpot_slo_ms=pick(data.tpot_slo_ms), e2e_slo_ms=pick(data.e2e_slo_ms),
                   slo_class=pick(data.slo_class), prefill_ms=pick(data.prefill_ms),
                   decode_ms=pick(data.decode_ms), exec_ms=pick(data.exec_ms),
                   slack_ms=pick(data.slack_ms), warnings=[])


@dataclass(frozen=True)
class ClusterPlan:
    members: list[list[int]]          # request indices per instance
    batches: list[Batches]            # per instance, in the instance's own indices
    n_met: int
    total_ms: float

    @property
    def g_per_s(self) -> float:
        return g_per_s(self.n_met, self.total_ms)


def plan_cluster(data: SloPriorityData, capacity_tokens: list[int], solver: str = "sa",
                 seed: int = 0, time_limit_s: float = 10.0) -> ClusterPlan:
    """Algorithm 2's planning: assignment, then per instance ``sa`` (Algorithm 1) or ``cpsat``
    (the exact optimum of each instance's requests; the assignment itself is the paper's, so
    the cluster's G is not an optimum over assignments)."""
    members = assign_instances(data, capacity_tokens)
    plans: list[Batches] = []
    met, total = 0, 0.0
    for idx in members:
        if not idx:
            plans.append(())
            continue
        sub = subset(data, idx)
        plan = sa.anneal(sub, seed=seed).batches
        if solver == "cpsat":
            plan = solve_exact(sub, plan, time_limit_s).batches
        ev = evaluate(sub, plan)
        plans.append(plan)
        met, total = met + ev.n_met, total + ev.total_ms
    return ClusterPlan(members, plans, met, total)
