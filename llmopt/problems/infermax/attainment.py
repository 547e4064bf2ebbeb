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

Model (CP-SAT). Requests i, batches j = 1..N (j = 0 the initial state). Variables per request and
batch, as in the paper: S_ij (prompt and generated tokens after batch j), m_ij (cached KVs after
batch j), c_ij (tokens processed), g_ij (a token generated), e_ij (evicted before batch j); per
batch its start and end; per request met_i, maximized. Constraints, all exact:

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
2. while the bound is above the incumbent, for up to PROBE_SHARE of the time limit: "can the
   bound be reached?" as a question of feasibility (Σ met ≥ bound): CP-SAT proves "no" (the
   bound drops by one) or finds such a schedule far sooner than while maximizing;
3. the maximization, with Σ met ≤ bound, hinted with the best policy's batches up to its last
   obligation (completed into a full assignment by a short solve with them fixed).

Presolve probing is off (on these models it took most of a 10 s limit before the search
started).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from llmopt.backends import cpsat as cpsat_backend
from llmopt.data.cost import InferMaxProfile
from llmopt.data.instance import Instance
from llmopt.data.limits import resolve_limits
from llmopt.errors import InstanceError, InternalError, LlmoptError, OptionError
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.registry import POLICIES
from llmopt.policies.replay import replay
from llmopt.problems.infermax.data import batches_from_schedule
from llmopt.progress import SILENT, Progress
from llmopt.schedule.metrics import MET_TOLERANCE_MS, request_latencies

MAX_ATTAINMENT_REQUESTS = 16
COEFFICIENTS = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")
MAX_DECIMALS = 12
# the model's clock spans at most this many units: CP-SAT's presolve was seen to return a wrong
# optimum with time domains near 1e12 units next to cost coefficients near 1e10
CLOCK_UNITS = 10 ** 9
PROBE_SHARE = 0.25  # of the time limit, at most, for the questions "can the bound be reached?"
Plan = list[dict[str, Any]]


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


# --------------------------------------------------------------------- data

@dataclass
class _Data:
    """The instance on the model's clock (``unit`` units per ms) with each request's
    obligations. Batch costs are exact integers in ``fine`` units per ms (``coef``); the clock
    counts ⌊cost / (fine / unit)⌋ per batch."""

    ids: tuple[str, ...]
    I: np.ndarray
    O: np.ndarray
    T_ms: np.ndarray
    M: int
    C: int
    J: int
    profile: InferMaxProfile
    fine: int
    coef: dict[str, int]
    coef_exact: bool
    unit: int = 1
    T: list[int] = field(default_factory=list)      # arrivals on the clock
    arrivals_exact: bool = True
    slack: int = 0
    ttft: list[int | None] = field(default_factory=list)   # thresholds on the clock: TTFT and
    e2e: list[int | None] = field(default_factory=list)    # E2E from the arrival, finish − first
    tpot: list[int | None] = field(default_factory=list)   # for TPOT
    kind: list[str] = field(default_factory=list)
    # "model" (in the objective), "free" (no target: met in every schedule), "solo" (a TPOT
    # target only: met iff it can be alone), "never" (cannot meet its targets even alone)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def div(self) -> int:
        return self.fine // self.unit

    @property
    def exact(self) -> bool:
        return self.coef_exact and self.arrivals_exact and self.div == 1

    def deadline(self, i: int) -> int | None:
        """The latest end (clock) of the batch completing request i's obligations."""
        ends = []
        ttft, tpot, e2e = self.ttft[i], self.tpot[i], self.e2e[i]
        if e2e is not None:
            ends.append(self.T[i] + e2e)
        if ttft is not None and tpot is not None:
            ends.append(self.T[i] + ttft + tpot)
        if not ends and ttft is not None:
            ends.append(self.T[i] + ttft)
        return min(ends) if ends else None

    def needs_finish(self, i: int) -> bool:
        return self.e2e[i] is not None or self.tpot[i] is not None

    def needs_first(self, i: int) -> bool:
        return self.ttft[i] is not None or self.tpot[i] is not None

    def min_batch(self) -> int:
        """A lower bound on a non-empty batch's time on the clock."""
        return (self.coef["bias_ms"] + self.coef["per_token_ms"]) // self.div


def _decimals(value: float) -> int | None:
    """Decimals of ``value`` as written (its shortest repr); None beyond MAX_DECIMALS."""
    exponent = Decimal(repr(float(value))).as_tuple().exponent
    if not isinstance(exponent, int):
        return None
    k = max(0, -exponent)
    return k if k <= MAX_DECIMALS else None


def _as_written(value: float) -> Fraction:
    """``value`` as its shortest repr reads (0.3, not the binary 0.29999…)."""
    return Fraction(Decimal(repr(float(value))))


