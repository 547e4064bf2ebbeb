"""Lower bounds on section 5's measures of slice-level schedules and ILS
(``llmopt.problems.scls.bounds``): never above what any of SLS, SO, PM, AB, LB, SCLS (slice
bound) or ILS (iteration bound) achieves on random instances (random non-negative coefficients,
both memory rules, one to three instances, offline or Poisson arrivals), exact for one request
served alone, and refused for negative coefficients."""

from __future__ import annotations

import numpy as np
import pytest

from llmopt.data.instance import instance_from_mapping
from llmopt.policies.registry import POLICIES, Engine
from llmopt.policies.replay import replay_policy
from llmopt.policies.slice.ils import section5_metrics
from llmopt.problems.scls.bounds import Engine as BoundEngine
from llmopt.problems.scls.bounds import slice_bounds
from llmopt.problems.workflows.compare import compare
from llmopt.report.compare import render

SCLS_POLICIES = [name for name, info in POLICIES.items() if info.family == "scls"]
REL = 1e-9


def random_profile(rng: np.random.Generator) -> dict:
    coefficients = lambda scale: {f"c{k}": float(rng.choice([0.0, rng.uniform(0, s)]))  # noqa: E731
                                  for k, s in zip(range(1, 5), scale, strict=True)}
    profile = {"name": "random-scls", "family": "scls", "source": "test",
               "prefill": coefficients((0.3, 3.0, 0.05, 40.0)),
               "decode": coefficients((0.005, 0.5, 0.005, 30.0)),
               "gpu_memory_gib": 80, "model_memory_gib": 24.0, "engine_memory_gib": 4.0,
               "kv_bytes_per_token": float(rng.choice([819200, 2_000_000, 4_000_000]))}
    if rng.random() < 0.4:
        profile["memory_rule"] = "deepspeed"
    else:
        profile["zeta"] = float(rng.uniform(0.5, 1.0))
    return profile


def random_instance(seed: int):
    rng = np.random.default_rng([seed, 33])
    n = int(rng.integers(1, 18))
    arrival = ({"process": "offline"} if rng.random() < 0.3 else
               {"process": "poisson", "rate_per_s": float(rng.uniform(0.5, 40))})
    return instance_from_mapping({
        "name": f"scls-random-{seed}", "model": random_profile(rng),
        "system": {"clients": int(rng.integers(1, 17)), "instances": int(rng.integers(1, 4))},
        "requests": {"generate": {
            "count": n, "seed": seed,
            "input": {"dist": "uniform", "low": 1, "high": int(rng.integers(2, 600))},
            "output": {"dist": "uniform", "low": 1, "high": int(rng.integers(2, 300))},
            "arrival": arrival}}})


def metrics(inst, name: str) -> dict:
    """Section 5's measures of a replay (for ILS, as compare computes them)."""
    replayed = replay_policy(inst, name)
    if replayed.schedule is None:
        return replayed.metrics
    return section5_metrics(replayed.schedule, inst.system.instances)


@pytest.mark.parametrize("seed", range(24))
def test_the_bounds_hold_for_every_slice_policy_and_ils(seed):
    inst = random_instance(seed)
    bounds = {engine: slice_bounds(inst, engine) for engine in BoundEngine}
    for name in SCLS_POLICIES:
        engine = BoundEngine(POLICIES[name].engine.value)
        b = bounds[engine]
        assert b is not None
        m = metrics(inst, name)
        assert b.makespan_ms <= m["makespan_ms"] * (1 + REL) + 1e-6, (name, b, m)
        assert b.response_mean_ms <= m["response_mean_ms"] * (1 + REL) + 1e-6, name
        assert b.response_p95_ms <= m["response_p95_ms"] * (1 + REL) + 1e-6, name
        assert m["throughput_rps"] <= b.throughput_rps * (1 + REL) + 1e-6, name  # 6 decimals


def test_one_request_alone_is_exact_for_sls():
    """SLS serves a single request in one batch of L_o = O iterations (S = 1024 ≥ O): its last
    end is a + T_serve(1, I, O), which the alone bound gives exactly."""
    inst = instance_from_mapping({
        "name": "one", "model": "scls-llama2-13b-a100", "system": {"clients": 4},
        "requests": [{"id": "r", "input_tokens": 300, "output_tokens": 200,
                      "arrival_ms": 50.0}]})
    b = slice_bounds(inst)
    assert b is not None
    m = replay_policy(inst, "sls").metrics
    assert b.makespan_ms == pytest.approx(m["makespan_ms"], rel=1e-9)
    assert b.makespan_ms == pytest.approx(50.0 + inst.profile.serve_ms(1, 300, 200), rel=1e-12)


def test_the_work_bound_binds_on_a_burst():
    """Many requests at once on one instance: the work, not any request alone, bounds the
    last end."""
    inst = instance_from_mapping({
        "name": "burst", "model": "scls-llama2-13b-a100", "system": {"clients": 16},
        "requests": [{"id": f"r{k}", "input_tokens": 200, "output_tokens": 100}
                     for k in range(64)]})
    b = slice_bounds(inst)
    assert b is not None and b.work_ms > b.alone_ms and b.makespan_ms == b.work_ms
    for name in ("sls", "so", "scls"):
        assert b.makespan_ms <= replay_policy(inst, name).metrics["makespan_ms"]


def test_no_bound_with_a_negative_coefficient():
    profile = random_profile(np.random.default_rng(0))
    profile["decode"]["c3"] = -0.001
    inst = instance_from_mapping({"name": "neg", "model": profile, "system": {"clients": 2},
                                  "requests": [{"id": "r", "input_tokens": 10,
                                                "output_tokens": 5}]})
    assert slice_bounds(inst) is None


def test_compare_shows_the_bounds_beside_the_slice_policies():
    inst = random_instance(3)
    names = ["sls", "scls", "ils"]
    comparison = compare(inst, names)
    assert set(comparison.bounds) == {"slice", "iteration"}
    gaps = dict(zip(comparison.table["schedule"], comparison.table["gap_to_bound"],
                    strict=True))
    assert all(0 <= gaps[n] < 1 for n in names)
    text = render(comparison, inst).markdown
    assert "gap to bound" in text and "last end (s, at least)" in text
    assert "every slice-level schedule" in text and "No lower bound" not in text
    assert POLICIES["ils"].engine is Engine.ITERATION
