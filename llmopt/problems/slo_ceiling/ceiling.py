"""The ceiling on SLO attainment: at most how many requests can meet their SLOs in any schedule,
the best of the relaxations that ran within the time limit.

``attainment_ceiling(instance)`` combines, each a valid upper bound on its own:

- ``alone``: the requests that cannot meet their targets even with the machine to themselves
  never meet them (``requests``);
- ``capacity``: the work of the requests meeting their SLOs fits in their windows on R
  replicas, bias charged by J, C or M (``capacity``), summed over independent parts; the same
  for their prompts alone (``capacity (prompts)``); and both parts of each request served in
  the same proportion, an LP over merged time slots (``capacity (joint)``, ``joint``);
- ``iterations``: an LP that counts the batches per time slot (``iterations``);
- ``exact``: up to ``MAX_ATTAINMENT_REQUESTS`` requests on one model instance, the proven
  bound of the exact attainment model (``llmopt.problems.infermax.attainment``), when asked.

Valid for every schedule the simulation core can produce under the InferMax cost model with
the instance's arrivals, M, C and J on its model instances: every InferMax-family policy, every
plan of batches, any router. With ``memory=False`` the KV rule is left out, and the ceiling
holds for policies that ignore M (``vllm-unlimited``) too. With a prefix cache
(``system.prefix_caching``) each request is charged its prompt less the leading blocks it shares
with another request's prompt, the KV rule is left out (blocks shared by running requests count
once) and the exact model does not run (it computes every prompt token): see ``requests``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, LlmoptError, OptionError
from llmopt.problems.base import Simulation
from llmopt.problems.infermax.attainment import MAX_ATTAINMENT_REQUESTS, attainment_bound
from llmopt.problems.slo_ceiling.capacity import capacity_bound
from llmopt.problems.slo_ceiling.iterations import iteration_bound
from llmopt.problems.slo_ceiling.joint import joint_bound
from llmopt.problems.slo_ceiling.requests import (
    FREE,
    NEVER,
    SOLO,
    WINDOW,
    Obligations,
    charge_rules,
    obligations,
)

ALL_RULES_UP_TO = 2000   # requests with deadlines up to which every bias rule is tried
JOINT_LP_UP_TO = 2000    # ... up to which the joint LP runs
JOINT_LP_TIME_S = 10.0
ITERATION_LP_UP_TO = 80  # ... up to which the iteration LP runs (its rows grow as n × slots)
ITERATION_LP_TIME_S = 5.0
VALID_UNDER = ("InferMax cost model; every schedule of the simulation core with these "
               "arrivals, M, C and J on {replicas} model instance(s){cache}: every "
               "InferMax-family policy{memory}, every plan of batches, any router")
CACHE_TEXT = (" with automatic prefix caching (a request may find cached the leading prompt "
              "blocks it shares with another request)")
CACHE_PROOF = ("; with the prefix cache a prompt counts only the I − h tokens no cache can "
               "supply (h: its leading blocks shared with another request's prompt, attention "
               "I² − h², ⌈(I − h)/C⌉ batches) and no M row or KV rule is used")
ALONE_PROOF = ("a request meets its SLO only if it could with the machine to itself: its "
               "prompt takes ⌈I/C⌉ batches, each later token a batch of its own (a decode or "
               "the end of a refill), each paying the bias; other requests and evictions only "
               "add time")
CAPACITY_PROOF = ("the requests meeting their SLOs do their unavoidable work (prompt by the "
                  "TTFT deadline, later tokens by the finish deadline, a share of each batch's "
                  "bias by the {rule} rule) between arrival and deadline, and R replicas give "
                  "at most R ms of work per ms: the fractional most that fits (a min-cost flow "
                  "over time slots, exact by the polymatroid greedy), floored, summed over "
                  "independent parts")

PROMPTS_PROOF = ("the requests meeting their SLOs meet their TTFT: their prompts' unavoidable "
                 "work (a share of each batch's bias by the {rule} rule) lies between arrival "
                 "and first-token deadline, and R replicas give at most R ms of work per ms: "
                 "the fractional most that fits (a min-cost flow), floored, summed over parts")

JOINT_PROOF = ("the requests meeting their SLOs place all their unavoidable work (prompt by the "
               "TTFT deadline, later tokens by the finish deadline, a share of each batch's bias "
               "by the {rule} rule) between arrival and deadline, at most R ms per ms of each "
               "time slot: an LP (HiGHS) serving each request's two parts in the same "
               "proportion, its bound certified from the duals, floored")
ITERATIONS_PROOF = ("per time slot, the batches (each paying the bias, at most J requests and M "
                    "KVs each, a request in a batch at most once) and the unavoidable work of "
                    "the requests meeting their SLOs (prompt by the TTFT deadline, ⌈I/C⌉ prompt "
                    "batches, one batch per later token by the finish deadline) fit in R ms "
                    "per ms: an LP (HiGHS), its bound certified from the duals, floored")


@dataclass(frozen=True)
class AttainmentCeiling:
    """At most ``met_max`` of ``requests`` meet their SLOs in any schedule (``method`` names the
    bound that gave it; ``bounds`` every bound that ran)."""

    met_max: int
    requests: int
    method: str
    proof: str
    valid_under: str
    runtime_s: float
    bounds: dict[str, int] = field(default_factory=dict)
    parts: tuple[dict[str, Any], ...] = ()
    interrupted: bool = False
    notes: tuple[str, ...] = ()
    #: the bound of the relaxations whose value cannot grow when arrivals are compressed
    #: (``goodput``): the alone bound and the floor of the whole capacity LP
    monotone_max: int | None = None
    replicas: int = 1       # R, the model instances it covers (with any router)
    memory: bool = True     # False: the KV rule left out (it holds for schedules ignoring M)

    @property
    def share(self) -> float:
        return self.met_max / self.requests if self.requests else 1.0

    def sentence(self) -> str:
        """"at most X of N requests (Y %) can meet their SLOs in any schedule (method: …)",
        naming the model instances and the router when there are several, the memory rule
        when it was left out, and an interruption."""
        where = (f" on {self.replicas} model instances with any router" if self.replicas > 1
                 else "")
        scope = "" if self.memory else ", KV memory unlimited"
        cut = (", stopped before every bound ran (time limit or interrupt): the best found "
               "so far" if self.interrupted else "")
        return (f"at most {self.met_max} of {self.requests} requests "
                f"({100 * self.share:.1f} %) can meet their SLOs in any schedule{where} "
                f"(method: {self.method}{scope}{cut})")


def _check(instance: Instance, time_limit_s: float) -> None:
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, int | float) or not (
            math.isfinite(time_limit_s) and time_limit_s > 0):
        raise OptionError("must be positive and finite", field="time_limit_s",
                          value=time_limit_s)
    if not instance.has_slos:
        raise InstanceError("the SLO attainment ceiling needs SLO targets (an slo section or "
                            "ttft_slo_ms/tpot_slo_ms/e2e_slo_ms on the requests)",
                            file=instance.label(), field="slo")


def attainment_ceiling(instance: Instance, time_limit_s: float = 60.0,
                       stop: Callable[[], bool] | None = None, memory: bool = True,
                       exact: bool = False, workers: int = 2,
                       iterations: bool = True,
                       simulation: Simulation | None = None) -> AttainmentCeiling:
    """The ceiling of the module doc. ``stop`` (a callable) or the time limit interrupts the
    relaxations: the best bound found so far is returned (``interrupted``). ``memory=False``:
    no KV rule (valid for policies ignoring M). ``exact``: also run the exact model where it
    applies (≤ 16 requests, one model instance, M and C given), within the time left.
    ``iterations=False`` skips the iteration LP (the goodput ceiling uses only the bounds
    monotone in the rate). The exact model replays its plans: it runs only when a
    ``simulation`` is given (``llmopt.problems.workflows.simulation.ENGINE``)."""
    t0 = time.perf_counter()
    _check(instance, time_limit_s)
    deadline = t0 + time_limit_s

    def stopped() -> bool:
        return time.perf_counter() > deadline or (stop is not None and stop())

    n = instance.num_requests
    replicas = int(instance.system.instances)
    ob = obligations(instance, memory=memory)
    free = ob.count(FREE) + ob.count(SOLO)
    bounds = {"alone": n - ob.count(NEVER)}
    proofs = {"alone": ALONE_PROOF}
    parts: tuple[dict[str, Any], ...] = ()
    interrupted = False
    notes: list[str] = []
    if ob.count(NEVER):
        notes.append(f"{ob.count(NEVER)} requests cannot meet their targets even alone")
    if instance.system.prefix_caching:
        notes.append(f"prefix caching: each request charged its prompt less the leading "
                     f"blocks it shares with another ({int(ob.cached_tokens.sum()):,} of "
                     f"{int(ob.inputs.sum()):,} prompt tokens may be found cached); no KV rule")
    monotone = bounds["alone"]
    if ob.count(WINDOW):
        found_cap = _capacity(instance, ob, memory, free, stopped, deadline)
        bounds.update(found_cap.bounds)
        proofs.update(found_cap.proofs)
        parts, monotone = found_cap.parts, min(monotone, found_cap.monotone)
        interrupted = interrupted or found_cap.interrupted
        notes += found_cap.notes
    skipped: list[str] = []
    window = ob.count(WINDOW)
    lps = [  # (label, bound's name, whether it runs, the run, its proof)
        ("joint LP", "capacity (joint)", 0 < window <= JOINT_LP_UP_TO,
         lambda: joint_bound(ob, time_limit_s=min(JOINT_LP_TIME_S,
                                                  deadline - time.perf_counter())),
         JOINT_PROOF.format(rule=ob.charge_rule)),
        ("iteration LP", "iterations", iterations and 0 < window <= ITERATION_LP_UP_TO,
         lambda: iteration_bound(ob, time_limit_s=min(ITERATION_LP_TIME_S,
                                                      deadline - time.perf_counter())),
         ITERATIONS_PROOF)]
    for label, name, runs, run, proof in lps:
        if not runs:
            continue
        if stopped():
            skipped.append(f"the {label}")
            continue
        found_lp = run()
        if found_lp is None:
            notes.append(f"{label}: not solved within its time limit")
        else:
            bounds[name] = free + found_lp.met_max
            proofs[name] = proof
            notes.append(f"{label}: {found_lp.slots} slots, {found_lp.variables} "
                         f"variables, certified dual bound {found_lp.lp_value:.6g}")
    if exact and simulation is not None and _exact_applies(instance) and stopped():
        skipped.append("the exact model")
    elif exact and simulation is not None and _exact_applies(instance):
        from_exact = _exact(instance, deadline - time.perf_counter(), workers, simulation)
        if isinstance(from_exact, str):
            notes.append(from_exact)
        else:
            bounds["exact"], proofs["exact"], exact_note = from_exact
            notes.append(exact_note)
    if skipped:
        interrupted = True
        why = "interrupted" if stop is not None and stop() else "time limit"
        notes.append(f"not run ({why}): {', '.join(skipped)}")
    method = min(bounds, key=lambda k: (bounds[k], list(bounds).index(k)))
    memory_text = (" that respects M (one ignoring M, such as vllm-unlimited, has a ceiling "
                   "of its own without the KV rule)" if memory
                   and not instance.system.prefix_caching
                   else " (also those ignoring M, such as vllm-unlimited)")
    return AttainmentCeiling(
        met_max=int(bounds[method]), requests=n, method=method,
        proof=proofs[method] + (CACHE_PROOF if instance.system.prefix_caching else ""),
        valid_under=VALID_UNDER.format(
            replicas=replicas, memory=memory_text,
            cache=CACHE_TEXT if instance.system.prefix_caching else ""),
        runtime_s=time.perf_counter() - t0, bounds=dict(bounds), parts=parts,
        interrupted=interrupted, notes=tuple(notes), monotone_max=monotone,
        replicas=replicas, memory=memory)


@dataclass
class _Capacity:
    bounds: dict[str, int] = field(default_factory=dict)
    proofs: dict[str, str] = field(default_factory=dict)
    parts: tuple[dict[str, Any], ...] = ()
    monotone: int = 1 << 62
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


def _capacity(instance: Instance, ob: Obligations, memory: bool, free: int,
              stopped: Callable[[], bool], deadline: float) -> _Capacity:
    """The capacity flows: the bias rule charging the most first (on small instances every
    rule, the best counting), then the prompts-only flow. A flow cannot be interrupted once
    started: one is skipped (``interrupted``) when the longest so far would not end before
    the deadline."""
    out = _Capacity()
    rules = [ob.charge_rule] + ([r for r in charge_rules(ob.M, ob.C) if r != ob.charge_rule]
                                if ob.count(WINDOW) <= ALL_RULES_UP_TO else [])
    longest = 0.0
    for rule, prompts in [(r, False) for r in rules] + [(rules[0], True)]:
        if stopped() or time.perf_counter() + longest > deadline:
            out.interrupted = True
            out.notes.append(f"capacity{' (prompts)' if prompts else ''} with {rule}: not run "
                             "(time limit)")
            continue
        started = time.perf_counter()
        this = ob if rule == ob.charge_rule else obligations(instance, memory, rule)
        met, found, unit = capacity_bound(this, stop=stopped, prompts_only=prompts)
        longest = max(longest, time.perf_counter() - started)
        out.interrupted = out.interrupted or any(math.isnan(p.lp_value) for p in found)
        lp = sum(p.requests if math.isnan(p.lp_value) else p.lp_value for p in found)
        out.monotone = min(out.monotone, free + math.floor(lp + 1e-6))
        name = "capacity (prompts)" if prompts else "capacity"
        if name in out.bounds and free + met >= out.bounds[name]:
            continue
        out.bounds[name] = free + met
        out.proofs[name] = (PROMPTS_PROOF if prompts else CAPACITY_PROOF).format(rule=rule)
        if not prompts:
            out.parts = tuple({"start_ms": p.start_ms, "end_ms": p.end_ms,
                               "requests": p.requests, "met_max": p.met_max,
                               "lp_value": None if math.isnan(p.lp_value) else p.lp_value}
                              for p in found)
            out.notes = [n for n in out.notes if not n.startswith("capacity: ")]
            out.notes.append(f"capacity: {len(found)} independent parts, ticks of {unit:g} "
                             f"ms, bias charged by {rule}")
    return out


def _exact_applies(instance: Instance) -> bool:
    return (instance.num_requests <= MAX_ATTAINMENT_REQUESTS and instance.system.instances == 1
            and not instance.system.prefix_caching)


EXACT_LEAST_S = 0.5  # the exact model is not started with less time left


def _exact(instance: Instance, time_left_s: float, workers: int, simulation: Simulation
           ) -> tuple[int, str, str] | str:
    """The exact model's proven bound within ``time_left_s``, its proof and a note on the best
    schedule it found; or why it did not run."""
    if time_left_s < EXACT_LEAST_S:
        return f"exact attainment model: not run ({time_left_s:.2f} s left)"
    try:
        found = attainment_bound(instance, time_limit_s=time_left_s, workers=workers,
                                 simulation=simulation)
    except LlmoptError as exc:
        return f"exact attainment model: not run ({exc})"
    best = "none" if found.met_best is None else f"{found.met_best} of {found.requests}"
    return found.met_upper, (f"the exact attainment model (CP-SAT), {found.status}: "
                             f"{'; '.join(found.notes)}"), (
        f"exact attainment model: {found.status}, bound {found.met_upper}, best schedule "
        f"found meets {best} ({found.runtime_s:.1f} s)")
