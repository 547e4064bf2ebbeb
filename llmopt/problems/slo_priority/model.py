"""The SLO-aware priority-mapping problem (Huang et al. 2025, section 3.1) and its evaluator.

Requests i = 0..N−1 have an input length l_i, an (predicted) output length l_o,i and SLO
targets (TTFT, TPOT, E2E; any of them). A decision is a priority order p and the batch a_i of
every request (eqs 10–13): the batches run one after another on one instance, each a static
batch of at most ``max_batch`` requests that starts when the previous one has finished.

Latency of request i in a batch of b requests (the predictor, section 4.2):

- eq 14: t_p(b, l_i) = α_p·b·l_i + β_p·b + γ_p·l_i + δ_p (its prefill);
- eqs 15–16: t_d(b, l_i, l_o) = Σ_{k=1..l_o} τ_d(b, l_i + k), τ_d bilinear like eq 14
  (``BilinearProfile.request_decode_ms``, closed form);
- eq 17: t_exec = t_p + t_d;
- eq 11: t_wait,i = Σ over the batches before a_i of the batch's duration, the largest t_exec of
  its requests (the batch is static: the next one starts when all its requests have finished);
- eq 4: E2E_i = t_wait,i + t_exec,i; eq 8: TTFT_i = t_wait,i + t_p,i;
- TPOT_i = (E2E_i − TTFT_i) / (l_o,i − 1) = t_d / (l_o − 1), the project's definition
  (``llmopt.schedule.metrics``; eq 19 divides by l_o instead); a request of one output token
  has no TPOT and meets any TPOT target.

Eq 7 gives code requests an E2E target and chat requests TTFT and TPOT targets; here a request
meets its SLO when every target it has holds (within ``MET_TOLERANCE_MS``), which is eq 7 for
those two kinds. n = Σ x_i (eq 6), t = Σ_i E2E_i over all requests (eq 3), G = n / t (eq 2).
G is reported in requests per second, the paper's unit (Figs 3–5).

Since TPOT does not depend on the waiting time and TTFT and E2E grow with it, request i in a
batch of b requests meets its SLO exactly when the batch starts by ``slack[i][b]`` (−inf when
the TPOT target fails at that batch size or the request misses even at time 0; +inf when it has
only a TPOT target that holds). Every solver here evaluates G through these tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmopt.data.cost.bilinear import BilinearProfile
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, InternalError, OptionError
from llmopt.schedule.metrics import MET_TOLERANCE_MS

Batches = tuple[tuple[int, ...], ...]  # request indices per batch, in priority order


@dataclass(frozen=True)
class SloPriorityData:
    """The arrays every solver reads. Tables are indexed ``[i][b]`` for b = 1..max_batch
    (column 0 unused); times in ms."""

    ids: list[str]
    input_tokens: list[int]
    output_tokens: list[int]
    ttft_slo_ms: list[float | None]
    tpot_slo_ms: list[float | None]
    e2e_slo_ms: list[float | None]
    slo_class: list[str | None]
    max_batch: int
    profile: BilinearProfile
    prefill_ms: list[list[float]]
    decode_ms: list[list[float]]
    exec_ms: list[list[float]]
    slack_ms: list[list[float]]
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def unmeetable(self) -> list[str]:
        """Requests that miss their SLO even alone at time 0 in a batch of any allowed size."""
        return [self.ids[i] for i in range(self.n)
                if all(self.slack_ms[i][b] < 0 for b in range(1, self.max_batch + 1))]

    @classmethod
    def from_instance(cls, instance: Instance, max_batch: int | None = None) -> SloPriorityData:
        """Validate ``instance`` for this problem: a bilinear profile, every request with at
        least one SLO target, max batch (``system.clients`` unless given) at least 1. Lengths
        beyond the profile's ``valid_max_tokens`` give a warning naming the request."""
        profile = instance.profile
        file = instance.label()
        if not isinstance(profile, BilinearProfile):
            raise InstanceError("slo-priority needs a profile of family 'bilinear' (Huang et "
                                "al. eqs 14-16)", file=file, field="model",
                                value=profile.name)
        if max_batch is None:
            max_batch = instance.system.clients
            where = "system.clients"
        else:
            where = "option max_batch"
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise OptionError("the maximum batch size must be an integer of at least 1",
                              file=file if where == "system.clients" else None, field=where,
                              value=max_batch)
        warnings: list[str] = []
        for k, r in enumerate(instance.requests):
            if r.ttft_slo_ms is None and r.tpot_slo_ms is None and r.e2e_slo_ms is None:
                raise InstanceError("has no SLO target (give ttft_slo_ms, tpot_slo_ms or "
                                    "e2e_slo_ms, a slo_class, or an slo: section)", file=file,
                                    field=f"requests[{k}] (id {r.id})", value=None,
                                    has_value=False)
            limit = profile.valid_max_tokens
            if limit is not None and r.input_tokens + r.output_tokens > limit:
                warnings.append(
                    f"request {r.id}: input + output = {r.input_tokens + r.output_tokens} "
                    f"tokens, beyond the predictor's stated validity ({limit} tokens, "
                    f"profile {profile.name})")
        reqs = instance.requests
        n, B = len(reqs), max_batch
        pre = [[math.nan] * (B + 1) for _ in range(n)]
        dec = [[math.nan] * (B + 1) for _ in range(n)]
        exe = [[math.nan] * (B + 1) for _ in range(n)]
        slack = [[-math.inf] * (B + 1) for _ in range(n)]
        for i, r in enumerate(reqs):
            for b in range(1, B + 1):
                p = profile.prefill_ms(b, r.input_tokens)                          # eq 14
                d = profile.request_decode_ms(b, r.input_tokens, r.output_tokens)  # eqs 15–16
                pre[i][b], dec[i][b], exe[i][b] = p, d, p + d                      # eq 17
                slack[i][b] = _slack(p, d, r.output_tokens, r.ttft_slo_ms, r.tpot_slo_ms,
                                     r.e2e_slo_ms)
        return cls(ids=[r.id for r in reqs], input_tokens=[r.input_tokens for r in reqs],
                   output_tokens=[r.output_tokens for r in reqs],
                   ttft_slo_ms=[r.ttft_slo_ms for r in reqs],
                   tpot_slo_ms=[r.tpot_slo_ms for r in reqs],
                   e2e_slo_ms=[r.e2e_slo_ms for r in reqs],
                   slo_class=[r.slo_class for r in reqs], max_batch=B, profile=profile,
                   prefill_ms=pre, decode_ms=dec, exec_ms=exe, slack_ms=slack,
                   warnings=warnings)


