"""SOLA: state-aware scheduling for SLO attainment (Hong et al. 2025, MLSys, section 4 and 5).

At every iteration SOLA reads the state of the requests and of the system, chooses which SLO to
optimize and which to hold as a constraint (Table 2), orders the requests (hierarchical
prioritization, section 4.4.2) and sizes the iteration's workload (eqs 1 and 2, section 4.4.3);
Algorithm 1 then forms the batch with peak-memory-aware admission (section 5.1).

State monitor (section 4.3), at the start of iteration i (``now``, ms):

- real-time TTFT of request r: ``t_TTFT = (first token or now) − arrival``; real-time TPOT of a
  request that has generated ``l_out ≥ 2`` tokens: ``t_TPOT = (now − first token) / (l_out − 1)``
  (0 before its second token);
- ``p_TTFT = max_r t_TTFT / T_TTFT`` over the requests in the system (the most urgent
  CANDIDATE_WINDOW waiting ones and every running one, settled TTFTs included, as the paper's
  "requests in the system"; counting only the TTFTs still open was tried, under the readings
  before issue 30, and lowered SOLA's attainment on instances/toy/slo-chat.yaml from 69 % to
  43 %) and ``p_TPOT = max_r t_TPOT /
  T_TPOT`` over those decoding; with per-request targets the ratio is taken per request (the
  paper has one target per run: the same thing then);
- the output-length distribution D_i: the outputs of finished requests, by input-length range
  (powers of two). The paper also splits by the requests' maximum output length, which llmopt's
  requests do not carry. The predicted remaining length ``l_left`` of a request that has generated
  ``l_out`` tokens is the median of the outputs in its range longer than ``l_out``, minus ``l_out``
  (all ranges when its own has none; PRIOR_OUTPUT_TOKENS in total before anything finished:
  a choice, the paper does not say);
- the KV memory ratio ``m_ratio``.

Strategy (section 4.4.1, Table 2). Using the means of p_TTFT and p_TPOT over the last
WINDOW_ITERATIONS iterations (the sliding window of section 4.4.2; its length is not given, 8 is
our choice): when p_TPOT > p_TTFT SOLA optimizes TPOT subject to TTFT, else TTFT subject to TPOT.
When both exceed 1, Table 2's third row converts the case to "p_TTFT > 1 > p_TPOT": SOLA optimizes
TTFT subject to TPOT, with the TPOT constraint loosened (Fig. 5) to the a%-level, a% being the
share of decoding requests meeting TPOT: every maximum over requests in eq 1 (and p_TPOT itself)
becomes the a%-level maximum, the a%-quantile (section 4.4.1).

Hierarchical prioritization (F_i): the phase optimized goes first (prefills for TTFT, decodes for
TPOT). Prefill requests (waiting, or running in a chunked prefill) are ordered by descending
predicted TTFT ``t_TTFT + C^p(r)`` relative to their target; decodes by descending predicted TPOT
``(t_TPOT · l_out + C^d(Q_{i−1}) · l_left) / (l_out + l_left)`` relative to theirs. Requests
evicted earlier (refills) come first among the prefills: their TTFT is settled and their decodes
wait on them (our choice; SOLA avoids preemption, section 4.1.2, so the paper has no rule).

Workload (section 4.4.3):

- TTFT subject to TPOT (eq 1): eq 1 adds the prefill part's cost C^p(Q_run) to the TPOT of every
  decoding request, so the decodes run in the same (mixed) iteration (Fig. 6); the prefill part
  may cost at most ``min_r (T_TPOT − t_TPOT) · l_out`` over the decoding requests with
  t_TPOT > 0. k_i, the iteration's tokens (decodes and prefill chunks, the tile-quantization of
  Sarathi-Serve the paper cites), is the largest multiple of TILE_TOKENS (128, the A100 tile)
  whose prefill chunks, taken in priority order, cost no more; when every prefill fits, all of
  them run and the decodes fill the batch budget C ("the decode request is added one by one
  until the total token number is k_i"); when not one tile fits, the iteration is decodes only.
- TPOT subject to TTFT (eq 2): every decode first; then prefills in priority order, as few as
  needed for every other waiting request r to keep ``t_TTFT + C^p(Q_run) + C^d(Q_run) + C^p(r)
  <= T_TTFT`` (n_i, the minimum number satisfying eq 2), each with as many prompt tokens as the
  batch budget C leaves. C^p(r), r's prefill latency, is predicted for the mixed iteration it will
  run in, C^p(r) + C^d(Q_run) (section 5.2: "we sum up the predicted latencies from two cost
  models for the mixed iteration").

Cost model (section 5.2, eqs 3 and 4): ``C^p = a0 Σ l_has·l_in + b0 Σ l_in² + c0 Σ l_in + d0``
and ``C^d = a1 Σ 1 + b1 Σ l_has + c1``, fitted by least squares to the instance's profile at
start (the paper fits them to offline profiling), scaled by γ_i (eq 5, the paper's last equation,
numbered 4 in the issue) after every iteration: ``γ_i = α t / C_0 + (1 − α) γ_{i−1}`` with t the
iteration's time, C_0 its unscaled prediction (C^p + C^d for a mixed one) and α = ALPHA.

Peak-memory-aware admission (section 5.1, after LightLLM): a waiting request is admitted only if
the predicted peak KV use of the running requests and it (each growing by one KV per token until
its predicted end, then freeing everything) stays within M. The test runs only when the KVs held
with the candidate's exceed MEMORY_THRESHOLD of M (section 6.4: "we use a memory threshold to
apply the memory prediction computation only when necessary"; the paper gives no value, 0.8 is
our choice), and is skipped too when even the sum of every request's largest predicted final
size fits. A refused request does not stop the scan (Algorithm 1, line 9: ``continue``). The
running requests' predictions used by the test are redone every PREDICTION_REFRESH finishes and
after a preemption, not at every finish (a choice, for speed: D_i moves little from one finish to
the next). An iteration in which no waiting request can start is decodes only and leaves the
monitor's window and γ as they are (``_decodes_only``). When KVs still run short (a prediction
was too low), the running decodes of lowest priority that are not in the batch are preempted
(recompute), as vLLM does: SOLA itself excludes preemption.

Readings. Where the text leaves a choice, :class:`SolaOptions` names it; the defaults follow the
lines quoted above, and ``SolaOptions.earlier()`` gives llmopt's readings before issue 30 (the
better-met SLO as the constraint when both fail; decodes only in what the prefills leave of k_i,
with a 128-token prefill tile when none fits; eq 2's C^p(r) alone; the peak test always, with
PRIOR_OUTPUT_TOKENS-long outputs predicted before anything finished). docs/reproduction.md gives
each reading's effect.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError
from llmopt.policies.base import RUNNING, Batch, IterationPolicy, ReplicaView, Steady
from llmopt.policies.infermax.unified import check_continuous

TILE_TOKENS = 128
WINDOW_ITERATIONS = 8
ALPHA = 0.5
PRIOR_OUTPUT_TOKENS = 256
PREDICTION_REFRESH = 16  # finishes after which the running requests' predictions are redone
CANDIDATE_WINDOW = 32  # waiting requests SOLA reads per iteration (earliest TTFT deadline first)
MAX_DEADLINE_MS = 1e15  # the deadline of a request without a TTFT target
MEMORY_THRESHOLD = 0.8  # KV share above which the peak-memory test runs (section 6.4)
UNTIL_ARRIVAL = Steady(math.inf, until_arrival=True)
BLOCKED = Steady(math.inf, until_arrival=False)


@dataclass(frozen=True)
class SolaOptions:
    """The readings of the paper where its text leaves a choice; the defaults follow the text
    (see the module doc, "Readings"), the alternatives are llmopt's earlier choices.

    - ``both_failing``: Table 2, third row (p_TTFT > 1 and p_TPOT > 1). ``"optimize-ttft"``
      (default): the row's own conversion to "p_TTFT > 1 > p_TPOT", i.e. optimize TTFT subject to
      TPOT, the TPOT constraint (and p_TPOT) loosened to the a%-level of section 4.4.1, a% the
      share of decoding requests meeting TPOT. ``"better-met"``: the SLO more requests meet is
      the constraint (the earlier reading).
    - ``ttft_decodes``: optimize TTFT subject to TPOT (section 4.4.3). ``"all"`` (default): every
      running decode is in the iteration and k_i, the iteration's tokens, is the largest tile
      multiple whose prefill part keeps eq 1 (eq 1 adds C^p to the decoding requests' TPOT: they
      run in the same, mixed, iteration; Fig. 6); no prefill when none fits. ``"left-of-k"``: the
      prefill part takes k_i and decodes get what is left of it, with one tile of prefill when
      nothing fits (the earlier reading).
    - ``eq2_prediction``: the prefill latency C^p(r) of a waiting request in eq 2. ``"mixed"``
      (default): the latency of the mixed iteration it will run in, C^p(r) + C^d(Q_run) (section
      5.2: "we sum up the predicted latencies from two cost models for the mixed iteration").
      ``"alone"``: C^p(r) only (the earlier reading).
    - ``memory_check``: the peak-memory test of section 5.1. ``"threshold"`` (default): only when
      the KVs held with the candidate's exceed ``memory_threshold`` of M (section 6.4: "we use a
      memory threshold to apply the memory prediction computation only when necessary"; the
      paper gives no value, 0.8 is our choice). ``"always"``: whenever the worst case could
      overflow (the earlier reading).
    """

    both_failing: Literal["optimize-ttft", "better-met"] = "optimize-ttft"
    ttft_decodes: Literal["all", "left-of-k"] = "all"
    eq2_prediction: Literal["mixed", "alone"] = "mixed"
    memory_check: Literal["threshold", "always"] = "threshold"
    memory_threshold: float = MEMORY_THRESHOLD

    @classmethod
    def earlier(cls) -> SolaOptions:
        """Every earlier reading (llmopt before issue 30), for comparison."""
        return cls(both_failing="better-met", ttft_decodes="left-of-k", eq2_prediction="alone",
                   memory_check="always")


@dataclass
class SolaCostModel:
    """Eqs 3 and 4 of section 5.2 with the scaling ratio γ of eq 5."""

    prefill: tuple[float, float, float, float]  # a0 (Σ m·c), b0 (Σ c²), c0 (Σ c), d0
    decode: tuple[float, float, float]  # a1 (requests), b1 (Σ KVs read), c1
    gamma: float = 1.0

    @classmethod
    def fit(cls, profile: object, max_tokens: int) -> SolaCostModel:
        """Least squares on batches timed by the profile's ``iteration_ms``: prefill batches of
        1–4 chunks of 16..max_tokens tokens after 0..8K cached ones, and decode batches of
        1..512 requests reading up to 512K KVs."""
        rng = np.random.default_rng(0)
        time = profile.iteration_ms  # type: ignore[attr-defined]
        rows, ys = [], []
        for _ in range(400):
            n = int(rng.integers(1, 5))
            c = rng.integers(16, max(max_tokens // n, 17), n)
            m = rng.choice([0, 0, 512, 2048, 8192], n)
            rows.append([float((m * c).sum()), float((c * c).sum()), float(c.sum()), 1.0])
            ys.append(time(int(c.sum()), 0, 0.0, float((c * c + 2 * m * c).sum()), n))
        prefill = np.linalg.lstsq(np.array(rows), np.array(ys), rcond=None)[0]
        rows, ys = [], []
        for _ in range(400):
            n = int(rng.integers(1, 513))
            kv = float(n * rng.integers(1, 1025))
            rows.append([float(n), kv, 1.0])
            ys.append(time(0, n, kv, 0.0, 0))
        decode = np.linalg.lstsq(np.array(rows), np.array(ys), rcond=None)[0]
        return cls(tuple(float(x) for x in prefill),  # type: ignore[arg-type]
                   tuple(float(x) for x in decode))  # type: ignore[arg-type]

    def prefill_ms0(self, mc: float, cc: float, c: float) -> float:
        """Unscaled C^p of chunks with Σ m·c = ``mc``, Σ c² = ``cc``, Σ c = ``c`` (0 if none)."""
        if c <= 0:
            return 0.0
        a0, b0, c0, d0 = self.prefill
        return a0 * mc + b0 * cc + c0 * c + d0

    def decode_ms0(self, n: int, kv: float) -> float:
        if n <= 0:
            return 0.0
        a1, b1, c1 = self.decode
        return a1 * n + b1 * kv + c1

    def observe(self, actual_ms: float, predicted0_ms: float) -> None:
        """Eq 5: γ_i = α · t / C_0 + (1 − α) · γ_{i−1}."""
        if predicted0_ms > 0 and actual_ms > 0:
            self.gamma = ALPHA * actual_ms / predicted0_ms + (1 - ALPHA) * self.gamma


class LengthDistribution:
    """D_i of section 4.3: finished outputs by input-length range (powers of two)."""

    def __init__(self) -> None:
        self.by_range: dict[int, list[int]] = {}
        self.all: list[int] = []

    def add(self, input_tokens: int, output_tokens: int) -> None:
        bisect.insort(self.by_range.setdefault(input_tokens.bit_length(), []), output_tokens)
        bisect.insort(self.all, output_tokens)

    def predicted_total(self, input_tokens: int, generated: int) -> int:
        """The median output among those longer than ``generated`` (see the module doc)."""
        for seen in (self.by_range.get(input_tokens.bit_length()), self.all):
            if seen:
                at = bisect.bisect_right(seen, generated)
                if at < len(seen):
                    return seen[(at + len(seen) - 1) // 2]
        return max(PRIOR_OUTPUT_TOKENS, generated + 1)

    def longest_left(self) -> int:
        """No prediction leaves more tokens to generate than this."""
        return max(PRIOR_OUTPUT_TOKENS, self.all[-1] if self.all else 0)


def quantile_level(ratios: list[float], level: float) -> float:
    """The ``level``-quantile (a%-level maximum) of ``ratios`` (the maximum at level 1)."""
    if not ratios:
        return 0.0
    ordered = sorted(ratios)
    k = max(math.ceil(level * len(ordered)) - 1, 0)
    return ordered[min(k, len(ordered) - 1)]


class Sola(IterationPolicy):
    """See the module doc."""

    name = "sola"

    def __init__(self, options: SolaOptions | None = None) -> None:
        self.options = options or SolaOptions()
        self.cost: SolaCostModel | None = None
        self.lengths = LengthDistribution()
        self.window: deque[tuple[float, float]] = deque(maxlen=WINDOW_ITERATIONS)
        self.ttft_target: list[float] = []
        self.tpot_target: list[float] = []
        self.first_ms: list[float] = []
        self.deadlines: list[float] = []
        self.running_peak = _RunningPeak()
        self.last_prediction0 = 0.0
        self.last_decode_ms = 0.0
        self.last_start = -1.0
        self.mode = "ttft"
        self.blocked = False  # this iteration's batch is decodes only: nothing could start
        self.arrivals_sorted: list[float] = []
        self.later_min_rank: list[float] = []
        self.level = 1.0  # a of the a%-level maximum (1: the plain maximum)
        self.predictions = 0
        self.abs_error_sum = 0.0

    # ------------------------------------------------------------------ setup

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        label = instance.label()
        check_continuous(instance, replica)
        ttft, tpot = instance.slo_targets("ttft_slo_ms"), instance.slo_targets("tpot_slo_ms")
        if np.isnan(ttft).all() or np.isnan(tpot).all():
            raise InstanceError("sola schedules by TTFT and TPOT targets: give both (slo: "
                                "{ttft_ms, tpot_ms} or slo.multiple)", file=label, field="slo")
        self.ttft_target = np.where(np.isnan(ttft), math.inf, ttft).tolist()
        self.tpot_target = np.where(np.isnan(tpot), math.inf, tpot).tolist()

    def priority_keys(self, instance: Instance) -> np.ndarray:
        """Waiting requests in order of TTFT deadline (arrival + target): the window SOLA
        reads each iteration holds the most urgent (the oldest, when targets are equal)."""
        ttft = instance.slo_targets("ttft_slo_ms")
        return instance.arrival_ms + np.where(np.isnan(ttft), MAX_DEADLINE_MS, ttft)

    def attach(self, replica: ReplicaView) -> None:
        self.cost = SolaCostModel.fit(replica.profile, int(replica.C))
        self.first_ms = replica.first_ms
        deadlines = self.priority_keys(replica.instance)
        self.deadlines = [float(deadlines[i]) for i in replica.by_rank]  # by rank: sorted
        # the most urgent rank among the requests arriving at or after each arrival time
        by_arrival = np.argsort(replica.instance.arrival_ms, kind="stable")
        self.arrivals_sorted = replica.instance.arrival_ms[by_arrival].tolist()
        ranks = np.asarray(replica.rank_of)[by_arrival]
        self.later_min_rank = [*np.minimum.accumulate(ranks[::-1])[::-1].tolist(), math.inf]

    def finished(self, replica: ReplicaView, i: int) -> None:
        self.lengths.add(replica.I[i], replica.O[i])
        self.running_peak.finished(i)

    # ------------------------------------------------------------------ state

    def predicted_left(self, r: ReplicaView, i: int) -> int:
        """l_left of request i (section 4.3)."""
        g = r.generated(i)
        return max(self.lengths.predicted_total(r.I[i], g) - g, 0)

    def _observe_last(self, r: ReplicaView) -> None:
        """γ update (eq 5) from the iteration that just ran, when SOLA formed it."""
        if self.last_start >= 0 and r.last_start == self.last_start:
            actual = r.t - r.last_start
            assert self.cost is not None
            if self.last_prediction0 > 0:
                predicted = self.cost.gamma * self.last_prediction0
                self.predictions += 1
                self.abs_error_sum += abs(predicted - actual) / actual if actual > 0 else 0.0
            self.cost.observe(actual, self.last_prediction0)
        self.last_start = -1.0

    def _choose_strategy(self, ttft_ratios: list[float], tpot_ratios: list[float],
                         ttft_late_beyond: tuple[int, int]) -> None:
        """Table 2 on the windowed p_TTFT, p_TPOT; the a%-level loosening when both fail.
        ``ttft_late_beyond``: (late, all) waiting requests outside the ratios given."""
        p_ttft = max(ttft_ratios, default=0.0)
        p_tpot = max(tpot_ratios, default=0.0)
        self.window.append((p_ttft, p_tpot))
        w_ttft = sum(p for p, _ in self.window) / len(self.window)
        w_tpot = sum(p for _, p in self.window) / len(self.window)
        self.level = 1.0
        if w_ttft > 1 and w_tpot > 1:
            met_tpot = _share_met(tpot_ratios)
            if self.options.both_failing == "optimize-ttft":
                # Table 2, third row: "p_TTFT > 1 > p_TPOT" at the a%-level of TPOT
                self.mode, self.level = "ttft", max(met_tpot, 1e-9)
                return
            late, beyond = ttft_late_beyond
            met_ttft = ((_share_met(ttft_ratios) * len(ttft_ratios) + beyond - late)
                        / max(len(ttft_ratios) + beyond, 1))
            # the better-met SLO is the constraint, at its a%-level
            if met_ttft >= met_tpot:
                self.mode, self.level = "tpot", max(met_ttft, 1e-9)
            else:
                self.mode, self.level = "ttft", max(met_tpot, 1e-9)
        else:
            self.mode = "tpot" if w_tpot > w_ttft else "ttft"

    # ------------------------------------------------------------------ Algorithm 1

    def next_batch(self, r: ReplicaView) -> Batch | None:
        assert self.cost is not None
        self._observe_last(r)
        self.blocked = False
        if not r.prefilling and (not r.waiting or self._nothing_can_start(r)):
            self.blocked = bool(r.waiting)
            return self._decodes_only(r)
        now = r.t
        arr, first = r.arr, self.first_ms
        ttft_t, tpot_t = self.ttft_target, self.tpot_target
        by_rank = r.by_rank
        waiting = [by_rank[k] for k in r.waiting[:CANDIDATE_WINDOW]]
        prefilling = list(r.prefilling)
        decoders = r.decoders()
        # state monitor: real-time TTFT of the most urgent waiting requests and of the running
        # ones, TPOT of those decoding
        ttft_ratio: dict[int, float] = {}
        for i in (*waiting, *prefilling, *decoders):
            f = first[i]
            ttft_ratio[i] = ((now if math.isnan(f) else f) - arr[i]) / ttft_t[i]
        gen, tpot_now = self._decode_state(r, decoders)
        tpot_ratio = [tpot_now[i] / tpot_t[i] for i in decoders if tpot_now[i] > 0]
        # the waiting requests beyond the window: how many are past their TTFT target
        late_beyond = (bisect.bisect_left(r.waiting, bisect.bisect_left(self.deadlines, now))
                       - sum(1 for i in waiting if ttft_ratio[i] > 1))
        beyond = len(r.waiting) - len(waiting)
        self._choose_strategy(list(ttft_ratio.values()), tpot_ratio,
                              (max(late_beyond, 0), beyond))

        b = r.new_batch(r.C, r.C)
        candidates = self._prefill_order(r, waiting, prefilling, ttft_ratio)
        if self.mode == "ttft":
            budget = self._tpot_budget(decoders, gen, tpot_now)
            if self.options.ttft_decodes == "all":
                self._add_decodes(r, b, decoders, gen, tpot_now, limit=math.inf)
                self._add_prefills_for_tpot(r, b, candidates, budget)
            else:
                k_i = self._add_prefills_within(r, b, candidates, budget)
                self._add_decodes(r, b, decoders, gen, tpot_now, limit=k_i - (r.C - b.tokens))
        else:
            self._add_decodes(r, b, decoders, gen, tpot_now, limit=math.inf)
            self._add_prefills_for_ttft(r, b, candidates, now)
        if b.empty:
            return None
        self._remember_prediction(r, b)
        return b

    def _nothing_can_start(self, r: ReplicaView) -> bool:
        """Whether no waiting request in the window can start now: every slot is taken, or
        each one's KVs exceed the free memory or its predicted peak the capacity (section
        5.1). Until a request arrives or finishes this stays so (free memory only shrinks and
        the predictions change only at a finish), and eqs 1 and 2 have nothing to choose."""
        if r.n_running >= r.J:
            return True
        peak = _PeakMemory(self, r)
        free = r.free_kv()
        by_rank = r.by_rank
        return not any(peak.fits(by_rank[k], free) for k in r.waiting[:CANDIDATE_WINDOW])

    def _decodes_only(self, r: ReplicaView) -> Batch | None:
        """Nothing is in a prefill and no waiting request can start: every decode runs (eq 1
        leaves k_i = C, eq 2 admits nothing). The monitor's window and γ are left as they are:
        such an iteration is no choice of SOLA's, and a run of them (``steady``) and the same
        iterations one by one schedule alike."""
        decoders = r.decoders()
        if not decoders:
            return None
        b = r.new_batch(r.C, r.C)
        self._add_decodes(r, b, decoders, None, None, limit=math.inf)
        return None if b.empty else b

    def _decode_state(self, r: ReplicaView, decoders: list[int]
                      ) -> tuple[dict[int, int], dict[int, float]]:
        """Generated tokens and real-time TPOT of each decoding request (section 4.3)."""
        gen = {i: r.generated(i) for i in decoders}
        now, first = r.t, self.first_ms
        tpot_now = {i: (now - first[i]) / (g - 1) if g >= 2 else 0.0 for i, g in gen.items()}
        return gen, tpot_now

    def _prefill_order(self, r: ReplicaView, waiting: list[int], prefilling: list[int],
                       ttft_ratio: dict[int, float]) -> list[int]:
        """Prefill requests by descending predicted TTFT over target (refills first)."""
        assert self.cost is not None
        cost, S, m, arr, first = self.cost, r.S, r.m, r.arr, self.first_ms
        gamma = cost.gamma

        def key(i: int) -> tuple[int, float]:
            rest = S[i] - m[i]
            predicted = gamma * cost.prefill_ms0(m[i] * rest, rest * rest, rest)
            if r.gen[i] >= 1:  # a refill
                return (0, -(first[i] - arr[i]))
            return (1, -(ttft_ratio[i] + predicted / self.ttft_target[i]))

        return sorted([*prefilling, *waiting], key=key)

    def _tpot_budget(self, decoders: list[int], gen: dict[int, int],
                     tpot_now: dict[int, float]) -> float:
        """Eq 1: the prefill cost C^p(Q_run) that keeps every decoding request within its TPOT
        target, min_r (T_TPOT − t_TPOT) · l_out (at the a%-level when loosened)."""
        slack = [(self.tpot_target[i] - tpot_now[i]) * gen[i] for i in decoders
                 if tpot_now[i] > 0]
        if not slack:
            return math.inf
        if self.level >= 1:
            return min(slack)
        return quantile_level([-s for s in slack], self.level) * -1

    def _add_prefills_for_tpot(self, r: ReplicaView, b: Batch, order: list[int],
                               budget_ms: float) -> None:
        """Eq 1 with every decode in the batch (``ttft_decodes="all"``): prefill chunks in
        priority order, the iteration's tokens k_i (the decodes already in ``b`` and the prefill
        part) being the largest multiple of TILE_TOKENS whose prefill part's predicted cost
        C^p(Q_run) stays within ``budget_ms``; every prefill when all of them fit (the decodes
        then fill up to the batch budget), none when not even one tile does."""
        assert self.cost is not None
        cost, gamma = self.cost, self.cost.gamma
        room = int(b.tokens) if b.tokens != math.inf else int(r.C)
        peak = _PeakMemory(self, r)
        free = b.free
        chunks: list[tuple[int, int, int]] = []  # (request, tokens it could take, cached KVs)
        total = 0
        for i in order:
            if total >= room:
                break
            if r.status[i] != RUNNING:
                if r.n_running + len(chunks) >= r.J or not peak.admits(i, free):
                    continue
                free -= r.admission_kv(i, r.S[i])
            rest = r.S[i] - r.m[i]
            chunks.append((i, rest, r.m[i]))
            total += rest
        total = min(total, room)

        def predicted(tokens: int) -> float:
            mc = cc = c = 0.0
            for _, rest, m in chunks:
                k = min(rest, tokens - int(c))
                if k <= 0:
                    break
                mc, cc, c = mc + m * k, cc + k * k, c + k
            return gamma * cost.prefill_ms0(mc, cc, c)

        take = total
        if total and predicted(total) > budget_ms:
            # the largest tile multiple k_i of the iteration's tokens within eq 1
            take = 0
            lo, hi = 1, (b.n_dec + total) // TILE_TOKENS
            while lo <= hi:
                mid = (lo + hi) // 2
                tokens = mid * TILE_TOKENS - b.n_dec
                if tokens <= 0 or predicted(tokens) <= budget_ms:
                    take, lo = max(tokens, 0), mid + 1
                else:
                    hi = mid - 1
        for i, rest, _ in chunks:
            if take <= 0:
                break
            c = min(rest, take)
            self._take_prefill(r, b, i, c, r.status[i] != RUNNING, peak)
            take -= c

    def _add_prefills_within(self, r: ReplicaView, b: Batch, order: list[int],
                             budget_ms: float) -> float:
        """The earlier reading of eq 1 (``ttft_decodes="left-of-k"``): prefill chunks in
        priority order while their predicted cost stays within ``budget_ms``, at least one tile
        of them; returns k_i, the iteration's token limit, of which decodes get what is left."""
        assert self.cost is not None
        cost = self.cost
        gamma = cost.gamma
        C = int(r.C)
        mc = cc = tokens = 0.0
        peak = _PeakMemory(self, r)
        for i in order:
            left = C - tokens
            if left <= 0:
                return tokens
            waiting = r.status[i] != RUNNING
            if waiting and (r.n_running >= r.J or not peak.admits(i, b.free)):
                continue
            rest = r.S[i] - r.m[i]
            c = min(rest, int(left))
            mi = r.m[i]
            if gamma * cost.prefill_ms0(mc + mi * c, cc + c * c, tokens + c) > budget_ms:
                # the largest chunk ending the prefill part on a tile boundary within budget
                top = int(tokens + c) // TILE_TOKENS * TILE_TOKENS
                c = 0
                for k in range(top, int(tokens), -TILE_TOKENS):
                    part = int(k - tokens)
                    if gamma * cost.prefill_ms0(mc + mi * part, cc + part * part,
                                                k) <= budget_ms:
                        c = part
                        break
                if c == 0 and tokens == 0:
                    c = min(rest, TILE_TOKENS, C)  # at least one tile: prefills progress
                if c > 0:
                    self._take_prefill(r, b, i, c, waiting, peak)
                    tokens += c
                return max(tokens, TILE_TOKENS)
            self._take_prefill(r, b, i, c, waiting, peak)
            mc, cc, tokens = mc + mi * c, cc + c * c, tokens + c
        return r.C

    def _take_prefill(self, r: ReplicaView, b: Batch, i: int, c: int, waiting: bool,
                      peak: _PeakMemory) -> None:
        if waiting:
            r.take_waiting(i)
            r.admit(i, c, r.S[i], b)
            peak.started(i)
        else:
            b.add_chunk(i, c)

    def _add_prefills_for_ttft(self, r: ReplicaView, b: Batch, order: list[int],
                               now: float) -> None:
        """Eq 2: the fewest prefills, in priority order, after which every other waiting
        request can still meet its TTFT target after this iteration (a%-level when
        loosened); each with as many prompt tokens as the batch budget leaves."""
        assert self.cost is not None
        cost = self.cost
        gamma = cost.gamma
        arr, S, m = r.arr, r.S, r.m
        peak = _PeakMemory(self, r)
        decode_ms = gamma * cost.decode_ms0(b.n_dec, self._decode_kv(r, b))
        mixed = self.options.eq2_prediction == "mixed"
        fresh = [k for k, i in enumerate(order) if r.gen[i] == 0]  # not refills
        mc = cc = tokens = 0.0
        for pos, i in enumerate(order):
            if b.tokens < 1:
                return
            if b.n_dec or tokens:  # an idle GPU helps nobody: the first prefill always runs
                iteration_ms = gamma * cost.prefill_ms0(mc, cc, tokens) + decode_ms
                # the remaining prefills are in descending predicted TTFT order: eq 2's
                # (a%-level) maximum is the first (the one after the worst 1 − a) of them
                first = bisect.bisect_left(fresh, pos)
                at = first + int((1.0 - self.level) * (len(fresh) - first))
                if at >= len(fresh):
                    return
                j = order[fresh[at]]
                rest = S[j] - m[j]
                own = gamma * cost.prefill_ms0(m[j] * rest, rest * rest, rest)
                if mixed:  # its own iteration will carry the decodes too (section 5.2)
                    own += decode_ms
                if (now - arr[j] + iteration_ms + own) / self.ttft_target[j] <= 1:
                    return  # eq 2 holds: the remaining prefills wait
            waiting = r.status[i] != RUNNING
            if waiting and (r.n_running >= r.J or not peak.admits(i, b.free)):
                continue
            c = min(S[i] - m[i], int(b.tokens))
            if c <= 0:
                return
            mi = m[i]
            self._take_prefill(r, b, i, c, waiting, peak)
            mc, cc, tokens = mc + mi * c, cc + c * c, tokens + c

    def _decode_kv(self, r: ReplicaView, b: Batch) -> float:
        if b.all_decodes:
            return float(r.decode_kv())
        return float(sum(r.m_of(i) for i in b.dec))

    def _add_decodes(self, r: ReplicaView, b: Batch, decoders: list[int],
                     gen: dict[int, int] | None, tpot_now: dict[int, float] | None,
                     limit: float) -> None:
        """Decodes by descending predicted TPOT over target, up to ``limit`` of them; when
        KVs are short, the lowest-priority running requests outside the batch are
        preempted. The decode state (``_decode_state``) is read only when they do not all
        fit."""
        if not decoders:
            return
        limit = min(limit, b.tokens)
        needs = r.all_decode_needs()
        if len(decoders) <= limit and needs <= b.free:
            b.free -= needs
            b.add_all_decodes(len(decoders))
            return
        if gen is None or tpot_now is None:
            gen, tpot_now = self._decode_state(r, decoders)
        order = self._decode_order(r, decoders, gen, tpot_now)
        chosen = order[:max(int(limit), 0)]
        need = {i: r.decode_needs(i) for i in chosen}
        total = sum(need.values())
        victims = [i for i in reversed(order) if i not in chosen]
        victims += [i for i in r.prefilling if i not in b.members]
        while total > b.free and (victims or chosen):
            victim = victims.pop(0) if victims else chosen.pop()
            if victim in need:
                total -= need.pop(victim)
            b.free += r.held_by(victim)
            r.evict(victim)
            self.running_peak.invalidate()
        if chosen and total <= b.free:
            b.free -= total
            b.add_decodes(chosen)

    def _decode_order(self, r: ReplicaView, decoders: list[int], gen: dict[int, int],
                      tpot_now: dict[int, float]) -> list[int]:
        """Descending predicted TPOT ``(t_TPOT·l_out + C^d·l_left) / (l_out + l_left)`` over
        the target."""
        step = self.last_decode_ms

        def predicted(i: int) -> float:
            g = gen[i]
            left = max(self.lengths.predicted_total(r.I[i], g) - g, 0)
            return ((tpot_now[i] * g + step * left) / max(g + left, 1)) / self.tpot_target[i]

        return sorted(decoders, key=lambda i: -predicted(i))

    def _remember_prediction(self, r: ReplicaView, b: Batch) -> None:
        assert self.cost is not None
        mc = cc = c = 0.0
        for i, k in b.chunks:
            mc += r.m[i] * k
            cc += k * k
            c += k
        decode0 = self.cost.decode_ms0(b.n_dec, self._decode_kv(r, b))
        self.last_prediction0 = self.cost.prefill_ms0(mc, cc, c) + decode0
        if b.n_dec:
            self.last_decode_ms = self.cost.gamma * decode0
        self.last_start = r.t

    def steady(self, r: ReplicaView, b: Batch) -> Steady | None:
        """A decode-only batch of every decoder comes back, until a finish (which the replica
        stops at), when nothing is in a prefill and nothing waiting can start
        (``_nothing_can_start``): with no prefill, eq 1 leaves k_i = C and eq 2 admits
        nothing. It comes back past arrivals too when the window of waiting requests SOLA
        reads is full and no request still to arrive would enter it (its TTFT deadline is
        later than the window's last: always so when every request has the same target);
        otherwise only until the next arrival."""
        if r.prefilling or (r.waiting and not self.blocked):
            return None
        if len(r.waiting) >= CANDIDATE_WINDOW:
            later = bisect.bisect_left(self.arrivals_sorted, r.t)
            if self.later_min_rank[later] > r.waiting[CANDIDATE_WINDOW - 1]:
                return BLOCKED
        return UNTIL_ARRIVAL

    @property
    def mean_abs_prediction_error(self) -> float:
        """Mean |predicted − actual| / actual of the iteration times SOLA predicted."""
        return self.abs_error_sum / self.predictions if self.predictions else 0.0


