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

import numpy as np

from llmopt.errors import InstanceError
from llmopt.problems.slo_priority import sa
from llmopt.problems.slo_priority.exact import (
    max_met_bound,
    solve_exact,
    total_latency_lower_bound,
)
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


CLUSTER_BOUND_PROOF = (
    "G ≤ n / t with n at most the requests meeting their SLOs together on W instances (those "
    "that can alone, and Moore–Hodgson on p = e/(W·B)) and t at least Σ e + Σ_j e_(j)·(N − "
    "j·W·B)+ (at most W·B requests in each round of batches; the j-th shortest round lasts at "
    "least e_(j)); over every split of the requests among the W instances and every plan of "
    "each, timed by eqs 14–17")


def cluster_latency_lower_bound(data: SloPriorityData, instances: int) -> float:
    """A lower bound (ms) on t (eq 3) over every plan of Algorithm 2 on W = ``instances`` model
    instances: any split of the requests, each instance running its batches (at most B
    requests each) one after another from time 0. With e_i = min_s t_exec,i(s) (s ≤ B) sorted
    e_(1) ≤ … ≤ e_(N): t ≥ Σ_i e_i + Σ_{j ≥ 1} e_(j)·max(0, N − j·W·B).

    Why. t = Σ_i (wait_i + t_exec,i) ≥ Σ e_i + Σ_i wait_i (eqs 3–4). Call round r the r-th
    batches of the instances (at most W of them); a request in round r waits for the batches of
    rounds 1 … r − 1 on its instance. So Σ wait = Σ_r Σ_(β in round r) D_β·A_β, A_β the
    requests after β on its instance, and Σ_(β in round r) A_β = the requests in rounds after r
    ≥ N − r·W·B (each round holds at most W·B). With D_r the shortest duration of round r,
    Σ wait ≥ Σ_r D_r·(N − r·W·B)+, the coefficients fall with r, so pairing them with the D_r in
    ascending order bounds it from below (rearrangement), and the j-th shortest of the D_r is at
    least e_(j): j distinct batches, each with a member whose e is at most its duration. At
    W = 1 the one-instance bound (``total_latency_lower_bound``, tighter) is used."""
    if instances <= 1:
        return float(total_latency_lower_bound(data))
    B = data.max_batch
    e = np.sort(np.asarray([min(row[1:B + 1]) for row in data.exec_ms], dtype=float))
    j = np.arange(1, len(e) + 1)
    return float(e.sum() + (e * np.maximum(len(e) - j * instances * B, 0)).sum())


def cluster_g_bound(data: SloPriorityData, instances: int) -> float:
    """An upper bound on G (requests/s) over every plan of Algorithm 2 on ``instances`` model
    instances (any split of the requests, each instance's plan of static batches of at most B,
    timed by eqs 14–17): (``CLUSTER_BOUND_PROOF``) the requests that can meet their SLOs
    together on the W instances (``exact.max_met_bound`` with W, never more than those that can
    alone) over ``cluster_latency_lower_bound``. Both hold for every such plan, so their ratio
    bounds n / t for each."""
    meetable = min(data.n - len(data.unmeetable), max_met_bound(data, instances))
    return g_per_s(meetable, cluster_latency_lower_bound(data, instances))
