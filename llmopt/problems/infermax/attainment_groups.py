"""A schedule for the attainment bound (``llmopt.problems.infermax.attainment``) from independent
groups: the requests with deadlines cut, in arrival order, into groups each of whose requests all
meet their SLOs in a schedule of that group alone ending before the next group's first arrival;
the groups' plans joined then meet every SLO.

Why. The model over a dozen requests has N ≈ 50 batches, and CP-SAT often finds no schedule
meeting every SLO within seconds even where one exists (seen: none in 240 s with 8 workers on an
instance whose two halves, solved apart, meet every SLO in about a second each); the replay
policies serve every request as it comes, and an early request still decoding when a burst
arrives costs the burst its TTFT. A group is small (N ≈ 20), and "can every request of it meet its
SLOs with every batch ending by the next arrival?" is a question of feasibility CP-SAT answers in
about a second. It is a heuristic for the schedule, not a bound: where it finds no such cut, the
instance is left to the model as before.

Cuts. A cut before request k is a candidate when every request before it could finish by k's
arrival alone (its prompt and later tokens with the machine to itself: necessary). The requests
between candidate cuts form the groups, the last one ending by its own deadlines. A group whose
answer is a proven "no" is merged into the next one; when a question is not answered within
GROUP_TIME_S (or the time left), the search stops and the time goes to the model over every
request.
"""

from __future__ import annotations

import math
import time

from llmopt.problems.infermax.attainment_data import Data, Plan, alone_finish_ms, walk
from llmopt.problems.infermax.attainment_model import build_model, plan_from_values, run_cpsat
from llmopt.progress import SILENT, Progress

GROUP_TIME_S = 3.0  # at most, for one group's question (1–2 s answered those of 7 requests)


def candidate_cuts(data: Data, order: list[int]) -> list[int]:
    """Positions k in ``order`` (arrival order) where every request before could finish by
    request order[k]'s arrival alone."""
    cuts, latest = [], -math.inf
    for k, i in enumerate(order):
        if k and latest <= data.T_ms[i]:
            cuts.append(k)
        latest = max(latest, float(data.T_ms[i]) + alone_finish_ms(data, i))
    return cuts


def every_slo_met(data: Data, group: list[int], H: int, time_limit_s: float,
                  workers: int) -> tuple[Plan | None, bool]:
    """(a plan of ``group`` alone meeting every SLO of it with every batch ending by H (clock
    units) if CP-SAT finds one within the time limit, whether CP-SAT proved there is none)."""
    sub = data.subset(group)
    N = max(1, (H - min(sub.T)) // sub.min_batch())
    md, var = build_model(sub, N, H)
    met = [m for m in var["met"] if m is not None]
    md.clear_objective()
    md.add(sum(met) >= len(met))
    out = run_cpsat(md, time_limit_s, workers,
                    collect=lambda value: plan_from_values(sub, var, N, value))
    found: Plan | None = out.solution
    return found, out.ending == "infeasible"


def group_plan(data: Data, chosen: list[int], time_limit_s: float, workers: int,
               progress: Progress = SILENT) -> Plan | None:
    """The joined plan of the module doc (the groups' batches only), or None when the groups
    found do not cover every request of ``chosen`` within ``time_limit_s``."""
    until = time.perf_counter() + time_limit_s
    order = sorted(chosen, key=lambda i: (data.T[i], i))
    bounds = [0, *candidate_cuts(data, order), len(order)]
    if len(bounds) < 3:
        return None      # one group: the model over every request, as without groups
    plan: Plan = []
    start = 0
    for stop in bounds[1:]:
        left = until - time.perf_counter()
        if left < 0.1:
            return None
        group = order[start:stop]
        last = stop == len(order)
        deadlines = [d for i in group if (d := data.deadline(i)) is not None]
        H = max(deadlines) if last else min(max(deadlines), data.T[order[stop]])
        progress.stage(f"a schedule by independent groups: requests {start + 1}–{stop} of "
                       f"{len(order)}")
        found, none = every_slo_met(data, group, H, min(left, GROUP_TIME_S), workers)
        if found is None and none and not last:
            continue     # proven impossible by the next arrival: merged into the next group
        if found is None:
            return None  # the time left goes to the model over every request
        plan += found
        # a request with a first-token target only may still hold KVs: evicted (served after
        # every group), so that the next group has the memory its model assumes
        states = walk(data, plan)
        holding = [data.ids[i] for i in range(data.n) if states and states[-1]["m"][i] > 0]
        if holding:
            plan.append({"evict": holding, "prefill": {}, "decode": []})
        start = stop
    return plan


__all__ = ["candidate_cuts", "every_slo_met", "group_plan"]