def _check_instance(instance: Instance) -> None:
    label = instance.label()
    profile = instance.profile
    if not isinstance(profile, InferMaxProfile):
        raise InstanceError("the attainment bound needs an infermax profile", file=label,
                            field="model", value=profile.name)
    if not instance.has_slos:
        raise InstanceError("the attainment bound needs SLO targets (an slo section or "
                            "ttft_slo_ms/tpot_slo_ms/e2e_slo_ms on the requests)", file=label,
                            field="slo")
    if instance.num_requests > MAX_ATTAINMENT_REQUESTS:
        raise InstanceError(f"the attainment bound is for at most {MAX_ATTAINMENT_REQUESTS} "
                            "requests", file=label, field="requests",
                            value=instance.num_requests)
    if instance.system.instances != 1:
        raise InstanceError("the attainment bound is for one model instance", file=label,
                            field="system.instances", value=instance.system.instances)
    if profile.bias_ms + profile.per_token_ms <= 0:
        raise InstanceError("the attainment bound needs batches of positive time (bias_ms + "
                            "per_token_ms > 0)", file=label, field="model", value=profile.name)


def _data(instance: Instance) -> _Data:
    _check_instance(instance)
    label = instance.label()
    profile = instance.profile
    assert isinstance(profile, InferMaxProfile)
    limits = resolve_limits(instance)
    if limits.kv_tokens is None or limits.batch_tokens is None:
        raise InstanceError("the attainment bound needs M and C", file=label,
                            field="system.kv_capacity" if limits.kv_tokens is None
                            else "system.max_batch_tokens")
    M, C = int(limits.kv_tokens), int(limits.batch_tokens)
    I = instance.input_tokens.astype(np.int64)
    O = instance.output_tokens.astype(np.int64)
    too_big = np.flatnonzero(I + O - 1 > M)
    if len(too_big):
        k = int(too_big[0])
        raise InstanceError(f"request {instance.ids[k]} needs {int(I[k] + O[k] - 1)} KV tokens, "
                            "more than the cache: no schedule finishes it", file=label,
                            field="system.kv_capacity", value=M)
    values = [float(getattr(profile, k)) for k in COEFFICIENTS]
    decimals = [_decimals(v) for v in values]
    coef_exact = all(k is not None for k in decimals)
    fine = 10 ** (max(k or 0 for k in decimals) if coef_exact else MAX_DECIMALS)
    coef = {name: (int(Decimal(repr(v)) * fine) if coef_exact else round(Fraction(v) * fine))
            for name, v in zip(COEFFICIENTS, values, strict=True)}
    n = len(I)
    data = _Data(tuple(instance.ids), I, O, instance.arrival_ms.copy(), M, C,
                 int(limits.clients), profile, fine, coef, coef_exact,
                 ttft=[None] * n, e2e=[None] * n, tpot=[None] * n, kind=["free"] * n)
    targets = [instance.slo_targets(f) for f in ("ttft_slo_ms", "tpot_slo_ms", "e2e_slo_ms")]
    for i in range(n):
        has = [not math.isnan(targets[0][i]), not math.isnan(targets[1][i]) and O[i] >= 2,
               not math.isnan(targets[2][i])]
        if not (has[0] or has[2]):
            data.kind[i] = "solo" if has[1] else "free"
        else:
            data.kind[i] = "model" if _alone_possible(profile, C, int(I[i]), int(O[i]),
                                                      targets, i) else "never"
    # the clock: the finest power of ten up to ``fine`` that keeps the horizon within
    # CLOCK_UNITS (the horizon at most the latest arrival plus the widest target span)
    span = float(instance.arrival_ms.max()) + max(
        (_target_span(targets, i, int(O[i])) for i in range(n)), default=0.0) + 1.0
    unit = fine
    while unit > 1 and span * unit > CLOCK_UNITS:
        unit //= 10
    data.unit = unit
    data.T = [math.floor(_as_written(t) * unit) for t in instance.arrival_ms]
    data.arrivals_exact = all(_decimals(t) is not None and _as_written(t) * unit == data.T[k]
                              for k, t in enumerate(instance.arrival_ms))
    if data.min_batch() < 1:
        raise InstanceError("batches are too short for the attainment model's clock",
                            file=label, field="model", value=profile.name)
    _set_thresholds(data, targets)
    if not data.exact:
        # the clock floors each batch's cost (and the arrivals): a time is off by less than
        # 1 + N·(1 + e) units after N batches, e the coefficients' rounding per batch; a
        # difference of two times by twice that
        err = [abs(Fraction(v) * fine - coef[k]) for k, v in zip(COEFFICIENTS, values,
                                                                 strict=True)]
        K = int((I + O - 1).max())
        per_batch = (err[0] + err[1] * C + err[2] * n * K + err[3] * n * 2 * K * min(C, K)
                     + err[4] * n) / data.div
        for _ in range(50):
            _set_thresholds(data, targets)
            N = _horizon_batches(data)
            need = math.ceil(2 * (1 + N * (1 + per_batch)))
            if need <= data.slack:
                break
            data.slack = need
        else:
            raise InternalError("the attainment model's rounding slack does not settle")
    return data


