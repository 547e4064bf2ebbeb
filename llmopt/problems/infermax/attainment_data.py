"""The attainment bound's data (``llmopt.problems.infermax.attainment``): the instance as the
model reads it (costs, targets and arrivals on the model's integer clock, the thresholds of
each request's obligations, the horizon in batches), and what each request can do alone (the
requests outside the model: always met, never met, met alone)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from llmopt.data.cost import InferMaxProfile
from llmopt.data.instance import Instance
from llmopt.data.limits import resolve_limits
from llmopt.errors import InstanceError, InternalError
from llmopt.schedule.metrics import MET_TOLERANCE_MS

MAX_ATTAINMENT_REQUESTS = 16
COEFFICIENTS = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")
MAX_DECIMALS = 12
# the model's clock spans at most this many units: CP-SAT's presolve was seen to return a wrong
# optimum with time domains near 1e12 units next to cost coefficients near 1e10
CLOCK_UNITS = 10 ** 9
Plan = list[dict[str, Any]]


# --------------------------------------------------------------------- data

@dataclass
class Data:
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

    def subset(self, chosen: list[int]) -> Data:
        """The requests ``chosen`` alone, on the same clock (thresholds and slack kept: the
        slack of all the requests covers fewer)."""
        def pick(values: list[Any]) -> list[Any]:
            return [values[i] for i in chosen]

        return replace(self, ids=tuple(pick(list(self.ids))), I=self.I[chosen],
                       O=self.O[chosen], T_ms=self.T_ms[chosen], T=pick(self.T),
                       ttft=pick(self.ttft), e2e=pick(self.e2e), tpot=pick(self.tpot),
                       kind=pick(self.kind))

    def chunk_cost(self, c: int, before: int) -> int:
        """Fine units a prompt (or refill) chunk of c tokens after ``before`` cached KVs adds to
        its batch (section 3.2): per_token·c + prefill_attention·c·(c + 2·before) +
        per_prefill_request."""
        k = self.coef
        return (k["per_token_ms"] * c + k["prefill_attention_ms"] * c * (c + 2 * before)
                + k["per_prefill_request_ms"])

    def decode_cost(self, kv: int) -> int:
        """Fine units a decode reading ``kv`` cached KVs adds to its batch: per_token +
        decode_kv·kv."""
        return self.coef["per_token_ms"] + self.coef["decode_kv_ms"] * kv

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


def check_instance(instance: Instance) -> None:
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


def prepare(instance: Instance) -> Data:
    check_instance(instance)
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
    data = Data(tuple(instance.ids), I, O, instance.arrival_ms.copy(), M, C,
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
            N = horizon_batches(data)
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


def _set_thresholds(data: Data, targets: list[np.ndarray]) -> None:
    ttft, tpot, e2e = targets
    for i in range(data.n):
        data.ttft[i] = (None if math.isnan(ttft[i])
                        else _threshold(float(ttft[i]), 1, data.unit, data.slack))
        data.e2e[i] = (None if math.isnan(e2e[i])
                       else _threshold(float(e2e[i]), 1, data.unit, data.slack))
        data.tpot[i] = (None if math.isnan(tpot[i]) or data.O[i] < 2 else
                        _threshold(float(tpot[i]), int(data.O[i]) - 1, data.unit, data.slack))


def horizon_batches(data: Data, requests: list[int] | None = None) -> int:
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


def alone_finish_ms(data: Data, i: int) -> float:
    """The least time from request i's arrival to its last obligation with the machine to
    itself (its first token, and its last when it has a finish obligation)."""
    p, I, O = data.profile, int(data.I[i]), int(data.O[i])
    least = _prefill_lb_ms(p, data.C, I)
    if data.needs_finish(i):
        least += _later_tokens_lb_ms(p, data.C, I, O)[0]
    return float(least)


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


def solo_met(instance: Instance, data: Data) -> tuple[int, bool]:
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


def walk(data: Data, plan: Plan) -> list[dict[str, np.ndarray]]:
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
