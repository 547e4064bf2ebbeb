"""An exact upper bound on SLO attainment: the InferMax CSP (Kim et al. 2025, section 5) with the
objective "the most requests meeting all their SLO targets" instead of total latency.

``attainment_bound(instance)`` returns a proven upper bound on how many requests meet their SLOs
(``met_upper``) over every schedule of batches one model instance can run under the InferMax
cost model, the memory limit M, the token budget C, the running-request limit J and the
arrivals, with the semantics of the replay of a plan of batches (``llmopt.sim.replica``,
``llmopt.policies.infermax.planned``): the prefill (or a refill) generates a token once it has
processed everything uncached, a request decodes O − 1 times and holds at most I + O − 1 KVs, an
evicted request frees its KVs and recomputes them, and a batch starts when the previous one ends
or, if later, when the last of its requests arrives (no other idle time). It also returns the
best schedule found (``met_best``, counted by replaying its plan) and that plan, which the
``plan`` policy replays. Status ``optimal`` when the replayed count equals the bound.

Model (CP-SAT). Requests i, batches j = 1..N (j = 0 the initial state). The state per request and
batch is the CSP's (``llmopt.problems.infermax.state``, ``Eviction.BEFORE_BATCH``). Variables per
request and batch, as in the paper: S_ij (prompt and generated tokens after batch j), m_ij
(cached KVs after batch j), c_ij (tokens processed), g_ij (a token generated), e_ij (evicted
before batch j); per batch its start and end; per request met_i, maximized. Constraints, all
exact:

- non-decreasing sequence length: S_ij = S_i,j−1 + g_ij;
- memory management (eq 1): the KVs before batch j are 0 if evicted (a running request, m ≥ 1),
  else m_i,j−1; m_ij = those + c_ij, and 0 once the request is done. As in the replay, a
  request evicted before batch j may start again in it (with eq 2 as printed it could not);
- tokens to process (eq 2): c_ij ≤ S_i,j−1 − (the KVs before batch j); nothing once done;
- token generation (eq 3): g_ij = 1 exactly when c_ij is everything uncached;
- batch constraints (eq 4): Σ_i c_ij ≤ C, and the KVs held in batch j by the requests not
  evicted (before plus c_ij; a finishing request holds them in its last batch) ≤ M; and, which
  the paper omits, at most J requests hold KVs (the running ones, vLLM's max_num_seqs);
- phases (omitted in the paper): a decode is the one uncached token of a request that has
  generated a token; every other chunk is a prefill or refill chunk;
- online setting (the paper's Acc_j): batch j starts at max(end of batch j − 1, the arrival of
  each request processing tokens in it) and lasts its InferMax batch time (section 3.2): bias +
  per_token·Σc + decode_kv·Σ_decode m + prefill_attention·Σ_prefill (c² + 2mc) +
  per_prefill_request·(prefill chunks), with c² + 2mc = c·(2m + c) a product of integers;
- termination (the paper's Σ_j g_ij = O_i) is replaced by the SLO obligations: a request counted
  as met reaches within the N batches its first token (TTFT target) and its last (TPOT or E2E
  target), with TTFT = first − arrival ≤ target, E2E = finish − arrival ≤ target and
  finish − first ≤ (O − 1)·TPOT target, each within the 1e-6 ms of ``schedule.metrics``. Other
  requests may be processed in the N batches, partly or not at all.

Why N batches and unfinished requests lose nothing:

- a schedule's batches up to the one completing the last obligation it meets end by H, the
  latest deadline (arrival + E2E target, or arrival + TTFT + (O − 1)·TPOT targets, or arrival +
  TTFT target when that is the only one), and each takes at least bias + per_token: there are at
  most N = ⌊(H − first arrival) / (bias + per_token)⌋ of them. So every schedule has such a
  prefix among the model's solutions (in which every batch ends by H and the last non-empty one
  completes an obligation: redundant, it only removes useless tails);
- a solution extends to a whole schedule with the same requests meeting their SLOs: evict what
  still runs, then serve each unfinished request alone (prompt or refill in chunks of C, then its
  decodes), which fits M, C and J whenever every request fits alone (I + O − 1 ≤ M; else no
  schedule exists and the instance is refused). Nothing before changes.

Requests outside the model's objective: one without a target (or with only a TPOT target and a
single output token) meets its SLO in every schedule; one with only a TPOT target has no
deadline and is counted as met when, alone, its later tokens can meet the target (each needs a
batch of its own: a decode, or the end of a refill; served last and alone it decodes, which is
exact unless a refill is faster than a decode for it, when the count is a relaxation; the model
does not make it finish); one that cannot meet its targets even alone (its prompt and its later
tokens alone take too long) is never met. The chunked-prefill budget P is not a constraint: the
replay of a plan does not enforce it and some policies use their own, so the bound holds with
or without it.

Time. Batch costs are exact integers in 10^-k ms, k the decimals of the cost coefficients (at
most 12). The model's clock counts 10^-k' ms, k' ≤ k the largest keeping the horizon within
CLOCK_UNITS: with larger numbers (time domains near 1e12 next to coefficients near 1e10) CP-SAT's
presolve was seen to return a wrong optimum. When k' < k each batch lasts ⌊cost / 10^(k−k')⌋
clock units, and arrivals and targets are rounded likewise; then every target gets the largest
rounding error over N batches as slack (``exact`` is False): the bound stays valid, and a plan
the model counts as met by a margin under that slack may miss when replayed. With the
llama2-7b profile (coefficients of 1e-10 ms) the clock counts nanoseconds and the slack is a
few hundred nanoseconds.

Search. The replay policies' schedules (every InferMax-family policy that respects M) give the
first incumbent. Then, each step keeping what it proves:

1. energetic cuts on the met variables alone (a small model, ``_energy_cuts``): for a window
   from an arrival to a deadline, the batches taking the met requests that lie in it to their
   obligations fit in it;
2. while the bound is above the incumbent, for up to SEARCH_SHARE of the time limit: list
   scheduling over priority orders (``attainment_search``): a rollout builds batches from an
   order of the requests, a prefill budget, holds (a prompt waits for a later arrival to share
   its batch) and deadline guards, and simulated annealing over those keeps the schedule
   meeting the most SLOs (thousands of schedules a second; only with ``heuristics``);
3. while the bound is above the incumbent, for up to GROUPS_SHARE of the time limit: a
   schedule from independent groups (``attainment_groups``): the requests cut in arrival order
   where those before could finish alone by the next arrival, and for each group "can all of
   it meet their SLOs with every batch ending before the next group arrives?" (a small model);
   when every group says yes, the joined plan meets every SLO (only with ``heuristics``);
4. while the bound is above the incumbent, for up to PROBE_SHARE of the time limit: "can the
   bound be reached?" as a question of feasibility (Σ met ≥ bound): CP-SAT proves "no" (the
   bound drops by one) or finds such a schedule far sooner than while maximizing;
5. the maximization, with Σ met ≤ bound, hinted with the best schedule's batches up to its last
   obligation (completed into a full assignment by a short solve with them fixed).

Presolve probing is off (on these models it took most of a 10 s limit before the search
started).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmopt.data.instance import Instance
from llmopt.errors import InternalError, LlmoptError, OptionError
from llmopt.problems.base import Simulation
from llmopt.problems.infermax.attainment_data import (
    MAX_ATTAINMENT_REQUESTS,
    Data,
    Plan,
    horizon_batches,
    prepare,
    solo_met,
    walk,
)
from llmopt.problems.infermax.attainment_groups import group_plan
from llmopt.problems.infermax.attainment_model import (
    Solved,
    build_model,
    energy_bound,
    hint_plan,
    plan_from_values,
    run_cpsat,
)
from llmopt.problems.infermax.attainment_search import search_plan
from llmopt.problems.infermax.data import batches_from_schedule
from llmopt.problems.outcome import Sense, decide, proof_text
from llmopt.progress import SILENT, Progress
from llmopt.schedule.metrics import request_latencies

ATTAINMENT = "attainment"  # the key of the policies that start it (PolicyInfo.incumbent_for)
PROBE_SHARE = 0.25  # of the time limit, at most, for the questions "can the bound be reached?"
GROUPS_SHARE = 0.35 # of the time limit, at most, for a schedule from independent groups
SEARCH_SHARE = 0.4  # of the time limit, at most, for list scheduling over priority orders

__all__ = ["ATTAINMENT", "MAX_ATTAINMENT_REQUESTS", "AttainmentBound", "attainment_bound"]


@dataclass(frozen=True)
class AttainmentBound:
    """``met_upper``: a proven upper bound on the requests meeting their SLO; ``met_best``: the
    most a schedule found meets (its ``plan`` replayed and counted), None without one."""

    met_upper: int
    met_best: int | None
    requests: int
    status: str
    runtime_s: float
    plan: dict[str, Any] | None
    batches: int = 0                       # N, the model's batches (0: no model was needed)
    model_status: str = ""                 # CP-SAT's ending
    exact: bool = True                     # the model's clock is exact (no rounding slack)
    heuristic_best: int | None = None      # the most a replay policy meets, and which
    heuristic_policy: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def share_upper(self) -> float:
        return self.met_upper / self.requests if self.requests else 1.0


# --------------------------------------------------------------------- plans

def _merge_evictions(plan: Plan) -> Plan:
    """The plan with evict-only batches folded into the next batch (the model's batches
    evict before they process)."""
    out: Plan = []
    pending: list[str] = []
    for batch in plan:
        if not batch.get("prefill") and not batch.get("decode"):
            pending += list(batch.get("evict", []))
            continue
        out.append({"evict": pending + list(batch.get("evict", [])),
                    "prefill": dict(batch.get("prefill", {})),
                    "decode": list(batch.get("decode", []))})
        pending = []
    return out


def _first_batches(plan: Plan, k: int) -> Plan:
    """``plan`` up to its k-th batch that processes tokens (evict-only entries kept)."""
    seen = 0
    for j, batch in enumerate(plan):
        if seen == k:
            return plan[:j]
        seen += bool(batch.get("prefill") or batch.get("decode"))
    return list(plan)


def _prefix_length(data: Data, plan: Plan, schedule: Any, met: np.ndarray) -> int:
    """How many (non-empty) batches of ``plan`` the model needs: up to the one completing the
    last obligation of a request in the objective that meets its SLO (0 if none)."""
    ends = np.sort(schedule.iterations["end_ms"].to_numpy())
    req = schedule.requests.set_index(schedule.requests["request"].astype(str))
    last = None
    for i in range(data.n):
        if data.kind[i] == "model" and met[i]:
            col = "finish_ms" if data.needs_finish(i) else "first_token_ms"
            t = float(req.loc[data.ids[i], col])
            last = t if last is None else max(last, t)
    if last is None:
        return 0
    return int(np.searchsorted(ends, last + 1e-9, side="right"))


def _extend(data: Data, prefix: Plan) -> Plan:
    """``prefix`` followed by every unfinished request served alone: evict what still runs,
    then each (arrival order) prefills in chunks of C and decodes to its end."""
    states = walk(data, prefix)
    S = states[-1]["S"] if states else data.I.astype(np.int64).copy()
    m = states[-1]["m"] if states else np.zeros(data.n, dtype=np.int64)
    plan = [dict(b) for b in prefix]
    left = [i for i in range(data.n) if S[i] < data.I[i] + data.O[i]]
    running = [data.ids[i] for i in left if m[i] > 0]
    if running:
        plan.append({"evict": running, "prefill": {}, "decode": []})
    for i in sorted(left, key=lambda k: (data.T_ms[k], k)):
        rid, s, done_at = data.ids[i], int(S[i]), int(data.I[i] + data.O[i])
        # the prompt generates the first token; a refill stops one token short, which makes
        # the request a decoder (as in the replay) whose decode generates the next token
        refill = s > data.I[i]
        cached, target = 0, s - 1 if refill else s
        while cached < target:
            c = min(data.C, target - cached)
            plan.append({"evict": [], "prefill": {rid: c}, "decode": []})
            cached += c
        for _ in range(s + (0 if refill else 1), done_at):
            plan.append({"evict": [], "prefill": {}, "decode": [rid]})
    return plan


def _replay(instance: Instance, plan: Plan, simulation: Simulation
            ) -> tuple[Any, int, np.ndarray]:
    """The schedule of ``plan``, how many requests meet their SLO in it, and which."""
    try:
        schedule = simulation.follow(instance, {"mode": "continuous", "plan": plan})
    except LlmoptError as exc:
        raise InternalError(f"the attainment model's plan cannot be replayed: {exc}") from exc
    met = request_latencies(schedule, instance)["slo_met"].to_numpy(dtype=bool)
    return schedule, int(met.sum()), met


def _heuristics(instance: Instance, data: Data, simulation: Simulation
                ) -> list[tuple[int, str, Plan, Any, np.ndarray]]:
    """(count, policy, plan, schedule, met) of every replay policy that starts this bound
    (``PolicyInfo.incumbent_for``: those that respect M), best first; the plan is the
    policy's batches, replayed as a plan."""
    out = []
    for name, replayed in simulation.heuristics(instance, ATTAINMENT):
        try:
            plan = batches_from_schedule(data.ids, replayed())
        except LlmoptError:
            continue  # e.g. a prompt too long for a policy without chunked prefill
        schedule, count, met = _replay(instance, plan, simulation)
        out.append((count, name, plan, schedule, met))
    return sorted(out, key=lambda x: -x[0])