def _target_span(targets: list[np.ndarray], i: int, O: int) -> float:
    ttft, tpot, e2e = (float(t[i]) for t in targets)
    spans = [x for x in (ttft, e2e) if not math.isnan(x)]
    if not math.isnan(tpot):
        spans.append((0.0 if math.isnan(ttft) else ttft) + max(O - 1, 0) * tpot)
    return max(spans, default=0.0) + 1e-3


def _threshold(target: float, multiple: int, unit: int, slack: int) -> int:
    """The largest integer L with L ≤ unit · multiple · (target + tolerance), plus slack."""
    bound = Fraction(unit) * multiple * (_as_written(target) + Fraction(MET_TOLERANCE_MS))
    return math.floor(bound) + slack


def _set_thresholds(data: _Data, targets: list[np.ndarray]) -> None:
    ttft, tpot, e2e = targets
    for i in range(data.n):
        data.ttft[i] = (None if math.isnan(ttft[i])
                        else _threshold(float(ttft[i]), 1, data.unit, data.slack))
        data.e2e[i] = (None if math.isnan(e2e[i])
                       else _threshold(float(e2e[i]), 1, data.unit, data.slack))
        data.tpot[i] = (None if math.isnan(tpot[i]) or data.O[i] < 2 else
                        _threshold(float(tpot[i]), int(data.O[i]) - 1, data.unit, data.slack))


