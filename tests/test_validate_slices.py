"""The independent validator of slice-level replays (llmopt/validate/slices.py): every slice
policy's replay on the bundled and on random small instances passes, and tampered files (a slice
shifted to overlap, a token dropped, a wrong duration, memory over the limit, ...) are refused
with a reason that names what is wrong."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from conftest import ROOT, TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.files import load_yaml_mapping
from llmopt.policies.slice.replay import slice_result
from llmopt.validate import check_solution

LADDER = ("sls", "so", "pm", "ab", "lb", "scls")
PROFILE = load_yaml_mapping(ROOT / "models" / "scls-llama2-13b-a100.yaml", "profile")


def hand_serve_ms(n: int, length: int, iterations: int) -> float:
    """Eqs 1–4 from the profile file, one decode iteration at a time (the test's own copy)."""
    p, d = PROFILE["prefill"], PROFILE["decode"]
    total = p["c1"] * n * length + p["c2"] * n + p["c3"] * length + p["c4"]
    for step in range(1, iterations + 1):
        cached = length + step
        total += d["c1"] * n * cached + d["c2"] * n + d["c3"] * cached + d["c4"]
    return total


def solution(inst, policy: str) -> dict:
    result, _ = slice_result(inst, policy)
    return json.loads(json.dumps(result.to_dict(inst)))


def random_instance(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 14))
    arrivals = np.sort(rng.uniform(0, 4000, n)).round(3)
    return instance_from_mapping({
        "name": f"scls-random-{seed}", "model": "scls-llama2-13b-a100",
        "system": {"clients": 16, "instances": int(rng.integers(1, 4))},
        "requests": [{"id": f"q{k}", "input_tokens": int(rng.integers(1, 1025)),
                      "output_tokens": int(rng.integers(1, 400)),
                      "arrival_ms": float(arrivals[k])} for k in range(n)]})


@pytest.mark.parametrize("name", ["scls-cluster.yaml", "scls-fig11.yaml"])
def test_every_slice_policy_validates_on_the_bundled_instances(name):
    inst = load_instance(TOY / name)
    for policy in LADDER:
        sol = solution(inst, policy)
        verdict = check_solution(inst, sol)
        assert verdict.reasons == [], (policy, verdict.reasons)
        assert any("every slice re-derived" in note for note in verdict.notes)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_slice_policy_validates_on_random_small_instances(seed):
    inst = random_instance(seed)
    for policy in LADDER:
        sol = solution(inst, policy)
        assert check_solution(inst, sol).reasons == [], policy
        assert max(s["instance"] for s in sol["slices"]) < inst.system.instances


def test_fig11_replays_take_the_papers_times():
    """Fig. 11: the sixteen requests together (SLS) take T_serve(16, 1024, 128) = 13.5 s; SCLS
    splits the long request off: T_serve(15, 10, 128) + T_serve(1, 1024, 128) = 7.6 s on one
    instance."""
    inst = load_instance(TOY / "scls-fig11.yaml")
    sls, scls = solution(inst, "sls"), solution(inst, "scls")
    assert len(sls["slices"]) == 1 and len(scls["slices"]) == 2
    assert sls["objective"] == pytest.approx(hand_serve_ms(16, 1024, 128), abs=1e-3)
    assert sls["objective"] == pytest.approx(13_500, rel=0.05)
    split = hand_serve_ms(15, 10, 128) + hand_serve_ms(1, 1024, 128)
    assert scls["objective"] == pytest.approx(split, abs=1e-3)
    assert scls["objective"] == pytest.approx(7_600, rel=0.05)
    assert sorted(s["padded_length"] for s in scls["slices"]) == [10, 1024]


# --- tamperings -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    inst = load_instance(TOY / "scls-cluster.yaml")
    return inst, solution(inst, "scls")


def first_rebatched(sol: dict) -> tuple[int, int]:
    """(slice, position) of the first request served in a second slice."""
    seen: set[str] = set()
    for k, s in enumerate(sol["slices"]):
        for i, rid in enumerate(s["requests"]):
            if rid in seen:
                return k, i
            seen.add(rid)
    raise AssertionError("no request was re-batched")


def refused(inst, sol: dict, *needles: str) -> list[str]:
    reasons = check_solution(inst, sol).reasons
    assert reasons, "the tampered file was accepted"
    for needle in needles:
        assert any(needle in r for r in reasons), (needle, reasons)
    return reasons