def _slack(prefill: float, decode: float, output: int, ttft: float | None, tpot: float | None,
           e2e: float | None) -> float:
    """Latest batch start (ms) at which the request meets every target it has (eq 7)."""
    if tpot is not None and output > 1 and decode / (output - 1) > tpot + MET_TOLERANCE_MS:
        return -math.inf
    latest = math.inf
    if ttft is not None:
        latest = min(latest, ttft + MET_TOLERANCE_MS - prefill)              # eq 8
    if e2e is not None:
        latest = min(latest, e2e + MET_TOLERANCE_MS - (prefill + decode))    # eq 4
    return latest if latest >= 0 else -math.inf


def g_per_s(met: int, total_ms: float) -> float:
    """Eq 2 in requests per second: n / t with t in ms."""
    return 0.0 if met == 0 else met / (total_ms / 1000.0)


@dataclass(frozen=True)
class Evaluation:
    """A plan evaluated (eqs 2–12): per request its batch, batch size, wait, TTFT, TPOT, E2E
    and whether it met its SLO; n, t and G."""

    batches: Batches
    batch_of: list[int]
    wait_ms: list[float]
    ttft_ms: list[float]
    tpot_ms: list[float | None]
    e2e_ms: list[float]
    met: list[bool]
    n_met: int
    total_ms: float

    @property
    def g_per_s(self) -> float:
        return g_per_s(self.n_met, self.total_ms)


def check_batches(data: SloPriorityData, batches: Batches) -> None:
    """Every request exactly once, every batch of 1..max_batch requests (a solver's bug
    otherwise)."""
    seen = sorted(i for b in batches for i in b)
    if seen != list(range(data.n)):
        raise InternalError(f"a plan must hold every request once, got {batches}")
    if any(not 1 <= len(b) <= data.max_batch for b in batches):
        raise InternalError(f"a batch size outside 1..{data.max_batch}: {batches}")


def evaluate(data: SloPriorityData, batches: Batches) -> Evaluation:
    """Evaluate a plan: batches run in order, each lasting its longest request (eq 11)."""
    check_batches(data, batches)
    n = data.n
    batch_of, wait = [0] * n, [0.0] * n
    ttft, e2e = [0.0] * n, [0.0] * n
    tpot: list[float | None] = [None] * n
    met = [False] * n
    start = 0.0
    for k, members in enumerate(batches):
        b = len(members)
        for i in members:
            batch_of[i], wait[i] = k, start
            ttft[i] = start + data.prefill_ms[i][b]
            e2e[i] = start + data.exec_ms[i][b]
            if data.output_tokens[i] > 1:
                tpot[i] = data.decode_ms[i][b] / (data.output_tokens[i] - 1)
            met[i] = start <= data.slack_ms[i][b]
        start += max(data.exec_ms[i][b] for i in members)
    return Evaluation(batches=batches, batch_of=batch_of, wait_ms=wait, ttft_ms=ttft,
                      tpot_ms=tpot, e2e_ms=e2e, met=met, n_met=sum(met), total_ms=sum(e2e))


def batches_from(order: list[int] | tuple[int, ...], sizes: list[int] | tuple[int, ...]
                 ) -> Batches:
    """The batches of a priority order cut into consecutive batch sizes (eq 10)."""
    out, pos = [], 0
    for s in sizes:
        out.append(tuple(order[pos:pos + s]))
        pos += s
    return tuple(out)


def max_size_cut(n: int, max_batch: int) -> list[int]:
    """Batch sizes all at the maximum (the last one takes the rest): Algorithm 1's sizes for
    both starting solutions."""
    sizes = [max_batch] * (n // max_batch)
    if n % max_batch:
        sizes.append(n % max_batch)
    return sizes