def _horizon_batches(data: _Data, requests: list[int] | None = None) -> int:
    """N: how many batches can end by the latest deadline of ``requests`` (default: every
    request in the objective), each taking at least ``min_batch`` after the first arrival."""
    chosen = [i for i in range(data.n) if data.kind[i] == "model"] if requests is None \
        else requests
    ends = [d for i in chosen if (d := data.deadline(i)) is not None]
    if not ends:
        return 0
    first = min(data.T) if requests is None else min(data.T[i] for i in chosen)
    return max(1, (max(ends) - first) // data.min_batch())


# --------------------------------------------------------------------- alone (exact, in ms)

def _cost_ms(p: InferMaxProfile, tokens: int, decode_kv: int, units: int, chunks: int
             ) -> Fraction:
    return (Fraction(p.bias_ms) + Fraction(p.per_token_ms) * tokens
            + Fraction(p.decode_kv_ms) * decode_kv + Fraction(p.prefill_attention_ms) * units
            + Fraction(p.per_prefill_request_ms) * chunks)


def _prefill_lb_ms(p: InferMaxProfile, C: int, length: int) -> Fraction:
    """Least time of a (re)fill pass of ``length`` tokens: ⌈length / C⌉ batches whose chunks'
    c² + 2mc sum to length²."""
    chunks = math.ceil(length / C)
    return (Fraction(p.bias_ms) * chunks + Fraction(p.per_token_ms) * length
            + Fraction(p.prefill_attention_ms) * length * length
            + Fraction(p.per_prefill_request_ms) * chunks)


def _later_tokens_lb_ms(p: InferMaxProfile, C: int, I: int, O: int) -> tuple[Fraction, bool]:
    """A lower bound on finish − first in any schedule (each later token needs a batch of its
    own: a decode reading its KVs, or the end of a refill of them), and whether decoding alone
    reaches it."""
    total, alone = Fraction(0), True
    for t in range(1, O):
        decode = _cost_ms(p, 1, I + t - 1, 0, 0)
        refill = _prefill_lb_ms(p, C, I + t)
        alone = alone and decode <= refill
        total += min(decode, refill)
    return total, alone


def _alone_possible(p: InferMaxProfile, C: int, I: int, O: int, targets: list[np.ndarray],
                    i: int) -> bool:
    """Whether request i could meet its targets with the machine to itself (necessary: other
    requests and evictions only add time)."""
    tol = Fraction(MET_TOLERANCE_MS)
    first = _prefill_lb_ms(p, C, I)
    later, _ = _later_tokens_lb_ms(p, C, I, O)
    ttft, tpot, e2e = (float(t[i]) for t in targets)
    if not math.isnan(ttft) and first > Fraction(ttft) + tol:
        return False
    if not math.isnan(tpot) and O >= 2 and later > (O - 1) * (Fraction(tpot) + tol):
        return False
    return math.isnan(e2e) or first + later <= Fraction(e2e) + tol


def _solo_met(instance: Instance, data: _Data) -> tuple[int, bool]:
    """How many requests with a TPOT target only can meet it (served alone, last), and
    whether that count is exact (decoding is never slower than a refill for them)."""
    met, exact = 0, True
    tpot = instance.slo_targets("tpot_slo_ms")
    for i in range(data.n):
        if data.kind[i] != "solo":
            continue
        later, alone = _later_tokens_lb_ms(data.profile, data.C, int(data.I[i]),
                                           int(data.O[i]))
        met += later <= (int(data.O[i]) - 1) * (Fraction(float(tpot[i]))
                                                 + Fraction(MET_TOLERANCE_MS))
        exact = exact and alone
    return met, exact


# --------------------------------------------------------------------- plans

def _walk(data: _Data, plan: Plan) -> list[dict[str, np.ndarray]]:
    """The state after each batch of ``plan`` (replay semantics): S, m per request, and what
    the batch did (c, e, dec)."""
    index = {rid: k for k, rid in enumerate(data.ids)}
    S = data.I.astype(np.int64).copy()
    m = np.zeros(data.n, dtype=np.int64)
    out = []
    for batch in plan:
        c = np.zeros(data.n, dtype=np.int64)
        e = np.zeros(data.n, dtype=np.int64)
        dec = np.zeros(data.n, dtype=bool)
        for r in batch.get("evict", []):
            e[index[r]] = 1
            m[index[r]] = 0
        for r, tokens in batch.get("prefill", {}).items():
            c[index[r]] = int(tokens)
        for r in batch.get("decode", []):
            c[index[r]] = 1
            dec[index[r]] = True
        m = m + c
        S = S + ((c > 0) & (m == S))
        m = np.where(S == data.I + data.O, 0, m)
        out.append({"S": S.copy(), "m": m.copy(), "c": c, "e": e, "dec": dec})
    return out


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


def _prefix_length(data: _Data, plan: Plan, schedule: Any, met: np.ndarray) -> int:
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


def _extend(data: _Data, prefix: Plan) -> Plan:
    """``prefix`` followed by every unfinished request served alone: evict what still runs,
    then each (arrival order) prefills in chunks of C and decodes to its end."""
    states = _walk(data, prefix)
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


def _replay(instance: Instance, plan: Plan) -> tuple[Any, int, np.ndarray]:
    """The schedule of ``plan``, how many requests meet their SLO in it, and which."""
    try:
        schedule = replay(instance, "plan", plan={"mode": "continuous", "plan": plan})
    except LlmoptError as exc:
        raise InternalError(f"the attainment model's plan cannot be replayed: {exc}") from exc
    met = request_latencies(schedule, instance)["slo_met"].to_numpy(dtype=bool)
    return schedule, int(met.sum()), met


def _heuristics(instance: Instance, data: _Data) -> list[tuple[int, str, Plan, Any,
                                                             np.ndarray]]:
    """(count, policy, plan, schedule, met) of every replay policy that respects M, best
    first; the plan is the policy's batches, replayed as a plan."""
    out = []
    for name, info in POLICIES.items():
        if info.family != "infermax" or (name in SCHEDULERS and SCHEDULERS[name].unlimited_memory):
            continue
        try:
            plan = batches_from_schedule(data.ids, replay(instance, name))
        except LlmoptError:
            continue  # e.g. a prompt too long for a policy without chunked prefill
        schedule, count, met = _replay(instance, plan)
        out.append((count, name, plan, schedule, met))
    return sorted(out, key=lambda x: -x[0])


# --------------------------------------------------------------------- CP-SAT model

def build_model(data: _Data, N: int, H: int):
    """The CP-SAT model of the module doc: N batches, every one ending by H (clock units);
    returns the model and its variables."""
    md = cp_model.CpModel()
    n = data.n
    coef = data.coef
    K = [int(data.I[i] + data.O[i] - 1) for i in range(n)]
    t_min = min(data.T)
    start = [md.new_int_var(t_min, H, f"start{j}") for j in range(N + 1)]
    end = [md.new_int_var(t_min, H, f"end{j}") for j in range(N + 1)]
    md.add(end[0] == t_min)  # nothing runs before the first arrival

    def grid() -> list[list[Any]]:
        return [[None] * (N + 1) for _ in range(n)]

    S, m, c, e, dec, has1, done = grid(), grid(), grid(), grid(), grid(), grid(), grid()
    tok_j: list[list[Any]] = [[] for _ in range(N + 1)]
    occ_j: list[list[Any]] = [[] for _ in range(N + 1)]
    act_j: list[list[Any]] = [[] for _ in range(N + 1)]
    kv_j: list[list[Any]] = [[] for _ in range(N + 1)]
    units_j: list[list[Any]] = [[] for _ in range(N + 1)]
    chunks_j: list[list[Any]] = [[] for _ in range(N + 1)]
    arrive_j: list[list[Any]] = [[] for _ in range(N + 1)]
    met: list[Any] = [md.new_bool_var(f"met{i}") if data.kind[i] == "model" else None
                      for i in range(n)]
    limit_j = n > data.J
    for i in range(n):
        Ii, Oi, Ki = int(data.I[i]), int(data.O[i]), K[i]
        cmax = min(data.C, Ki)
        S[i][0] = md.new_constant(Ii)
        m[i][0] = md.new_constant(0)
        has1[i][0] = md.new_constant(0)
        done[i][0] = md.new_constant(0)
        for j in range(1, N + 1):
            S[i][j] = md.new_int_var(Ii, Ii + Oi, f"S{i}_{j}")
            m[i][j] = md.new_int_var(0, Ki, f"m{i}_{j}")
            c[i][j] = md.new_int_var(0, cmax, f"c{i}_{j}")
            g = md.new_bool_var(f"g{i}_{j}")
            done[i][j] = md.new_bool_var(f"done{i}_{j}")
            has1[i][j] = md.new_bool_var(f"h{i}_{j}")
            # done once S reaches I + O; a token generated once S passes I
            md.add(S[i][j] == Ii + Oi).only_enforce_if(done[i][j])
            md.add(S[i][j] <= Ii + Oi - 1).only_enforce_if(done[i][j].negated())
            md.add(S[i][j] >= Ii + 1).only_enforce_if(has1[i][j])
            md.add(S[i][j] == Ii).only_enforce_if(has1[i][j].negated())
            md.add_implication(has1[i][j - 1], has1[i][j])
            md.add_implication(done[i][j - 1], done[i][j])
            md.add_implication(done[i][j], has1[i][j])
            # (1) an eviction before the batch frees the KVs of a running request (m ≥ 1)
            if j >= 2:
                e[i][j] = md.new_bool_var(f"e{i}_{j}")
                before = md.new_int_var(0, Ki, f"b{i}_{j}")
                md.add(before == m[i][j - 1]).only_enforce_if(e[i][j].negated())
                md.add(before == 0).only_enforce_if(e[i][j])
                md.add(m[i][j - 1] >= 1).only_enforce_if(e[i][j])
            else:
                before = m[i][0]
            rem = md.new_int_var(1, Ii + Oi, f"rem{i}_{j}")
            md.add(rem == S[i][j - 1] - before)
            # (2) tokens to process; nothing once done
            md.add(c[i][j] <= rem)
            md.add(c[i][j] == 0).only_enforce_if(done[i][j - 1])
            # (3) a token is generated exactly when everything uncached is processed
            md.add(c[i][j] == rem).only_enforce_if(g)
            md.add(c[i][j] <= rem - 1).only_enforce_if(g.negated())
            md.add(S[i][j] == S[i][j - 1] + g)                          # sequence length
            occ = md.new_int_var(0, Ki, f"occ{i}_{j}")
            md.add(occ == before + c[i][j])
            md.add(m[i][j] == occ).only_enforce_if(done[i][j].negated())
            md.add(m[i][j] == 0).only_enforce_if(done[i][j])
            # phases: a decode is the one uncached token after the first generated one
            pos = md.new_bool_var(f"pos{i}_{j}")
            md.add(c[i][j] >= 1).only_enforce_if(pos)
            md.add(c[i][j] == 0).only_enforce_if(pos.negated())
            one = md.new_bool_var(f"rem1{i}_{j}")
            md.add(rem == 1).only_enforce_if(one)
            md.add(rem >= 2).only_enforce_if(one.negated())
            d = md.new_bool_var(f"dec{i}_{j}")
            md.add_bool_and([pos, one, has1[i][j - 1]]).only_enforce_if(d)
            md.add_bool_or([pos.negated(), one.negated(), has1[i][j - 1].negated()]
                           ).only_enforce_if(d.negated())
            dec[i][j] = d
            kvr = md.new_int_var(0, Ki, f"kvr{i}_{j}")
            md.add(kvr == before).only_enforce_if(d)
            md.add(kvr == 0).only_enforce_if(d.negated())
            # prefill attention of a chunk: c² + 2·before·c = c·(occ + before); a decode's
            # 1·(2m + 1) is taken back out
            w = md.new_int_var(0, 2 * Ki, f"w{i}_{j}")
            md.add(w == occ + before)
            prod = md.new_int_var(0, cmax * 2 * Ki, f"u{i}_{j}")
            md.add_multiplication_equality(prod, [c[i][j], w])
            tok_j[j].append(c[i][j])
            occ_j[j].append(occ)
            kv_j[j].append(kvr)
            units_j[j].append(prod - 2 * kvr - d)
            chunks_j[j].append(pos - d)
            if data.T[i] > t_min:
                arrive_j[j].append(data.T[i] * pos)
            if limit_j:
                a = md.new_bool_var(f"act{i}_{j}")
                md.add(occ >= 1).only_enforce_if(a)
                md.add(occ == 0).only_enforce_if(a.negated())
                act_j[j].append(a)
    nonempty = []
    top = max(1, sum(K))
    most = (coef["bias_ms"] + coef["per_token_ms"] * data.C + coef["decode_kv_ms"] * top
            + coef["prefill_attention_ms"] * 2 * data.C * top
            + coef["per_prefill_request_ms"] * n)
    for j in range(1, N + 1):
        tok = sum(tok_j[j])
        ne = md.new_bool_var(f"ne{j}")
        md.add(tok <= data.C * ne)                                      # (4) C
        md.add(tok >= ne)
        md.add(sum(occ_j[j]) <= data.M)                                 # (4) M
        if limit_j:
            md.add(sum(act_j[j]) <= data.J)                             # J running
        nonempty.append(ne)
        fine = (coef["bias_ms"] * ne + coef["per_token_ms"] * tok
                + coef["decode_kv_ms"] * sum(kv_j[j])
                + coef["prefill_attention_ms"] * sum(units_j[j])
                + coef["per_prefill_request_ms"] * sum(chunks_j[j]))
        if data.div == 1:
            cost = fine
        else:  # the clock counts whole units: ⌊fine cost / div⌋
            cost = md.new_int_var(0, most // data.div + 1, f"cost{j}")
            md.add(data.div * cost <= fine)
            md.add(fine <= data.div * cost + data.div - 1)
        if arrive_j[j]:
            md.add_max_equality(start[j], [end[j - 1], *arrive_j[j]])
        else:
            md.add(start[j] == end[j - 1])
        md.add(end[j] == start[j] + cost)
    for j in range(len(nonempty) - 1):                                  # empty batches last
        md.add_implication(nonempty[j + 1], nonempty[j])
    # the SLO obligations of the requests in the objective
    completes: list[list[tuple[Any, Any]]] = [[] for _ in range(N + 1)]
    for i in range(n):
        if met[i] is None:
            continue
        dl = data.deadline(i)
        assert dl is not None
        # the batch completing the obligation ends by the deadline, so it is among the first
        # (dl − first arrival) / min_batch batches
        last_j = min(N, (dl - t_min) // data.min_batch())
        obligation = done if data.needs_finish(i) else has1
        if last_j < 1:
            md.add(met[i] == 0)
            continue
        md.add_implication(met[i], obligation[i][last_j])
        first_at = md.new_int_var(t_min, H, f"first{i}") if data.needs_first(i) else None
        finish_at = md.new_int_var(t_min, H, f"finish{i}") if data.needs_finish(i) else None
        for j in range(1, N + 1):
            event = md.new_bool_var(f"ev{i}_{j}")    # the obligation is completed in batch j
            md.add(event == obligation[i][j] - obligation[i][j - 1])
            completes[j].append((met[i], event))
            if first_at is not None:
                f = md.new_bool_var(f"f{i}_{j}")
                md.add(f == has1[i][j] - has1[i][j - 1])
                md.add(first_at == end[j]).only_enforce_if(f)
            if finish_at is not None:
                md.add(finish_at == end[j]).only_enforce_if(event)
        ttft, tpot, e2e = data.ttft[i], data.tpot[i], data.e2e[i]
        if ttft is not None:
            assert first_at is not None
            md.add(first_at <= data.T[i] + ttft).only_enforce_if(met[i])
        if e2e is not None:
            assert finish_at is not None
            md.add(finish_at <= data.T[i] + e2e).only_enforce_if(met[i])
        if tpot is not None:
            assert first_at is not None and finish_at is not None
            md.add(finish_at - first_at <= tpot).only_enforce_if(met[i])
    # the last non-empty batch completes an obligation: the model's batches are the prefix of
    # a schedule up to the last obligation it meets
    for j in range(1, N + 1):
        last = [nonempty[j - 1]] + ([nonempty[j].negated()] if j < N else [])
        witnesses = []
        for mi, ev in completes[j]:
            both = md.new_bool_var("")
            md.add_bool_and([mi, ev]).only_enforce_if(both)
            witnesses.append(both)
        md.add_bool_or([*witnesses, *(lit.negated() for lit in last)])
    # interchangeable requests (same lengths, arrival and targets): the first is met first
    groups: dict[tuple, list[int]] = {}
    for i in range(n):
        if met[i] is not None:
            key = (int(data.I[i]), int(data.O[i]), data.T[i], data.ttft[i], data.tpot[i],
                   data.e2e[i])
            groups.setdefault(key, []).append(i)
    for members in groups.values():
        for first, second in itertools.pairwise(members):
            md.add_implication(met[second], met[first])
    md.maximize(sum(x for x in met if x is not None))
    return md, {"c": c, "e": e, "dec": dec, "met": met, "S": S, "m": m}


@dataclass
class _Solved:
    ending: str                  # optimal | feasible | infeasible | no_solution | error
    objective: float | None
    bound: float | None          # a bound only with a solution (see ``_solve``)
    solution: Any = None
    runtime_s: float = 0.0


def _solve(md, time_limit_s: float, workers: int, collect=None,
           progress: Progress = SILENT) -> _Solved:
    """CP-SAT on ``md`` (the project's sub-solver settings, with probing off in presolve: on
    these models it took most of a 10 s limit before the search started). Maximization:
    CP-SAT's bound counts only when it has a solution (else it reports 0)."""
    solver = cpsat_backend.subsolver(max(time_limit_s, 0.05), workers)
    solver.parameters.cp_model_probing_level = 0
    if progress.verbose:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = progress.log
    t0 = time.perf_counter()
    status = cpsat_backend.solve_stoppable(solver, md)
    ending = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
              cp_model.INFEASIBLE: "infeasible", cp_model.UNKNOWN: "no_solution"}.get(
                  status, "error")
    found = ending in ("optimal", "feasible")
    return _Solved(ending, solver.objective_value if found else None,
                   solver.best_objective_bound if found else None,
                   collect(solver.value) if found and collect is not None else None,
                   time.perf_counter() - t0)


def _own_work(data: _Data, i: int) -> tuple[int, int]:
    """Fine units request i adds, at the least, to the batches up to its first token and to
    those of its later tokens, besides their bias: its prompt (⌈I/C⌉ chunks whose c² + 2mc sum
    to I²), then per later token a decode or the end of a refill, whichever costs less."""
    c = data.coef
    I, O = int(data.I[i]), int(data.O[i])
    prompt = (c["per_token_ms"] * I + c["prefill_attention_ms"] * I * I
              + c["per_prefill_request_ms"] * math.ceil(I / data.C))
    later = sum(min(c["per_token_ms"] + c["decode_kv_ms"] * (I + t - 1),
                    c["per_token_ms"] * (I + t) + c["prefill_attention_ms"] * (I + t) ** 2
                    + c["per_prefill_request_ms"]) for t in range(1, O))
    return prompt, later


def _energy_cuts(md, data: _Data, met: list[Any]) -> None:
    """Redundant cuts on the met variables (energetic reasoning). For a window [a, b], a from
    the arrivals and b from the deadlines, the batches that take a met request whose arrival
    and obligation deadline lie in the window to that obligation lie in the window too: their
    times add up to at most b − a, and each is its bias plus what its requests add
    (``_own_work``; request k takes ⌈I/C⌉ batches to its first token and O − 1 more to its last
    at least). On the clock a batch may lose up to one unit (floor)."""
    chosen = [i for i in range(data.n) if met[i] is not None]
    if len(chosen) < 2:
        return
    bias = data.coef["bias_ms"] - data.div + 1   # what a batch's bias is worth on the clock
    work = {i: _own_work(data, i) for i in chosen}
    first_dl = {i: data.T[i] + t for i in chosen if (t := data.ttft[i]) is not None}
    last_dl = {i: d for i in chosen
               if data.needs_finish(i) and (d := data.deadline(i)) is not None}
    starts = sorted({data.T[i] for i in chosen})
    ends = sorted({*first_dl.values(), *last_dl.values()})
    for a in starts:
        for b in ends:
            terms: list[tuple[int, int, Any]] = []   # (fine units, batches, met)
            for i in chosen:
                prompt = math.ceil(int(data.I[i]) / data.C)
                if data.T[i] < a:
                    continue
                if i in last_dl and last_dl[i] <= b:
                    terms.append((sum(work[i]), prompt + int(data.O[i]) - 1, met[i]))
                elif i in first_dl and first_dl[i] <= b:
                    terms.append((work[i][0], prompt, met[i]))
            if len(terms) < 2:
                continue
            lhs = sum(w * m for w, _, m in terms)
            if bias > 0:
                batches = md.new_int_var(0, max(k for _, k, _ in terms), "")
                for _, k, m in terms:
                    md.add(batches >= k * m)
                lhs += bias * batches
            md.add(lhs <= data.div * (b - a))


def _energy_bound(data: _Data, time_limit_s: float, workers: int) -> int | None:
    """The most requests the energetic cuts alone allow to be met (``_energy_cuts`` on the met
    variables only: a small model); None when not proven in time."""
    md = cp_model.CpModel()
    met: list[Any] = [md.new_bool_var(f"met{i}") if data.kind[i] == "model" else None
                      for i in range(data.n)]
    _energy_cuts(md, data, met)
    md.maximize(sum(m for m in met if m is not None))
    out = _solve(md, time_limit_s, workers)
    return None if out.bound is None else math.floor(out.bound + 1e-6)


def _hint(md, data: _Data, var: dict, N: int, plan: Plan, met: np.ndarray) -> bool:
    """Hint the model with ``plan`` (at most N batches), completed into a full assignment by a
    short solve with those values fixed; False when the plan does not fit the model."""
    for j, state in enumerate(_walk(data, plan), start=1):
        for i in range(data.n):
            md.add_hint(var["c"][i][j], int(state["c"][i]))
            md.add_hint(var["S"][i][j], int(state["S"][i]))
            md.add_hint(var["m"][i][j], int(state["m"][i]))
            if var["e"][i][j] is not None:
                md.add_hint(var["e"][i][j], int(state["e"][i]))
    for j in range(len(plan) + 1, N + 1):
        for i in range(data.n):
            md.add_hint(var["c"][i][j], 0)
    for i in range(data.n):
        if var["met"][i] is not None:
            md.add_hint(var["met"][i], int(bool(met[i])))
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.max_time_in_seconds = 2.0
    solver.parameters.num_workers = 1
    if solver.solve(md) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return False
    md.clear_hints()
    for k in range(len(md.proto.variables)):
        v = md.get_int_var_from_proto_index(k)
        md.add_hint(v, solver.value(v))
    return True


def _plan_from_values(data: _Data, var: dict, N: int, value) -> Plan:
    plan = []
    for j in range(1, N + 1):
        batch: dict[str, Any] = {"evict": [], "prefill": {}, "decode": []}
        for i in range(data.n):
            rid = data.ids[i]
            if var["e"][i][j] is not None and value(var["e"][i][j]):
                batch["evict"].append(rid)
            tokens = int(value(var["c"][i][j]))
            if tokens and value(var["dec"][i][j]):
                batch["decode"].append(rid)
            elif tokens:
                batch["prefill"][rid] = tokens
        if batch["evict"] or batch["prefill"] or batch["decode"]:
            plan.append(batch)
    return plan


# --------------------------------------------------------------------- the bound

def attainment_bound(instance: Instance, time_limit_s: float = 10.0, workers: int = 2,
                     progress: Progress = SILENT, heuristics: bool = True) -> AttainmentBound:
    """The proven upper bound on the requests of ``instance`` meeting their SLOs, the best
    schedule found and its plan (see the module doc). ``time_limit_s`` covers the replay
    policies, the model's building and CP-SAT; ``workers`` are CP-SAT's threads;
    ``heuristics``: start from the replay policies' schedules (without them the model is
    always solved, as the tests do to check it)."""
    t0 = time.perf_counter()
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, int | float) or not (
            math.isfinite(time_limit_s) and time_limit_s > 0):
        raise OptionError("must be positive and finite", field="time_limit_s",
                          value=time_limit_s)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise OptionError("must be a positive integer", field="workers", value=workers)
    data = _data(instance)
    n = data.n
    notes: list[str] = []
    solo, solo_exact = _solo_met(instance, data)
    constant = data.kind.count("free") + solo
    modeled = [i for i in range(n) if data.kind[i] == "model"]
    progress.stage("replay policies")
    heur = _heuristics(instance, data) if heuristics else []
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
        energy = _energy_bound(data, min(1.0, 0.1 * time_limit_s), workers)
        if energy is not None and energy < len(modeled):
            upper = min(upper, constant + energy)
            notes.append(f"energetic cuts: at most {energy} of the {len(modeled)} requests "
                         "with deadlines")
    if modeled and (best is None or best[0] < upper):
        H = max(d for i in modeled if (d := data.deadline(i)) is not None)
        N = _horizon_batches(data)
        notes.append(f"N = {N} batches, horizon {H / data.unit:.6g} ms")

        def model(at_most: int, at_least: int | None = None):
            md, var = build_model(data, N, H)
            met_count = sum(var["met"][i] for i in modeled)
            md.add(met_count <= at_most)
            if at_least is not None:   # a question of feasibility
                md.clear_objective()
                md.add(met_count >= at_least)
            return md, var

        def solve(md, var, limit: float) -> _Solved:
            out = _solve(md, limit, workers, progress=progress,
                         collect=lambda value: (_plan_from_values(data, var, N, value),
                                                [i for i in modeled if value(var["met"][i])]))
            if out.ending == "error":
                raise InternalError("the attainment model ended in error")
            if out.solution is not None:
                nonlocal best
                found, claimed = out.solution
                plan = _extend(data, found)
                _, count, met = _replay(instance, plan)
                missed = [data.ids[i] for i in claimed if not met[i]]
                if data.exact and missed:
                    raise InternalError(f"the attainment model's plan, replayed, misses the "
                                        f"SLO of {missed}, which the model counts as met")
                if best is None or count > best[0]:
                    best = (count, plan)
            return out

        # 1. can the bound be reached? (CP-SAT decides "at least k met" far sooner than it
        # proves the same bound while maximizing)
        probes_until = t0 + PROBE_SHARE * time_limit_s
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
                fits = len(prefix) <= N and _hint(md, data, var, N, prefix, prefix_met)
                if not fits and data.exact:
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
        best = (_replay(instance, plan)[1], plan)
    if best[0] > upper:
        raise InternalError(f"a schedule meets {best[0]} SLOs, above the proven bound {upper}")
    if not data.exact:
        notes.append(f"clock of 1e-{round(math.log10(data.unit))} ms with batch times rounded "
                     f"down: every target relaxed by {data.slack} units")
    if not solo_exact:
        notes.append("a request with only a TPOT target is counted by a lower bound on its "
                     "TPOT (a refill may be faster than a decode)")
    return AttainmentBound(
        met_upper=upper, met_best=best[0], requests=n,
        status="optimal" if best[0] == upper else "feasible",
        runtime_s=time.perf_counter() - t0, plan={"mode": "continuous", "plan": best[1]},
        batches=N, model_status=ending, exact=data.exact and solo_exact,
        heuristic_best=heuristic[0], heuristic_policy=heuristic[1], notes=tuple(notes))
