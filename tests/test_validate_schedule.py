"""The schedule validator rejects every broken rule."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import make_instance
from llmopt.policies.replay import replay_result
from llmopt.validate import validate_solution


@pytest.fixture(scope="module")
def case():
    inst = make_instance([5, 7, 3, 6, 2, 4], clients=2, inputs=[20, 30, 25, 10, 40, 15],
                         kv_capacity=400)
    result, _ = replay_result(inst, "baseline")
    sol = json.loads(json.dumps(result.to_dict(inst)))
    assert validate_solution(inst, sol) == []
    return inst, sol


def first(sol, request, phase):
    return next(s for s in sol["segments"] if s["request"] == request and s["phase"] == phase)


def _shift_prefill_into_decode(sol):
    # move r2's prefill earlier so that it overlaps r0/r1's decoding
    seg = first(sol, "r2", "prefill")
    seg["start_ms"] -= 100.0
    seg["end_ms"] -= 100.0


def _double_book_client(sol):
    for s in sol["segments"]:
        if s["request"] == "r1":
            s["client"] = 0


def _drop_decode_token(sol):
    first(sol, "r0", "decode")["tokens"] -= 1


def _decode_before_prefill(sol):
    seg = first(sol, "r3", "decode")
    pre = first(sol, "r3", "prefill")
    seg["start_ms"] = pre["start_ms"]


def _drop_request(sol):
    sol["segments"] = [s for s in sol["segments"] if s["request"] != "r5"]


def _wrong_objective(sol):
    sol["objective"] += 10.0


def _unknown_phase(sol):
    sol["segments"][0]["phase"] = "thinking"


def _wrong_kv_log(sol):
    sol["iterations"]["kv_tokens"][3] += 1


def _wrong_utilization(sol):
    sol["metrics"]["utilization"] *= 1.1


def _claims_optimal(sol):
    sol["status"] = "optimal"


CORRUPTIONS = {
    "prefill overlaps decode": (_shift_prefill_into_decode, "overlap"),
    "client double-booked": (_double_book_client, "same time"),
    "decode tokens wrong": (_drop_decode_token, "wrong token counts"),
    "decode before prefill": (_decode_before_prefill, "before their prefill"),
    "request missing": (_drop_request, "never scheduled"),
    "objective wrong": (_wrong_objective, "objective"),
    "unknown phase": (_unknown_phase, "phase"),
    "kv log inconsistent": (_wrong_kv_log, "kv_tokens"),
    "utilization wrong": (_wrong_utilization, "utilization"),
    "optimal without proof": (_claims_optimal, "status"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_validator_rejects_broken_schedules(case, name):
    inst, sol = case
    fn, fragment = CORRUPTIONS[name]
    bad = copy.deepcopy(sol)
    fn(bad)
    reasons = validate_solution(inst, bad)
    assert any(fragment in r for r in reasons), reasons


def test_kv_over_capacity_is_caught(case):
    inst, sol = case
    smaller = inst.with_system(kv_capacity=40)
    sol = dict(sol, instance_sha256=smaller.sha256)
    reasons = validate_solution(smaller, sol)
    assert any("exceeds capacity" in r for r in reasons), reasons


def test_pd_reservation_rule_is_checked_beside_held_memory(case):
    # PD competition reserves input + output tokens per request in flight; a capacity between
    # the peak held and the peak reserved is broken by the reservation rule alone
    inst, sol = case
    held_peak = max(sol["iterations"]["kv_tokens"])
    size = {r.id: r.input_tokens + r.output_tokens for r in inst.requests}
    spans = {}
    for s in sol["segments"]:
        lo, hi = spans.get(s["request"], (s["start_ms"], s["end_ms"]))
        spans[s["request"]] = (min(lo, s["start_ms"]), max(hi, s["end_ms"]))
    events = sorted([(a, 1, size[r]) for r, (a, _) in spans.items()]
                    + [(b, 0, -size[r]) for r, (_, b) in spans.items()])
    reserved, peak = 0, 0
    for _, _, delta in events:
        reserved += delta
        peak = max(peak, reserved)
    assert held_peak < peak
    smaller = inst.with_system(kv_capacity=held_peak)
    reasons = validate_solution(smaller, dict(sol, instance_sha256=smaller.sha256))
    assert any("reserve" in r for r in reasons), reasons
    assert not any("exceeds capacity" in r for r in reasons), reasons
