"""SOLA (Hong et al. 2025): its pieces by hand, and its replays validated."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TOY as TOY_DIR
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.errors import InstanceError
from llmopt.policies.replay import replay, replay_result
from llmopt.policies.routing import RoundRobin
from llmopt.policies.slo.sola import (
    PRIOR_OUTPUT_TOKENS,
    LengthDistribution,
    Sola,
    SolaCostModel,
    SolaOptions,
    _PeakProfile,
    quantile_level,
)
from llmopt.sim.batch import Batch
from llmopt.sim.cluster import Deployment, simulate
from llmopt.validate import validate_solution

PROFILE = "infermax-llama2-7b-a100"


def slo_instance(count: int = 60, rate: float = 25.0, seed: int = 0, multiple: float = 10.0,
                 kv: int = 12000) -> object:
    return instance_from_mapping({
        "name": "sola-test", "model": PROFILE,
        "system": {"clients": 32, "kv_capacity": kv, "max_batch_tokens": 2048},
        "requests": {"generate": {
            "count": count, "seed": seed,
            "input": {"dist": "lognormal", "mean": 300, "std": 300, "max": 1500},
            "output": {"dist": "lognormal", "mean": 120, "std": 120, "max": 600},
            "arrival": {"process": "gamma", "rate_per_s": rate, "cv": 2}}},
        "slo": {"multiple": multiple}})


def _peak(items: list[tuple[int, int]]) -> float:
    """The reference peak: max over t of Σ_{left_j ≥ t} (now_j + t), checked at each
    t = left_k (items sorted by descending left)."""
    ordered = sorted(items, key=lambda x: -x[0])
    best = 0.0
    held = 0
    for count, (left, now) in enumerate(ordered, 1):
        held += now
        best = max(best, held + count * left)
    return best


def test_eq_4_is_fitted_exactly_and_eq_3_closely() -> None:
    inst = slo_instance()
    profile = inst.profile
    model = SolaCostModel.fit(profile, 2048)
    for n, kv in ((1, 100), (37, 20000), (300, 400000)):
        assert model.decode_ms0(n, kv) == pytest.approx(profile.iteration_ms(0, n, kv, 0, 0),
                                                        rel=1e-6)
    for chunks in ([(0, 512)], [(0, 100), (2048, 300)], [(512, 64)] * 4):
        mc = sum(m * c for m, c in chunks)
        cc = sum(c * c for _, c in chunks)
        c = sum(c for _, c in chunks)
        actual = profile.iteration_ms(c, 0, 0, cc + 2 * mc, len(chunks))
        # eq 3 has no term per prefill request: the profile's (0.02 ms each) is absorbed
        assert model.prefill_ms0(mc, cc, c) == pytest.approx(actual, rel=0.03)


def test_gamma_follows_eq_5() -> None:
    model = SolaCostModel((0, 0, 0, 1.0), (0, 0, 1.0))
    model.observe(actual_ms=2.0, predicted0_ms=1.0)
    assert model.gamma == pytest.approx(0.5 * 2.0 + 0.5 * 1.0)
    model.observe(actual_ms=1.0, predicted0_ms=1.0)
    assert model.gamma == pytest.approx(0.5 * 1.0 + 0.5 * 1.5)


def test_length_prediction_is_the_conditional_median_of_the_range() -> None:
    d = LengthDistribution()
    assert d.predicted_total(100, 0) == PRIOR_OUTPUT_TOKENS
    assert d.predicted_total(100, 400) == 401
    for out in (10, 20, 30, 40, 50):
        d.add(100, out)  # inputs 64..127 share a range
    d.add(1000, 500)
    assert d.predicted_total(90, 0) == 30
    assert d.predicted_total(90, 25) == 40  # median of 30, 40, 50
    assert d.predicted_total(90, 45) == 50
    # nothing longer in its range: all ranges
    assert d.predicted_total(90, 60) == 500
    assert d.predicted_total(5000, 0) == 30  # no range of its own: all six, lower median
    assert d.longest_left() == 500


def test_a_level_maximum() -> None:
    ratios = [0.1, 0.5, 0.9, 1.5, 3.0]
    assert quantile_level(ratios, 1.0) == 3.0
    assert quantile_level(ratios, 0.6) == 0.9
    assert quantile_level(ratios, 0.8) == 1.5
    assert quantile_level([], 0.5) == 0.0


def test_peak_memory_matches_a_step_by_step_simulation() -> None:
    def brute(items: list[tuple[int, int]]) -> int:
        best = 0
        for t in range(max(left for left, _ in items) + 1):
            best = max(best, sum(now + t for left, now in items if left >= t))
        return best

    for items in ([(10, 5), (2, 100)], [(0, 50), (3, 3), (3, 7), (100, 1)],
                  list(itertools.product([1, 4, 9], [2, 30]))):
        assert _peak(list(items)) == brute(list(items))


@pytest.mark.parametrize(("ttft", "tpot", "mode", "level"), [
    ([0.2, 0.5], [0.9], "tpot", 1.0),   # 1 > p_TPOT > p_TTFT
    ([0.2, 0.5], [1.7], "tpot", 1.0),   # p_TPOT > 1 > p_TTFT
    ([0.9], [0.2, 0.5], "ttft", 1.0),   # 1 > p_TTFT > p_TPOT
    ([1.9], [0.2], "ttft", 1.0),        # p_TTFT > 1 > p_TPOT
    # both fail (Table 2, third row): optimize TTFT, TPOT loosened to the share meeting it
    ([0.5, 2.0, 3.0, 0.1], [1.5, 0.2, 0.3], "ttft", 2 / 3),
    ([0.5, 0.2, 3.0, 0.1], [1.5, 2.2], "ttft", 1e-9),  # no decode meets TPOT: a = 0
    ([0.5, 0.2, 3.0, 0.1], [1.5, 2.2, 0.5, 0.1], "ttft", 0.5),
])
def test_table_2_chooses_the_problem(ttft: list[float], tpot: list[float], mode: str,
                                     level: float) -> None:
    policy = Sola()
    policy._choose_strategy(ttft, tpot, (0, 0))
    assert policy.mode == mode
    assert policy.level == pytest.approx(level)


@pytest.mark.parametrize(("ttft", "tpot", "mode", "level"), [
    ([0.5, 2.0, 3.0, 0.1], [1.5, 0.2, 0.3], "ttft", 2 / 3),  # TPOT better met: the constraint
    ([0.5, 0.2, 3.0, 0.1], [1.5, 2.2], "tpot", 0.75),  # TTFT better met: the constraint
])
def test_both_failing_better_met_reading(ttft: list[float], tpot: list[float], mode: str,
                                         level: float) -> None:
    policy = Sola(SolaOptions(both_failing="better-met"))
    policy._choose_strategy(ttft, tpot, (0, 0))
    assert policy.mode == mode
    assert policy.level == pytest.approx(level)


def test_eq_1_budget_is_the_smallest_decode_slack() -> None:
    policy = Sola()
    policy.tpot_target = [50.0, 40.0, 30.0]
    gen = {0: 10, 1: 4, 2: 1}
    tpot_now = {0: 45.0, 1: 20.0, 2: 0.0}  # request 2 has no TPOT yet
    assert policy._tpot_budget([0, 1, 2], gen, tpot_now) == pytest.approx(min(5 * 10, 20 * 4))
    assert policy._tpot_budget([2], gen, tpot_now) == float("inf")


def test_sola_needs_slos() -> None:
    plain = load_instance(TOY_DIR / "infermax-azure-sample.yaml")
    with pytest.raises(InstanceError, match="TTFT and TPOT targets"):
        replay(plain, "sola")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rate", [5.0, 40.0])
def test_sola_replays_are_valid_and_the_fast_path_changes_nothing(seed: int, rate: float
                                                                  ) -> None:
    inst = slo_instance(seed=seed, rate=rate)
    result, sched = replay_result(inst, "sola")
    sol = json.loads(json.dumps(result.to_dict(inst)))
    assert validate_solution(inst, sol) == []
    assert 0 <= result.metrics["attainment"] <= 1
    slow = replay(inst, "sola", fast=False)
    assert slow.requests["finish_ms"].tolist() == pytest.approx(
        sched.requests["finish_ms"].tolist())


def test_sola_under_memory_pressure_preempts_only_when_predictions_fail() -> None:
    inst = slo_instance(count=80, rate=60.0, kv=3000)
    result, sched = replay_result(inst, "sola")
    assert validate_solution(inst, json.loads(json.dumps(result.to_dict(inst)))) == []
    assert int(sched.iterations["kv_tokens"].max()) <= 3000


PEAK_ITEMS = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 500)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(PEAK_ITEMS, st.integers(0, 300), st.integers(0, 500))
def test_the_peak_query_equals_the_peak_with_the_candidate(items, left, now) -> None:
    assert _PeakProfile(items).peak_with(left, now) == _peak([*items, (left, now)])


def test_algorithm_1_goes_past_refused_candidates() -> None:
    """Line 9 of Algorithm 1 is ``continue``: five large requests refused by the peak-memory
    test (each fits the free KVs now, not at the predicted peak beside the running one) do not
    keep a small one waiting behind them."""
    requests = [{"id": "running", "input_tokens": 300, "output_tokens": 100, "arrival_ms": 0}]
    requests += [{"id": f"large{k}", "input_tokens": 600, "output_tokens": 20,
                  "arrival_ms": 1.0 + k} for k in range(5)]
    requests += [{"id": "small", "input_tokens": 50, "output_tokens": 5, "arrival_ms": 6.0}]
    inst = instance_from_mapping({
        "name": "sola-skip", "model": PROFILE,
        "system": {"clients": 8, "kv_capacity": 1000, "max_batch_tokens": 2048},
        "requests": requests, "slo": {"ttft_ms": 50, "tpot_ms": 1000}})
    result, sched = replay_result(inst, "sola")
    assert validate_solution(inst, json.loads(json.dumps(result.to_dict(inst)))) == []
    first = dict(zip(sched.requests["request"], sched.requests["first_token_ms"], strict=True))
    assert all(first["small"] < first[f"large{k}"] for k in range(5))
    assert first["small"] < min(sched.requests["finish_ms"])  # it ran beside "running"


@pytest.mark.parametrize("classes", [False, True])
def test_blocked_runs_past_arrivals_change_nothing(classes: bool) -> None:
    """Memory-bound with a long queue: SOLA's decode-only runs go on past arrivals when no
    request still to arrive would enter its window (always, with one target for all; by the
    deadlines, with classes). The runs and the iterations one by one give one schedule."""
    inst = slo_instance(count=160, rate=400.0, kv=4000)
    if classes:
        inst = instance_from_mapping({
            "name": "sola-classes", "model": PROFILE,
            "system": {"clients": 32, "kv_capacity": 4000, "max_batch_tokens": 2048},
            "requests": {"generate": {
                "count": 160, "seed": 3,
                "input": {"dist": "lognormal", "mean": 300, "std": 300, "max": 1500},
                "output": {"dist": "lognormal", "mean": 120, "std": 120, "max": 600},
                "arrival": {"process": "poisson", "rate_per_s": 400}}},
            "slo": {"classes": [{"name": "chat", "share": 0.5, "ttft_ms": 300, "tpot_ms": 60},
                                {"name": "batch", "share": 0.5, "ttft_ms": 3000,
                                 "tpot_ms": 200}]}})
    result, fast = replay_result(inst, "sola")
    assert validate_solution(inst, json.loads(json.dumps(result.to_dict(inst)))) == []
    slow = replay(inst, "sola", fast=False)
    assert slow.requests["finish_ms"].tolist() == pytest.approx(
        fast.requests["finish_ms"].tolist())
    assert slow.requests["first_token_ms"].tolist() == pytest.approx(
        fast.requests["first_token_ms"].tolist())
    assert len(fast.iterations) == len(slow.iterations)


class _StubReplica:
    """Just what SOLA's eq 1 and eq 2 steps read of a replica: ``waiting`` requests (prompt
    lengths) that arrived ``waited_ms`` before now, and ``decoders`` running ones (KVs)."""

    def __init__(self, waiting: list[int], waited_ms: float, decoders: list[int]) -> None:
        self.S = [*waiting, *decoders]
        self.I = list(self.S)
        self.m = [0] * len(waiting) + list(decoders)
        self.gen = [0] * len(waiting) + [5] * len(decoders)
        self.arr = [-waited_ms] * len(self.S)
        self.status = [1] * len(waiting) + [2] * len(decoders)  # WAITING, RUNNING
        self.J, self.n_running, self.M, self.C = 64, len(decoders), float("inf"), 2048
        self.started: list[tuple[int, int]] = []

    def m_of(self, i: int) -> int:
        return self.m[i]

    def generated(self, i: int) -> int:
        return self.gen[i]

    def admission_kv(self, i: int, c: int) -> int:
        return c      # no prefix cache: the tokens themselves

    def take_waiting(self, i: int) -> None:
        pass

    def admit(self, i: int, c: int, need: int, b: object) -> None:
        self.n_running += 1
        self.started.append((i, c))
        b.add_chunk(i, c)  # type: ignore[attr-defined]


def _stub_policy(options: SolaOptions, n: int, ttft_ms: float = 200.0) -> Sola:
    policy = Sola(options)
    policy.cost = SolaCostModel.fit(slo_instance().profile, 2048)
    policy.ttft_target = [ttft_ms] * n
    return policy


def _batch_with_decodes(r: _StubReplica, decoders: range, C: int = 2048):
    b = Batch(float("inf"), C, C)
    b.add_decodes(list(decoders))
    return b


@pytest.mark.parametrize(("prediction", "starts"), [("mixed", True), ("alone", False)])
def test_eq_2_predicts_the_prefill_in_its_mixed_iteration(prediction: str, starts: bool
                                                          ) -> None:
    """A waiting request with 1 ms of slack beyond this iteration plus its prefill alone: the
    mixed prediction (section 5.2: its iteration also carries the 50 decodes) says it would
    miss unless it starts now; the prefill-alone prediction lets it wait."""
    policy = _stub_policy(SolaOptions(eq2_prediction=prediction), 51)  # type: ignore[arg-type]
    cost = policy.cost
    assert cost is not None
    decode_ms = cost.decode_ms0(50, 50 * 1000)
    alone_ms = cost.prefill_ms0(0, 500 * 500, 500)
    r = _StubReplica([500], 200.0 - decode_ms - alone_ms - 1.0, [1000] * 50)
    b = _batch_with_decodes(r, range(1, 51))
    policy._add_prefills_for_ttft(r, b, [0], now=0.0)  # type: ignore[arg-type]
    assert bool(r.started) is starts


def test_eq_1_sizes_the_iteration_in_tiles_beside_every_decode() -> None:
    """Optimize TTFT subject to TPOT: the 50 decodes stay in the batch; the prefill part
    takes the largest k_i − 50 tokens, k_i a multiple of 128, whose C^p keeps eq 1's budget;
    all of it when everything fits; nothing (no invented tile) when no tile fits."""
    policy = _stub_policy(SolaOptions(), 52)
    cost = policy.cost
    assert cost is not None
    budget = cost.prefill_ms0(0, 700 ** 2, 700)  # one 700-token chunk's cost
    for budget_ms, expected in ((budget, 640 - 50), (math.inf, 2048 - 50), (0.0, 0)):
        r = _StubReplica([1500, 900], 0.0, [1000] * 50)
        b = _batch_with_decodes(r, range(2, 52))
        policy._add_prefills_for_tpot(r, b, [0, 1], budget_ms)  # type: ignore[arg-type]
        assert sum(c for _, c in r.started) == expected
        assert b.n_dec == 50
    # the earlier reading gives the prefill the tile and the decodes what is left of it
    earlier = _stub_policy(SolaOptions(ttft_decodes="left-of-k"), 52)
    r = _StubReplica([1500, 900], 0.0, [1000] * 50)
    b = Batch(float("inf"), 2048, 2048)
    assert earlier._add_prefills_within(r, b, [0, 1], 0.0) == 128  # type: ignore[arg-type]


def test_optimize_ttft_keeps_every_decode_running() -> None:
    """On slo-chat, every iteration SOLA forms to optimize TTFT carries every decoding request
    (memory is ample there); the earlier reading (decodes get what is left of k_i) stalls
    some of them."""
    inst = load_instance(TOY_DIR / "slo-chat.yaml")
    for options, stalls_expected in ((SolaOptions(), False),
                                     (SolaOptions(ttft_decodes="left-of-k"), True)):
        policy = Sola(options)
        stalled = []
        form = policy.next_batch

        def recording(r, form=form, policy=policy, stalled=stalled):  # type: ignore[no-untyped-def]
            decoders = r.n_decoders()
            b = form(r)
            if b is not None and policy.mode == "ttft" and b.n_dec < decoders:
                stalled.append(decoders - b.n_dec)
            return b

        policy.next_batch = recording  # type: ignore[method-assign]
        simulate(inst, Deployment("sola", [policy], RoundRobin()))
        assert bool(stalled) is stalls_expected


@pytest.mark.parametrize(("check", "held"), [("threshold", False), ("always", True)])
def test_peak_memory_test_runs_above_the_threshold_only(check: str, held: bool) -> None:
    """Three requests, M = 600 (issue 30): far below the threshold the peak test does not run,
    so b and c start beside a; run always, it predicts 256-token outputs before anything has
    finished and holds them until a finishes."""
    requests = [{"id": name, "input_tokens": 100, "output_tokens": 20, "arrival_ms": t}
                for name, t in (("a", 0.0), ("b", 1.0), ("c", 2.0))]
    inst = instance_from_mapping({
        "name": "sola-threshold", "model": PROFILE,
        "system": {"clients": 8, "kv_capacity": 600, "max_batch_tokens": 2048},
        "requests": requests, "slo": {"ttft_ms": 500, "tpot_ms": 100}})
    policy = Sola(SolaOptions(memory_check=check))  # type: ignore[arg-type]
    sched = simulate(inst, Deployment("sola", [policy], RoundRobin()))
    by_id = sched.requests.set_index("request")
    waits = by_id.loc[["b", "c"], "first_token_ms"] > by_id.loc["a", "finish_ms"]
    assert bool(waits.any()) is held