def test_a_slice_shifted_to_overlap_is_refused(cluster):
    inst, sol = cluster
    bad = copy.deepcopy(sol)
    on_0 = [s for s in bad["slices"] if s["instance"] == 0]
    prev, nxt = on_0[0], on_0[1]
    shift = nxt["start_ms"] - (prev["start_ms"] + prev["end_ms"]) / 2
    nxt["start_ms"] -= shift
    nxt["end_ms"] -= shift
    refused(inst, bad, "slices overlap")


def test_a_dropped_token_is_refused(cluster):
    inst, sol = cluster
    bad = copy.deepcopy(sol)
    bad["slices"][0]["generated"][0] -= 1
    refused(inst, bad, "slices[0].generated is")


def test_a_missing_slice_leaves_a_request_short(cluster):
    inst, sol = cluster
    bad = copy.deepcopy(sol)
    # the slice that starts last: each of its requests finishes in it
    last = max(range(len(bad["slices"])), key=lambda j: bad["slices"][j]["start_ms"])
    gone = bad["slices"].pop(last)
    reasons = refused(inst, bad, "not served exactly to their output length")
    assert gone["requests"][0] in reasons[0]


def test_a_wrong_duration_is_refused(cluster):
    inst, sol = cluster
    bad = copy.deepcopy(sol)
    bad["slices"][2]["end_ms"] += 5.0
    refused(inst, bad, "slices[2] lasts", "eqs 1-4")


def test_a_rebatched_request_must_prefill_what_it_generated(cluster):
    inst, sol = cluster
    bad = copy.deepcopy(sol)
    k, i = first_rebatched(bad)
    rid = bad["slices"][k]["requests"][i]
    bad["slices"][k]["prompt_tokens"][i] = next(r.input_tokens for r in inst.requests
                                                if r.id == rid)
    refused(inst, bad, f"slices[{k}].prompt_tokens is")


def test_a_start_before_arrival_is_refused(cluster):
    inst, sol = cluster
    bad = copy.deepcopy(sol)
    last = bad["slices"][-1]
    width = last["end_ms"] - last["start_ms"]
    last["start_ms"], last["end_ms"] = 0.0, width
    refused(inst, bad, "before request")


def test_memory_over_the_limit_is_refused():
    """Sixty 1000-token prompts: N_max(1000, S = 128) = ⌊ζ·M_ava / (Δ·1128)⌋ is below 60 (the
    profile's numbers), so the batcher splits them; merged into one slice they overflow."""
    usable = PROFILE["zeta"] * (PROFILE["gpu_memory_gib"] - PROFILE["model_memory_gib"]
                                - PROFILE.get("engine_memory_gib", 0.0)) * 2**30
    assert (1000 + 128) * 60 * PROFILE["kv_bytes_per_token"] > usable
    inst = instance_from_mapping({
        "name": "scls-memory", "model": "scls-llama2-13b-a100", "system": {"clients": 64},
        "requests": [{"id": f"m{k}", "input_tokens": 1000, "output_tokens": 1}
                     for k in range(60)]})
    sol = solution(inst, "ab")
    assert check_solution(inst, sol).reasons == []
    assert len(sol["slices"]) >= 2
    bad = copy.deepcopy(sol)
    first, second = bad["slices"][0], bad["slices"].pop(1)
    for key in ("requests", "prompt_tokens", "generated", "pad_tokens", "invalid_tokens"):
        first[key] += second[key]
    first["end_ms"] = first["start_ms"] + hand_serve_ms(60, 1000, 1)
    refused(inst, bad, "slices[0]: 60 requests padded to 1000 tokens exceed the memory limit")


def test_claims_and_metrics_are_held_to_the_slices(cluster):
    inst, sol = cluster
    for key, change, needle in [
            ("throughput_rps", 2.0, "metrics.throughput_rps"),
            ("completion_std_ms", 1.5, "metrics.completion_std_ms"),
            ("pad_tokens_per_request", 0.5, "metrics.pad_tokens_per_request")]:
        bad = copy.deepcopy(sol)
        bad["metrics"][key] = bad["metrics"][key] * change + 1.0
        refused(inst, bad, needle)
    refused(inst, {**sol, "objective": sol["objective"] + 10}, "objective")
    refused(inst, {**sol, "status": "optimal"}, "status must be feasible")
    bad = copy.deepcopy(sol)
    bad["slices"][0]["instance"] = 7
    refused(inst, bad, "slices[0].instance 7 is not one of 0..3")  # 4 instances


def test_a_slice_replay_on_another_profile_family_is_refused(cluster):
    _, sol = cluster
    other = load_instance(TOY / "quickstart.yaml")
    refused(other, sol, "not of the scls family")
