"""SCLS (Cheng et al. 2024): serving time and memory (eqs 1–9, Algorithm 2), the batching DP
(Algorithm 1, eq 10) against an exact set-partition model and brute force, max-min offloading
(eq 11) against the exact P||Cmax assignment, and the adaptive interval (eq 12)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import yaml

from conftest import ROOT, TOY
from llmopt.data.cost import load_profile
from llmopt.data.cost.scls import SclsProfile
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.errors import InstanceError, LlmoptError, OptionError, ProfileError
from llmopt.files import load_yaml_mapping
from llmopt.problems.api import solve
from llmopt.problems.scls.offload import (
    MaxMinOffloader,
    adaptive_interval_ms,
    compare_with_exact,
    max_min_assignment,
    plan_period,
)
from llmopt.problems.scls.partition import (
    Pool,
    brute_force,
    dp_batches,
    dp_is_exact,
    fcfs_batches,
    set_partitions,
    solve_pool,
)

PROFILE = "scls-llama2-13b-a100"
RAW = load_yaml_mapping(ROOT / "models" / f"{PROFILE}.yaml")


def hand_serve_ms(n: int, length: int, s: int) -> float:
    """Eqs 1–4 from the YAML's numbers, the decode sum of eq 2 iteration by iteration."""
    p, d = RAW["prefill"], RAW["decode"]
    prefill = p["c1"] * n * length + p["c2"] * n + p["c3"] * length + p["c4"]
    decode = sum(d["c1"] * n * (length + it) + d["c2"] * n + d["c3"] * (length + it)
                 + d["c4"] for it in range(1, s + 1))
    return prefill + decode


def hand_max_batch(length: int, s: int) -> int:
    """Eq 8 with eq 9's ζ, from the YAML's numbers (M_ava of eq 6 in bytes)."""
    m_ava = (RAW["gpu_memory_gib"] - RAW["model_memory_gib"] - RAW["engine_memory_gib"]) * 2**30
    return math.floor(RAW["zeta"] * m_ava / (RAW["kv_bytes_per_token"] * (length + s)))


def profile_with(**changes) -> SclsProfile:
    data = {**RAW, "name": "test", **changes}
    return SclsProfile.model_validate(data)


def test_fig11_totals_within_5_percent():
    together = hand_serve_ms(16, 1024, 128)
    split = hand_serve_ms(15, 10, 128) + hand_serve_ms(1, 1024, 128)
    assert together == pytest.approx(13_500, rel=0.05)
    assert split == pytest.approx(7_600, rel=0.05)
    profile = load_profile(PROFILE)
    assert profile.serve_ms(16, 1024, 128) == pytest.approx(together, rel=1e-12)
    assert profile.serve_ms(1, 1024, 128) == pytest.approx(hand_serve_ms(1, 1024, 128),
                                                           rel=1e-12)


def test_fig11_dp_chooses_the_split():
    inst = load_instance(TOY / "scls-fig11.yaml")
    result = solve(inst, "scls-batching", "dp")
    sizes = sorted(b["size"] for b in result.data.batches)
    assert sizes == [1, 15]
    expected = hand_serve_ms(15, 10, 128) + hand_serve_ms(1, 1024, 128)
    assert result.objective == pytest.approx(expected, rel=1e-9)
    assert result.status == "optimal"
    long_batch = next(b for b in result.data.batches if b["size"] == 1)
    assert long_batch["requests"] == ["long"]


@pytest.mark.parametrize("solver", ["cpsat", "dp"])
def test_fig11_solvers_agree(solver):
    inst = load_instance(TOY / "scls-fig11.yaml")
    result = solve(inst, "scls-batching", solver, 20)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(
        hand_serve_ms(15, 10, 128) + hand_serve_ms(1, 1024, 128), rel=1e-9)
    assert result.bound <= result.objective + 1e-6


def test_memory_rules_by_hand():
    profile = load_profile(PROFILE)
    for length in (1, 10, 500, 1024):
        for s in (1, 128, 1024):
            assert profile.max_batch(length, s) == hand_max_batch(length, s)
    # eq 5: pad and invalid tokens count: (L_i + L_o)·N·Δ
    assert profile.kv_bytes(16, 1024, 128) == 1152 * 16 * 819_200
    ds = profile_with(memory_rule="deepspeed")
    # Algorithm 2 as printed, with L = L_i + S
    for total, limit in [(2048, 12), (1025, 12), (1024, 22), (513, 22), (512, 28), (2, 28)]:
        assert not ds.out_of_memory(limit, total - 1, 1)
        assert ds.out_of_memory(limit + 1, total - 1, 1)


def test_fcfs_batches_in_pool_order():
    pool = Pool.of([5, 900, 7, 3, 1000], load_profile(PROFILE), 128)
    assert fcfs_batches(pool, 2) == [[0, 1], [2, 3], [4]]
    tight = Pool.of([5, 900, 7], profile_with(memory_rule="deepspeed", deepspeed_rules=[
        {"above_tokens": 0, "max_batch": 1}]), 128)
    with pytest.raises(OptionError, match="batch_size"):
        fcfs_batches(tight, 2)