# --------------------------------------------------------------------- the bound

def attainment_bound(instance: Instance, time_limit_s: float = 10.0, workers: int = 2,
                     progress: Progress = SILENT, heuristics: bool = True, *,
                     simulation: Simulation) -> AttainmentBound:
    """The proven upper bound on the requests of ``instance`` meeting their SLOs, the best
    schedule found and its plan (see the module doc). ``time_limit_s`` covers the replay
    policies, the list scheduling, the groups, the model's building and CP-SAT; ``workers``
    are CP-SAT's threads; ``heuristics``: start from the replay policies' schedules, the list
    scheduling and the groups (without them the model is always solved, as the tests do to
    check it); ``simulation`` replays them and the plans
    (``llmopt.problems.workflows.attainment.attainment_bound`` gives it)."""
    t0 = time.perf_counter()
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, int | float) or not (
            math.isfinite(time_limit_s) and time_limit_s > 0):
        raise OptionError("must be positive and finite", field="time_limit_s",
                          value=time_limit_s)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise OptionError("must be a positive integer", field="workers", value=workers)
    data = prepare(instance)
    n = data.n
    notes: list[str] = []
    solo, solo_exact = solo_met(instance, data)
    constant = data.kind.count("free") + solo
    modeled = [i for i in range(n) if data.kind[i] == "model"]
    progress.stage("replay policies")
    heur = _heuristics(instance, data, simulation) if heuristics else []
    best: tuple[int, Plan] | None = None
    prefix: Plan | None = None
    prefix_met: np.ndarray | None = None
    if heur:
        count, policy, plan, schedule, met = heur[0]
        best = (count, plan)
        prefix = plan[:_prefix_length(data, plan, schedule, met)]
        prefix_met = met
        notes.append(f"best replay policy: {policy}, {count} of {n} met")
    heuristic = (heur[0][0], heur[0][1]) if heur else (None, None)
    N, ending = 0, "not run"
    upper = constant + len(modeled)
    energy = None
    if modeled and (best is None or best[0] < upper):
        energy = energy_bound(data, min(1.0, 0.1 * time_limit_s), workers)
        if energy is not None and energy < len(modeled):
            upper = min(upper, constant + energy)
            notes.append(f"energetic cuts: at most {energy} of the {len(modeled)} requests "
                         "with deadlines")

    def offer(found: Plan, label: str) -> None:
        """Replay ``found`` followed by every unfinished request alone; keep it if it meets
        more SLOs than the best so far."""
        nonlocal best, prefix, prefix_met
        plan = _extend(data, found)
        schedule, count, met = _replay(instance, plan, simulation)
        notes.append(f"{label}: {count} of {n} met")
        if best is None or count > best[0]:
            best = (count, plan)
            prefix = _merge_evictions(_first_batches(
                plan, _prefix_length(data, plan, schedule, met)))
            prefix_met = met

    def share(fraction: float) -> float:
        """``fraction`` of the time limit, within what is left of it."""
        return min(fraction * time_limit_s, time_limit_s - (time.perf_counter() - t0))

    if heuristics and modeled and (best is None or best[0] < upper):
        progress.stage("a schedule by list scheduling over priority orders")
        offer(search_plan(data, modeled, share(SEARCH_SHARE), upper - constant).plan,
              "list scheduling over priority orders")
    if heuristics and modeled and (best is None or best[0] < upper) and share(1.0) > 0.1:
        joined = group_plan(data, modeled, share(GROUPS_SHARE), workers, progress)
        if joined is not None:
            offer(joined, "schedule from independent groups")
    if modeled and (best is None or best[0] < upper):
        H = max(d for i in modeled if (d := data.deadline(i)) is not None)
        N = horizon_batches(data)
        notes.append(f"N = {N} batches, horizon {H / data.unit:.6g} ms")

        def model(at_most: int, at_least: int | None = None):
            md, var = build_model(data, N, H)
            met_count = sum(var["met"][i] for i in modeled)
            md.add(met_count <= at_most)
            if at_least is not None:   # a question of feasibility
                md.clear_objective()
                md.add(met_count >= at_least)
            return md, var

        def solve(md, var, limit: float) -> Solved:
            out = run_cpsat(md, limit, workers, progress=progress,
                         collect=lambda value: (plan_from_values(data, var, N, value),
                                                [i for i in modeled if value(var["met"][i])]))
            if out.ending == "error":
                raise InternalError("the attainment model ended in error")
            if out.solution is not None:
                nonlocal best
                found, claimed = out.solution
                plan = _extend(data, found)
                _, count, met = _replay(instance, plan, simulation)
                missed = [data.ids[i] for i in claimed if not met[i]]
                if data.exact and missed:
                    raise InternalError(f"the attainment model's plan, replayed, misses the "
                                        f"SLO of {missed}, which the model counts as met")
                if best is None or count > best[0]:
                    best = (count, plan)
            return out

        # 1. can the bound be reached? (CP-SAT decides "at least k met" far sooner than it
        # proves the same bound while maximizing)
        probes_until = min(time.perf_counter() + PROBE_SHARE * time_limit_s,
                           t0 + time_limit_s)
        while (best is None or best[0] < upper) and time.perf_counter() < probes_until - 0.1:
            k = upper - constant
            progress.stage(f"attainment model, N = {N} batches: can {k} of {len(modeled)} "
                           "requests with deadlines meet their SLOs?")
            md, var = model(k, k)
            out = solve(md, var, probes_until - time.perf_counter())
            ending = out.ending
            if ending != "infeasible":
                break
            upper -= 1
            notes.append(f"proven: not {k} of the {len(modeled)} requests with deadlines")
        # 2. the most requests meeting their SLOs, from the best schedule so far
        remaining = time_limit_s - (time.perf_counter() - t0)
        if (best is None or best[0] < upper) and remaining > 0.1:
            progress.stage(f"attainment model, N = {N} batches: the most requests meeting "
                           "their SLOs")
            md, var = model(upper - constant)
            if prefix is not None and prefix_met is not None:
                # every schedule's batches up to its last obligation are a solution of the
                # model: with an exact clock, a policy's that is not is a bug
                fits = len(prefix) <= N and hint_plan(md, data, var, N, prefix, prefix_met)
                if fits is None:  # its completion ran out of its 2 s: solved without the hint
                    notes.append("the best policy's schedule was not completed into a hint "
                                 "within 2 s: the model starts without it")
                elif not fits and data.exact:
                    raise InternalError("a replay policy's schedule does not fit the "
                                        "attainment model")
            out = solve(md, var, time_limit_s - (time.perf_counter() - t0))
            ending = out.ending
            if ending == "infeasible":   # the empty schedule is always a solution
                raise InternalError("the attainment model is infeasible")
            if out.bound is not None:
                upper = min(upper, constant + math.floor(out.bound + 1e-6))
    if best is None:
        plan = _extend(data, [])
        best = (_replay(instance, plan, simulation)[1], plan)
    verdict = decide(best[0], upper, sense=Sense.MAX, what="requests meeting their SLOs",
                     proof=proof_text("the attainment bound", f"{upper} of {n} requests (the "
                                      "SLOs met alone, the energy bound, CP-SAT's) is met by "
                                      "a replayed schedule"))
    if not data.exact:
        notes.append(f"clock of 1e-{round(math.log10(data.unit))} ms with batch times rounded "
                     f"down: every target relaxed by {data.slack} units")
    if not solo_exact:
        notes.append("a request with only a TPOT target is counted by a lower bound on its "
                     "TPOT (a refill may be faster than a decode)")
    return AttainmentBound(
        met_upper=upper, met_best=best[0], requests=n,
        status=verdict.status,
        runtime_s=time.perf_counter() - t0, plan={"mode": "continuous", "plan": best[1]},
        batches=N, model_status=ending, exact=data.exact and solo_exact,
        heuristic_best=heuristic[0], heuristic_policy=heuristic[1], notes=tuple(notes))
