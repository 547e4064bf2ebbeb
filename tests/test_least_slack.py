"""The least-slack scheduler: its rules on hand-made cases, and its replays validated on random
instances (where the SLO ceiling must stay above it)."""

from __future__ import annotations

import json

import pytest

from llmopt.data.instance import instance_from_mapping
from llmopt.errors import LlmoptError
from llmopt.experiments.slo_ceiling_check import TINY_PROFILE, random_slo_instance
from llmopt.policies.deploy import Deployment
from llmopt.policies.replay import replay, replay_result
from llmopt.policies.routing import RoundRobin
from llmopt.policies.slo.least_slack import LeastSlack
from llmopt.problems.slo_ceiling.ceiling import attainment_ceiling
from llmopt.schedule.metrics import request_latencies
from llmopt.sim.cluster import simulate
from llmopt.validate import validate_solution


def _instance(requests: list[dict], **system: int) -> object:
    return instance_from_mapping({"name": "slack", "model": TINY_PROFILE,
                                  "system": {"clients": 8, "kv_capacity": 4096,
                                             "max_batch_tokens": 64, **system},
                                  "requests": requests})


def test_a_request_that_cannot_meet_its_ttft_waits_behind_those_that_can() -> None:
    """``late`` comes first (all arrive at 0 ms) with a prompt that cannot be prefilled within
    its TTFT target; FCFS (vllm-v1) starts it and the two short requests behind it miss; least
    slack defers it and both meet theirs."""
    requests = [{"id": "late", "input_tokens": 60, "output_tokens": 2, "arrival_ms": 0.0,
                 "ttft_slo_ms": 2.0},
                *({"id": f"short{k}", "input_tokens": 4, "output_tokens": 2,
                   "arrival_ms": 0.0, "ttft_slo_ms": 4.0} for k in range(2))]
    inst = _instance(requests, max_batch_tokens=64)
    met = {}
    for policy in ("vllm-v1", "least-slack"):
        result, schedule = replay_result(inst, policy)
        assert validate_solution(inst, json.loads(json.dumps(result.to_dict(inst)))) == []
        lat = request_latencies(schedule, inst).set_index("request")
        met[policy] = lat["slo_met"].to_dict()
    assert not met["vllm-v1"]["short0"] and not met["vllm-v1"]["short1"]
    assert met["least-slack"]["short0"] and met["least-slack"]["short1"]


def test_a_long_prompt_that_would_make_the_short_ones_late_is_deferred() -> None:
    """``long`` can meet its TTFT alone (9.36 ms of 9.5) and has the earliest deadline, but
    prefilled with the four short prompts (one iteration of 40 tokens: 12.4 ms on the tiny
    profile) it makes all five late. Moore and Hodgson's rule defers it once the third short
    one passes its deadline, and takes the fourth (estimated 2.54 ms with ``long`` out): the
    four short ones meet their TTFT (one iteration of 16 tokens: 4.04 ms); without the
    deferral none does."""
    requests = [{"id": "long", "input_tokens": 24, "output_tokens": 2, "arrival_ms": 0.0,
                 "ttft_slo_ms": 9.5},
                *({"id": f"short{k}", "input_tokens": 4, "output_tokens": 2,
                   "arrival_ms": 0.0, "ttft_slo_ms": 10.0} for k in range(4))]
    inst = _instance(requests, max_batch_tokens=64)
    met, first = {}, {}
    for defer in (False, True):
        schedule = simulate(inst, Deployment("least-slack", [LeastSlack(defer=defer)],
                                             RoundRobin()))
        lat = request_latencies(schedule, inst).set_index("request")
        met[defer] = int(lat["slo_met"].sum())
        first[defer] = schedule.requests.set_index("request")["first_token_ms"].to_dict()
    assert met[False] == 0
    assert met[True] == 4
    assert first[True]["long"] > max(first[True][f"short{k}"] for k in range(4))
    result, schedule = replay_result(inst, "least-slack-defer")   # the registered policy
    assert validate_solution(inst, json.loads(json.dumps(result.to_dict(inst)))) == []
    assert int(request_latencies(schedule, inst)["slo_met"].sum()) == 4


def test_a_decode_with_slack_leaves_the_iteration_to_a_prefill() -> None:
    """A request decoding far ahead of its TPOT target sits out the iterations that prefill a
    request arriving meanwhile; once no prefill runs, it decodes again."""
    requests = [{"id": "decoding", "input_tokens": 4, "output_tokens": 30, "arrival_ms": 0.0,
                 "ttft_slo_ms": 100.0, "tpot_slo_ms": 100.0},
                {"id": "new", "input_tokens": 200, "output_tokens": 2, "arrival_ms": 5.0,
                 "ttft_slo_ms": 2000.0}]
    inst = _instance(requests, max_batch_tokens=512)
    policy = LeastSlack(chunk=64)
    seen: list[tuple[int, int]] = []
    form = policy.next_batch

    def recording(r):  # type: ignore[no-untyped-def]
        b = form(r)
        if b is not None:
            seen.append((len(b.chunks), b.n_dec))
        return b

    policy.next_batch = recording  # type: ignore[method-assign]
    schedule = simulate(inst, Deployment("least-slack", [policy], RoundRobin()))
    assert (1, 0) in seen      # a prefill chunk of "new" without the relaxed decode
    assert any(n_dec and not chunks for chunks, n_dec in seen)  # decodes alone afterwards
    lat = request_latencies(schedule, inst).set_index("request")
    assert lat["slo_met"].all()


@pytest.mark.parametrize("policy", ["least-slack", "least-slack-defer"])
@pytest.mark.parametrize("seed", range(0, 400, 8))
def test_replays_validate_and_stay_under_the_ceiling(seed: int, policy: str) -> None:
    inst = random_slo_instance(seed)
    try:
        result, schedule = replay_result(inst, policy)
    except LlmoptError:
        return  # the instance is refused (a request alone does not fit): nothing to check
    assert validate_solution(inst, json.loads(json.dumps(result.to_dict(inst)))) == []
    met = int(request_latencies(schedule, inst)["slo_met"].sum())
    assert met <= attainment_ceiling(inst, time_limit_s=30).met_max


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError):
        LeastSlack(chunk=0)
    with pytest.raises(ValueError):
        LeastSlack(urgency=0)
    # instances without SLOs run as a deadline-free FCFS with chunked prefill
    inst = _instance([{"id": "a", "input_tokens": 8, "output_tokens": 3}])
    assert len(replay(inst, "least-slack").requests) == 1
