"""The slice-level cluster replay (Cheng et al. 2024, sections 4–5), checked from its records
without its code: every request served to its output length, batches of one instance never
overlap, every batch's duration is eqs 1–4 summed iteration by iteration from the profile file's
coefficients, every batch fits in memory (eqs 5–9 from the file's fields), and two 2-instance
toys (central pool with max-min and eq 12; round-robin routing) give hand-computed times."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import ROOT, TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.errors import LlmoptError, OptionError, ProfileError
from llmopt.files import load_yaml_mapping
from llmopt.policies.slice import LADDER, SliceScheduler, replay_slices
from llmopt.report.slice_plot import plot_slices

PROFILE = "scls-llama2-13b-a100"
RAW = load_yaml_mapping(ROOT / "models" / f"{PROFILE}.yaml")
GIB = 2**30


def prefill_ms(n: int, length: int) -> float:
    p = RAW["prefill"]
    return p["c1"] * n * length + p["c2"] * n + p["c3"] * length + p["c4"]


def tau_ms(cached: int, n: int) -> float:
    d = RAW["decode"]
    return d["c1"] * n * cached + d["c2"] * n + d["c3"] * cached + d["c4"]


def hand_ms(n: int, length: int, iterations: int) -> float:
    """Eqs 1–4, the decode summed iteration by iteration."""
    return prefill_ms(n, length) + sum(tau_ms(length + it, n)
                                       for it in range(1, iterations + 1))


def usable_bytes() -> float:
    """ζ·M_ava (eqs 6, 9) from the profile file."""
    return RAW["zeta"] * (RAW["gpu_memory_gib"] - RAW["model_memory_gib"]
                          - RAW["engine_memory_gib"]) * GIB


def check_records(instance, replay) -> None:
    """The independent checks of the module docstring, on any replay."""
    s = replay.slice_length
    bat = replay.batches.set_index("batch")
    mem = replay.members
    req = replay.requests
    inputs = dict(zip(instance.ids, instance.input_tokens.tolist(), strict=True))
    outputs = dict(zip(instance.ids, instance.output_tokens.tolist(), strict=True))
    arrivals = dict(zip(instance.ids, instance.arrival_ms.tolist(), strict=True))
    names = req["request"].tolist()
    assert sorted(names) == sorted(instance.ids)
    done: dict[str, int] = dict.fromkeys(instance.ids, 0)
    finished_at: dict[str, float] = {}
    # members in batch start order: replay each request's progress
    order = bat.sort_values("start_ms", kind="stable").index
    for b in order:
        row = bat.loc[b]
        rows = mem[mem["batch"] == b]
        ids = [names[i] for i in rows["request"]]
        assert len(ids) == row["size"] and len(set(ids)) == len(ids)
        prompts = [inputs[r] + done[r] for r in ids]
        left = [outputs[r] - done[r] for r in ids]
        assert all(x > 0 for x in left), "a finished request was served again"
        assert all(arrivals[r] <= row["start_ms"] + 1e-9 for r in ids)
        assert row["padded_length"] == max(prompts)
        assert rows["prompt_tokens"].tolist() == prompts
        assert rows["pad_tokens"].tolist() == [max(prompts) - p for p in prompts]
        iterations = min(s, max(left))
        assert row["iterations"] == iterations
        assert row["end_ms"] - row["start_ms"] == pytest.approx(
            hand_ms(len(ids), max(prompts), iterations), rel=1e-9)
        # memory (eqs 5, 7–9): the batch's KVs at S iterations fit in ζ·M_ava
        assert (max(prompts) + s) * len(ids) * RAW["kv_bytes_per_token"] <= usable_bytes()
        for r, x, gen, bad, fin in zip(ids, left, rows["generated"], rows["invalid_tokens"],
                                       rows["finished"], strict=True):
            assert gen == min(x, iterations) and bad == iterations - gen
            assert fin == (x <= iterations)
            done[r] += gen
            if fin:
                finished_at[r] = row["end_ms"]
    assert done == outputs
    for _, r in req.iterrows():
        assert r["finish_ms"] == pytest.approx(finished_at[r["request"]])
        assert r["first_token_ms"] > r["arrival_ms"]
        assert r["slices"] == (mem["request"] == names.index(r["request"])).sum()
    for w, group in bat.groupby("instance"):
        g = group.sort_values("start_ms")
        assert (g["start_ms"].to_numpy()[1:] >= g["end_ms"].to_numpy()[:-1] - 1e-9).all()
        assert replay.completion_ms[int(w)] == pytest.approx(float(g["end_ms"].max()))


def toy(rows: list[tuple[str, int, int, float]]):
    return instance_from_mapping({
        "name": "toy", "model": PROFILE, "system": {"clients": 4},
        "requests": [{"id": i, "input_tokens": a, "output_tokens": b, "arrival_ms": t}
                     for i, a, b, t in rows]}, base_dir=ROOT / "instances" / "toy")


ABC = [("a", 10, 3, 0.0), ("b", 10, 6, 0.0), ("c", 500, 2, 0.0)]


def test_pool_max_min_fixed_interval_hand_computed():
    # the DP splits {a, b} from c: check that this is the least total serving time (eq 10)
    split = hand_ms(2, 10, 4) + hand_ms(1, 500, 4)
    assert split < hand_ms(3, 500, 4) and split < 2 * hand_ms(1, 10, 4) + hand_ms(1, 500, 4)
    sch = SliceScheduler("toy", batcher="dp", offloader="max-min", interval="fixed",
                         slice_length=4, gamma_ms=1000.0)
    inst = toy(ABC)
    r = replay_slices(inst, sch, instances=2)
    check_records(inst, r)
    req = r.requests.set_index("request")
    # period 0: c (longer estimate) to instance 0, {a, b} to instance 1 (eq 11)
    # c: 2 tokens, early return after 2 iterations; a: 3 of 4 (1 invalid); b: 4, back to pool
    assert req.loc["c", "finish_ms"] == pytest.approx(hand_ms(1, 500, 2))
    assert req.loc["a", "finish_ms"] == pytest.approx(hand_ms(2, 10, 4))
    assert req.loc["a", "invalid_tokens"] == 1 and req.loc["c", "invalid_tokens"] == 0
    assert req.loc["c", "first_token_ms"] == pytest.approx(prefill_ms(1, 500) + tau_ms(501, 1))
    assert req.loc["a", "first_token_ms"] == pytest.approx(prefill_ms(2, 10) + tau_ms(11, 2))
    # period 1 at Γ = 1 s: b alone, prompt 10 + 4, 2 iterations; both loads back to 0 after
    # the decrements, so the tie goes to instance 0
    assert r.periods_ms[:2] == [0.0, 1000.0]
    assert req.loc["b", "finish_ms"] == pytest.approx(1000.0 + hand_ms(1, 14, 2))
    assert req.loc["b", "slices"] == 2 and req.loc["b", "instance"] == 0
    assert r.completion_ms == pytest.approx([1000.0 + hand_ms(1, 14, 2), hand_ms(2, 10, 4)])
    m = r.metrics()
    assert m["batch_size_mean"] == pytest.approx(4 / 3)
    assert m["response_mean_ms"] == pytest.approx(
        (hand_ms(1, 500, 2) + hand_ms(2, 10, 4) + 1000.0 + hand_ms(1, 14, 2)) / 3)
    assert m["completion_std_ms"] == pytest.approx(float(np.std(r.completion_ms)))
    assert m["invalid_tokens_per_request"] == pytest.approx(1 / 3)


def test_pool_adaptive_interval_and_load_decrement_hand_computed():
    # eq 12 with λ = 0.3, Γ = 10 ms: T0 = 0.3·min(loads) = 0.3·T_serve(2, 10, 4); the pool
    # stays empty until b returns at T_serve(2, 10, 4) ≈ 3.3·T0, so periods at 0, T0..4·T0;
    # at 4·T0 instance 1 has finished (load back to 0), instance 0 has not
    sch = SliceScheduler("toy", batcher="dp", offloader="max-min", interval="adaptive",
                         slice_length=4, gamma_ms=10.0, lam=0.3)
    inst = toy(ABC)
    r = replay_slices(inst, sch, instances=2)
    check_records(inst, r)
    t0 = 0.3 * hand_ms(2, 10, 4)
    assert 3 * t0 < hand_ms(2, 10, 4) < 4 * t0 < hand_ms(1, 500, 2)
    assert r.periods_ms[:5] == pytest.approx([0.0, t0, 2 * t0, 3 * t0, 4 * t0])
    b = r.batches.iloc[-1]
    assert b["instance"] == 1 and b["start_ms"] == pytest.approx(4 * t0)
    # after offloading b: loads [T(1, 500, 4), T(1, 14, 4)], next interval eq 12
    nxt = max(0.3 * min(hand_ms(1, 500, 4), hand_ms(1, 14, 4)), 10.0)
    assert r.periods_ms[5] == pytest.approx(4 * t0 + nxt)


def test_routed_round_robin_hand_computed():
    # SLS/SO-style: a → 0, b → 1, c → 0 at arrival; instance 0 batches {a, c} (size 2), pads
    # a to 500; b returns after 4 tokens and is re-sent to instance 1 (turn 3)
    sch = SliceScheduler("toy", dispatch="route", batcher="fcfs", batch_size=2,
                         offloader="round-robin", interval="fixed", slice_length=4)
    inst = toy(ABC)
    r = replay_slices(inst, sch, instances=2)
    check_records(inst, r)
    req = r.requests.set_index("request")
    assert req.loc["a", "finish_ms"] == pytest.approx(hand_ms(2, 500, 3))
    assert req.loc["c", "finish_ms"] == pytest.approx(hand_ms(2, 500, 3))
    assert req.loc["a", "pad_tokens"] == 490 and req.loc["c", "invalid_tokens"] == 1
    assert req.loc["b", "finish_ms"] == pytest.approx(hand_ms(1, 10, 4) + hand_ms(1, 14, 2))
    assert req.loc["b", "instance"] == 1
    assert r.periods_ms == []


@pytest.mark.parametrize("name", LADDER)
def test_ladder_records_hold(name):
    inst = load_instance(TOY / "scls-cluster.yaml")
    r = replay_slices(inst, name, instances=4)
    check_records(inst, r)
    sizes = r.batches["size"].to_numpy()
    if name in ("sls", "so", "pm"):
        assert sizes.max() <= 16
    if name == "sls":
        assert (r.requests["slices"] == 1).all()   # generation to completion
    assert r.slice_length == (1024 if name == "sls" else 128)


def test_schedule_conversion_matches_the_records():
    inst = load_instance(TOY / "scls-cluster.yaml")
    r = replay_slices(inst, "scls", instances=4)
    sched = r.to_schedule()
    its = sched.iterations
    # the iteration log sums to each instance's busy time, one prefill + L_o decode rows each
    busy = r.batches.assign(d=r.batches["end_ms"] - r.batches["start_ms"]).groupby(
        "instance")["d"].sum()
    logged = its.assign(d=its["end_ms"] - its["start_ms"]).groupby("instance")["d"].sum()
    assert np.allclose(logged.to_numpy(), busy.reindex(logged.index).to_numpy())
    assert len(its) == len(r.batches) + int(r.batches["iterations"].sum())
    seg = sched.segments
    assert len(seg) == 2 * len(r.members)
    assert (seg["phase"] == "refill").sum() == int((r.requests["slices"] - 1).sum())
    m = sched.metrics()
    assert m["e2e_mean_ms"] == pytest.approx(r.metrics()["response_mean_ms"])
    ax = plot_slices(r)
    assert len(ax.patches) >= 4 * len(r.batches)


@pytest.mark.parametrize("changes, field", [
    ({"slice_length": 0}, "slice_length"), ({"gamma_ms": 0.0}, "gamma_ms"),
    ({"lam": 1.0}, "lambda"), ({"lam": 0.0}, "lambda"), ({"batcher": "lpt"}, "batcher"),
    ({"offloader": "random"}, "offloader"), ({"dispatch": "route", "batcher": "dp"}, "batcher"),
    ({"batcher": "fcfs"}, "batch_size"),
])
def test_bad_parameters_are_user_errors(changes, field):
    with pytest.raises(OptionError) as err:
        replay_slices(toy(ABC), SliceScheduler("bad", **changes), instances=2)
    assert field in str(err.value)


def test_bad_input_is_a_user_error():
    with pytest.raises(OptionError):
        replay_slices(toy(ABC), "fastest", instances=2)
    with pytest.raises(OptionError):
        replay_slices(toy(ABC), "scls", instances=0)
    # a request that does not fit even alone with S tokens (eq 9): 70,000 tokens of KV
    huge = math.ceil(usable_bytes() / RAW["kv_bytes_per_token"])
    with pytest.raises(LlmoptError, match="does not fit in memory even alone"):
        replay_slices(toy([("x", huge, 2, 0.0)]), "scls", instances=2)
    with pytest.raises(ProfileError):
        replay_slices(load_instance(TOY / "quickstart.yaml"), "scls")


@pytest.mark.parametrize("dispatch", ["pool", "route"])
def test_a_prompt_that_outgrows_memory_is_a_user_error(dispatch):
    # fits alone at S = 4 with its input, not once 4 generated tokens are re-prefilled
    cap = math.floor(usable_bytes() / RAW["kv_bytes_per_token"])
    sch = SliceScheduler("toy", dispatch=dispatch, batcher="fcfs", batch_size=1,
                         offloader="round-robin", interval="fixed", slice_length=4)
    with pytest.raises(LlmoptError, match="does not fit in memory even alone"):
        replay_slices(toy([("x", cap - 4, 8, 0.0)]), sch, instances=1)
    # four input tokens fewer and it is served in two slices
    r = replay_slices(toy([("x", cap - 8, 8, 0.0)]), sch, instances=1)
    assert r.requests["slices"].tolist() == [2]