def _share_met(ratios: list[float]) -> float:
    return sum(1 for x in ratios if x <= 1) / len(ratios) if ratios else 1.0


class _RunningPeak:
    """The running requests' predicted (tokens left, KVs now) for the peak-memory test, kept
    across iterations. Decoding moves one KV from left to now and leaves every final size, hence
    the peak, unchanged; a request that starts is added, one that finishes removed. The
    predictions are made afresh after a preemption and every PREDICTION_REFRESH finishes (the
    output-length distribution they come from moves little from one finish to the next; a
    choice of ours, for speed)."""

    def __init__(self) -> None:
        self.items: dict[int, tuple[int, int]] | None = None
        self.profile: _PeakProfile | None = None
        self.finishes = 0

    def invalidate(self) -> None:
        self.items, self.profile = None, None

    def load(self, policy: Sola, r: ReplicaView) -> dict[int, tuple[int, int]]:
        if self.items is None:
            self.items = {i: (policy.predicted_left(r, i), max(r.m_of(i), r.reserve_to[i]))
                          for i in r.running()}
            self.finishes = 0
        return self.items

    def peak_profile(self) -> _PeakProfile:
        if self.profile is None:
            self.profile = _PeakProfile(list((self.items or {}).values()))
        return self.profile

    def started(self, i: int, item: tuple[int, int]) -> None:
        if self.items is not None:
            self.items[i] = item
            self.profile = None

    def finished(self, i: int) -> None:
        self.finishes += 1
        if self.items is None:
            return
        if self.finishes >= PREDICTION_REFRESH:
            self.invalidate()
        else:
            self.items.pop(i, None)
            self.profile = None