def test_set_partitions_are_bell_numbers():
    assert [sum(1 for _ in set_partitions(n)) for n in range(8)] == [1, 1, 2, 5, 15, 52, 203,
                                                                      877]
    parts = list(set_partitions(4))
    assert len({tuple(sorted(tuple(sorted(b)) for b in p)) for p in parts}) == 15


def random_pools(seed: int, count: int, low: int, high: int, rule: str,
                 max_size: int | None = None):
    rng = np.random.default_rng(seed)
    profile = (load_profile(PROFILE) if rule == "zeta" else profile_with(
        memory_rule="deepspeed", deepspeed_rules=[
            {"above_tokens": 600, "max_batch": 2}, {"above_tokens": 0, "max_batch": 3}]))
    for _ in range(count):
        n = int(rng.integers(low, high + 1))
        lengths = rng.integers(1, 1025, n)
        if rng.random() < 0.5:  # repeated lengths (ties)
            lengths = rng.choice([10, 64, 300, 700, 1024], n)
        yield Pool.of(lengths, profile, int(rng.choice([16, 128, 512])), max_size=max_size)


@pytest.mark.parametrize(("rule", "max_size"), [("zeta", None), ("deepspeed", None),
                                              ("zeta", 2)])
def test_dp_exact_and_brute_force_agree(rule, max_size):
    for pool in random_pools(7 if rule == "zeta" else 8, 12, 3, 8, rule, max_size):
        if max_size is not None:
            assert max(pool.max_batch(int(x)) for x in pool.lengths) <= max_size
        best, partition = brute_force(pool)
        assert all(pool.fits(b) for b in partition)
        dp = dp_batches(pool)
        assert sorted(k for b in dp for k in b) == list(range(pool.n))
        assert all(pool.fits(b) for b in dp)
        assert dp_is_exact(pool)[0]
        assert pool.total_ms(dp) == pytest.approx(best, rel=1e-12)
        for formulation in ("counts", "assignment"):
            exact = solve_pool(pool, "cpsat", 20, workers=1, formulation=formulation)
            assert exact.status == "optimal"
            assert exact.objective == pytest.approx(best, rel=1e-9)
            assert exact.bound <= best + 1e-6


def test_exact_model_matches_dp_on_larger_pools():
    for pool in [*random_pools(11, 4, 30, 40, "deepspeed"), *random_pools(12, 2, 40, 40, "zeta")]:
        exact = solve_pool(pool, "cpsat", 30, workers=1)
        dp = solve_pool(pool, "dp")
        assert exact.status == "optimal"
        assert dp.objective == pytest.approx(exact.objective, rel=1e-9)


def test_dp_can_lose_when_serving_time_falls_with_length():
    """A non-physical profile (T_serve decreasing in L for large batches: A < 0): the
    contiguity lemma's condition fails, brute force beats the DP, and the DP says so."""
    profile = profile_with(
        prefill={"c1": -1.0, "c2": 10.0, "c3": 0.5, "c4": 10.0},
        decode={"c1": 0.0, "c2": 0.0, "c3": 0.0, "c4": 1.0},
        memory_rule="deepspeed", deepspeed_rules=[{"above_tokens": 0, "max_batch": 2}])
    pool = Pool.of([1, 2, 3], profile, 1)
    # by hand, S = 1: T = -N·L + 10N + 0.5L + 11, at most 2 per batch
    # {1,3},{2}: (−6+20+1.5+11) + (−2+10+1+11) = 46.5
    # contiguous: {1},{2,3}: 20.5 + 26.5 = 47; {1,2},{3}: 26 + 21.5 = 47.5; singles: 60
    best, partition = brute_force(pool)
    assert best == pytest.approx(46.5)
    assert sorted(sorted(b) for b in partition) == [[0, 2], [1]]
    assert pool.total_ms(dp_batches(pool)) == pytest.approx(47)
    exact, reason = dp_is_exact(pool)
    assert not exact and "decreases" in reason
    dp = solve_pool(pool, "dp")
    assert dp.status == "feasible" and dp.bound is None
    cp = solve_pool(pool, "cpsat", 10, workers=1)
    assert cp.status == "optimal" and cp.objective == pytest.approx(46.5)


def test_max_min_by_hand_with_decrement_and_interval():
    assign, loads = max_min_assignment([3, 5, 1, 4, 3, 2], 2)
    # longest first: 5→w0, 4→w1, 3 (first)→w1 (4 < 5), 3→w0, 2→w1, 1→w0 (9 = 9: lowest index)
    assert assign == [1, 0, 0, 1, 0, 1]
    assert loads == [9, 9]
    off = MaxMinOffloader(2)
    assert off.offload([3, 5, 1, 4, 3, 2]) == assign
    off.served(0, 5)
    assert off.loads == [4, 9]
    assert off.offload([2]) == [0]                    # to the least loaded: w0 at 4
    assert off.loads == [6, 9]
    assert off.interval_ms(0.5, 1000) == 1000         # max(0.5·6, 1000)
    assert adaptive_interval_ms([10_000, 20_000], 0.5, 3000) == 5000  # max(0.5·10000, 3000)


def test_one_period_on_fig11_with_a_loaded_worker():
    pool = Pool.of([10] * 15 + [1024], load_profile(PROFILE), 128)
    off = MaxMinOffloader(2)
    off.loads = [0.0, 5000.0]
    plan = plan_period(pool, off, lam=0.5, gamma_ms=1000)
    short, long = hand_serve_ms(15, 10, 128), hand_serve_ms(1, 1024, 128)
    assert short > long
    # both batches go to worker 0: the 15 short ones first (0 < 5000), then the long one
    # (short < 5000); the next interval is max(0.5 · min(5000, short + long), 1000)
    assert plan.workers == [0, 0]
    assert plan.loads_ms == pytest.approx([short + long, 5000])
    assert plan.next_interval_ms == pytest.approx(2500)
    assert sorted(len(b) for b in plan.batches) == [1, 15]


def test_exact_makespan_matches_brute_force_assignment():
    rng = np.random.default_rng(3)
    for _ in range(8):
        times = rng.uniform(1000, 14_000, int(rng.integers(3, 8))).round().tolist()
        cmp = compare_with_exact(times, 3)
        best = min(max(sum(t for t, w in zip(times, ws, strict=True) if w == m)
                       for m in range(3))
                   for ws in itertools.product(range(3), repeat=len(times)))
        assert cmp.proven and cmp.best_ms == pytest.approx(best)
        assert cmp.maxmin_ms >= cmp.best_ms - 1e-9
        assert cmp.maxmin_ms <= (4 / 3 - 1 / 9) * best + 1e-6  # Graham's LPT bound


@pytest.mark.parametrize(("changes", "field"), [
    ({"memory_rule": "vllm"}, "memory_rule"),
    ({"zeta": 0}, "zeta"),
    ({"zeta": 1.5}, "zeta"),
    ({"engine_memory_gib": 60}, None),
    ({"kv_bytes_per_token": 0}, "kv_bytes_per_token"),
])
def test_bad_profiles(changes, field, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**RAW, **changes}))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    message = str(err.value)
    assert "\n" not in message and "bad.yaml" in message
    if field:
        assert field in message


def test_bad_options():
    profile = load_profile(PROFILE)
    for s in (0, -3, 1.5):
        with pytest.raises(OptionError, match="slice_length"):
            Pool.of([10], profile, s)
    for gamma in (0, -1.0, float("nan")):
        with pytest.raises(OptionError, match="gamma_ms"):
            adaptive_interval_ms([1.0], 0.5, gamma)
    for lam in (0, 1, 1.5, -0.2):
        with pytest.raises(OptionError, match="lambda"):
            adaptive_interval_ms([1.0], lam, 10.0)


def test_request_that_cannot_fit_alone():
    data = load_yaml_mapping(TOY / "scls-fig11.yaml")
    data["requests"][3]["input_tokens"] = 10**8
    inst = instance_from_mapping(data, file=TOY / "scls-fig11.yaml")
    with pytest.raises(InstanceError) as err:
        solve(inst, "scls-batching", "dp")
    message = str(err.value)
    assert "requests[3].input_tokens" in message and "s3" in message and "\n" not in message
    assert isinstance(err.value, LlmoptError)


def test_cli_solves_fig11_and_rejects_bad_input_in_one_line(cli, tmp_path):
    result = cli("solve", TOY / "scls-fig11.yaml", "--out", tmp_path, "--solver", "cpsat")
    assert result.exit_code == 0, result.output
    assert "optimal" in result.output and "7,600.9" in result.output
    data = load_yaml_mapping(TOY / "scls-fig11.yaml")
    bad_rule = {**RAW, "memory_rule": "vllm"}
    for model, requests, where in [
        (bad_rule, data["requests"], "memory_rule"),
        (PROFILE, [{"id": "huge", "input_tokens": 10**7, "output_tokens": 1}],
         "requests[0].input_tokens"),
    ]:
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump({"name": "bad", "model": model, "system": {"clients": 1},
                                        "requests": requests}))
        result = cli("solve", path, "--problem", "scls-batching", "--out", tmp_path)
        assert result.exit_code == 2
        lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1 and where in lines[0] and "bad.yaml" in lines[0]
    result = cli("solve", TOY / "scls-fig11.yaml", "--solver", "brute", "--out", tmp_path)
    assert result.exit_code == 2 and "at most 9 requests" in result.output