class _PeakMemory:
    """Section 5.1, for one iteration: the predicted peak KV use of the running requests plus a
    candidate, each growing one KV per generated token until its predicted end, then freeing
    all of it (LightLLM's rule).

    Algorithm 1 goes on to the next candidate after a refusal (line 9), so a small request may
    start past a large one refused. Two things keep it cheap: the check is skipped when even
    every request growing by the longest remaining length any prediction can give fits (the
    paper's memory threshold, section 6.4), and the peak with one candidate is a query of
    O(log n) on a :class:`_PeakProfile` of the running requests (:class:`_RunningPeak`)."""

    def __init__(self, policy: Sola, r: ReplicaView) -> None:
        self.policy, self.r = policy, r
        self.count = r.n_running
        self.longest_left = policy.lengths.longest_left()

    def _quick(self, need: int, free: float) -> bool:
        r = self.r
        return (self.count == 0
                or (r.M - free) + need + (self.count + 1) * self.longest_left <= r.M)

    def _peak_with(self, left: int, now: int) -> float:
        running = self.policy.running_peak
        running.load(self.policy, self.r)
        return running.peak_profile().peak_with(left, now)

    def fits(self, i: int, free: float) -> bool:
        """Whether waiting request i would pass :meth:`admits` now (nothing is counted)."""
        r = self.r
        need = r.S[i]
        if r.admission_kv(i, need) > free:   # with a prefix cache: whole blocks, less the hit
            return False
        options = self.policy.options
        if math.isinf(r.M) or (options.memory_check == "threshold"
                               and r.M - free + need <= options.memory_threshold * r.M):
            return True
        return (self._quick(need, free)
                or self._peak_with(self.policy.predicted_left(r, i), need) <= r.M)

    def admits(self, i: int, free: float) -> bool:
        """Whether waiting request i fits now and at the predicted peak; counts it in if so
        (:meth:`started` records it when it does start)."""
        if not self.fits(i, free):
            return False
        self.count += 1
        return True

    def started(self, i: int) -> None:
        r = self.r
        self.policy.running_peak.started(i, (self.policy.predicted_left(r, i), r.S[i]))


class _PeakProfile:
    """The predicted peak KV use, max over t of Σ_{left_j ≥ t} (now_j + t), of fixed items
    (tokens left, KVs now) plus any one candidate, in O(log n) a query.

    Items sorted by descending ``left``; with ``H_k`` the KVs now of the first k and
    ``v_k = H_k + k·left_k``, a candidate (l, n) placed after the p items with left ≥ l gives
    ``max(max_{k≤p} v_k, H_p + n + (p+1)·l, max_{k>p} (v_k + left_k) + n)``."""

    def __init__(self, items: list[tuple[int, int]]) -> None:
        data = np.array(items, dtype=np.float64).reshape(-1, 2)
        data = data[np.argsort(-data[:, 0], kind="stable")]
        left, now = data[:, 0], data[:, 1]
        held = np.cumsum(now)
        values = held + np.arange(1, len(left) + 1) * left
        self.neg_left = (-left).tolist()  # ascending, for bisect
        self.held = [0.0, *held.tolist()]
        self.prefix_max = [0.0, *np.maximum.accumulate(values).tolist()] if len(left) else [0.0]
        tail = np.maximum.accumulate((values + left)[::-1])[::-1] if len(left) else values
        self.suffix_max = [*tail.tolist(), -math.inf]

    def peak_with(self, left: int, now: int) -> float:
        p = bisect.bisect_right(self.neg_left, -left)  # items with left >= the candidate's
        return max(self.prefix_max[p], self.held[p] + now + (p + 1) * left,
                   self.suffix_max[p] + now)
