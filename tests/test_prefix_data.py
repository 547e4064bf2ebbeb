"""Prompt prefixes in workloads: hash ids read from traces and generated for sessions, KV block
keys, and the ideal reuse counted from the ids alone."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, TOY
from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.data.prefix import PrefixIndex, ideal_reuse
from llmopt.errors import InstanceError, TraceError

PROFILE = "infermax-llama2-7b-a100"


def _instance(requests: list[dict]) -> object:
    return instance_from_mapping({"name": "prefix", "model": PROFILE, "system": {"clients": 8},
                                  "requests": requests})


def _brute_reuse(inst, block_size: int) -> int:
    """Hit blocks by the keys themselves: each request, in arrival order, finds cached the
    leading blocks whose keys an earlier prompt had."""
    index = PrefixIndex(inst.requests, block_size)
    seen: set[int] = set()
    total = 0
    for i in np.argsort(inst.arrival_ms, kind="stable").tolist():
        keys = index.keys(i).tolist()
        n = 0
        while n < index.cacheable_blocks(i) and keys[n] in seen:
            n += 1
        total += n
        seen.update(keys)
    return total


def test_mooncake_reader_keeps_the_hash_ids() -> None:
    inst = load_instance(TOY / "slo-mooncake-sample.yaml")
    first = [json.loads(line) for line in
             (ROOT / "instances" / "real" / "mooncake-conv-sample.jsonl").open()][:3]
    for request, raw in zip(inst.requests, first, strict=False):
        assert list(request.hash_ids) == raw["hash_ids"]
        assert request.hash_block_tokens == 512


def test_jsonl_hash_ids_with_and_without_a_block_size(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"input_tokens": 40, "output_tokens": 2, "hash_ids": [7, 8, 9]}\n'
                     '{"input_tokens": 33, "output_tokens": 2, "hash_ids": [7, 8, 1]}\n')
    inst = _instance({"trace": str(trace), "format": "jsonl"})
    assert [r.hash_block_tokens for r in inst.requests] == [16, 16]
    # both prompts hold the blocks [7] and [7, 8]: the second finds 2 blocks cached
    assert ideal_reuse(inst, 16).hit_blocks.tolist() == [0, 2]
    sized = tmp_path / "s.jsonl"
    sized.write_text('{"input_tokens": 40, "output_tokens": 2, "hash_ids": [7], '
                     '"hash_block_tokens": 64}\n')
    assert _instance({"trace": str(sized), "format": "jsonl"}).requests[0].hash_block_tokens == 64


@pytest.mark.parametrize(("line", "message"), [
    ('{"input_tokens": 40, "output_tokens": 2, "hash_ids": [1, -2]}', "hash_ids (row 0"),
    ('{"input_tokens": 40, "output_tokens": 2, "hash_ids": []}', "hash_ids (row 0"),
    ('{"input_tokens": 40, "output_tokens": 2, "hash_ids": "1,2"}', "hash_ids (row 0"),
    ('{"input_tokens": 40, "output_tokens": 2, "hash_ids": [1, 2, 3, 4]}', "4 hash_ids"),
    ('{"input_tokens": 40, "output_tokens": 2, "hash_block_tokens": 16}', "without hash_ids"),
])
def test_bad_hash_ids_are_refused_with_their_row(tmp_path: Path, line: str, message: str) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(line + "\n")
    with pytest.raises((TraceError, InstanceError), match=message.replace("(", r"\(")):
        _instance({"trace": str(trace), "format": "jsonl"})


def test_a_request_needs_both_hash_fields() -> None:
    with pytest.raises(InstanceError, match="go together"):
        _instance([{"id": "a", "input_tokens": 40, "output_tokens": 2, "hash_ids": [1]}])


def test_block_keys_follow_the_chain_not_the_id() -> None:
    """Equal ids behind different prefixes are different blocks; a KV block inside a hash
    block has the key of its last token; a partial last KV block has none."""
    inst = _instance([
        {"id": "a", "input_tokens": 70, "output_tokens": 1, "hash_ids": [1, 2, 3],
         "hash_block_tokens": 32},
        {"id": "b", "input_tokens": 70, "output_tokens": 1, "hash_ids": [9, 2, 3],
         "hash_block_tokens": 32},
        {"id": "c", "input_tokens": 50, "output_tokens": 1, "hash_ids": [1, 2],
         "hash_block_tokens": 32}])
    index = PrefixIndex(inst.requests, 16)
    a, b, c = (index.keys(i).tolist() for i in range(3))
    assert len(a) == 4 and len(c) == 3  # 70 // 16 = 4 full blocks; 50 // 16 = 3
    assert c == a[:3]
    assert not set(a) & set(b)
    assert index.cacheable_blocks(2) == 3  # (50 - 1) // 16


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=5),
                          st.integers(0, 40), st.integers(0, 5)), min_size=1, max_size=12),
       st.sampled_from([4, 8, 16, 24, 64]), st.sampled_from([1, 5, 8, 16, 40]))
def test_ideal_reuse_equals_the_count_over_keys(prompts, hash_tokens, block_size) -> None:
    """On random prompts with overlapping id chains (few distinct ids, so that chains share
    prefixes and also repeat ids behind other prefixes), any hash and KV block sizes."""
    requests = []
    for k, (ids, short, arrival) in enumerate(prompts):
        tokens = max(len(ids) * hash_tokens - short, (len(ids) - 1) * hash_tokens + 1)
        requests.append({"id": f"r{k}", "input_tokens": tokens, "output_tokens": 1,
                         "arrival_ms": float(arrival), "hash_ids": ids,
                         "hash_block_tokens": hash_tokens})
    inst = _instance(requests)
    assert int(ideal_reuse(inst, block_size).hit_blocks.sum()) == _brute_reuse(inst, block_size)


SESSIONS = {"generate": {
    "count": 60, "seed": 3,
    "input": {"dist": "lognormal", "mean": 80, "std": 80, "max": 500},
    "output": {"dist": "lognormal", "mean": 60, "std": 60, "max": 300},
    "arrival": {"process": "poisson", "rate_per_s": 5},
    "prefix": {"system_prompts": 2, "system_tokens": 200,
               "turns": {"dist": "uniform", "low": 1, "high": 5},
               "think_ms": {"dist": "constant", "value": 3000, "min": 0}}}}


def test_sessions_extend_their_turns_and_share_system_prompts() -> None:
    inst = _instance(SESSIONS)
    again = _instance(SESSIONS)
    assert inst.sha256 == again.sha256  # seeded
    assert inst.num_requests == 60
    assert inst.arrival_ms.tolist() == sorted(inst.arrival_ms.tolist())
    requests = inst.requests
    system_blocks = 200 // 16
    firsts = {r.hash_ids[:system_blocks] for r in requests}
    assert len(firsts) == 2  # two system prompts, each shared by many sessions
    # a later turn of a session holds every full block of the one before it, and more tokens
    by_id = {r.hash_ids[:system_blocks + 1]: [] for r in requests}
    for r in requests:
        by_id[r.hash_ids[:system_blocks + 1]].append(r)
    chains = [turns for turns in by_id.values() if len(turns) > 1]
    assert chains
    for turns in chains:
        for before, after in itertools.pairwise(turns):
            full = before.input_tokens // 16
            assert after.hash_ids[:full] == before.hash_ids[:full]
            assert after.input_tokens > before.input_tokens + before.output_tokens - 16
            assert after.arrival_ms - before.arrival_ms == pytest.approx(3000)
    assert ideal_reuse(inst).token_hit_rate > 0.5


def test_sessions_refuse_duration_and_respect_the_prompt_cap() -> None:
    spec = json.loads(json.dumps(SESSIONS))
    spec["generate"]["prefix"]["max_prompt_tokens"] = 400
    assert max(_instance(spec).input_tokens) <= 400
    spec["generate"].pop("count")
    spec["generate"]["duration_s"] = 10
    with pytest.raises(InstanceError, match="duration_s does not go with prefix"):
        _instance(spec)


def test_instances_without_hashes_keep_their_content_hash() -> None:
    """An instance whose requests carry no hash ids dumps as before (no new keys)."""
    inst = load_instance(TOY / "slo-chat.yaml")
    assert all("hash_ids" not in r.model_dump(exclude_none=True) for r in inst.requests)


def test_keys_of_different_hash_block_sizes_never_collide() -> None:
    # node 2 of 16-token hash blocks and node 1 of 32-token ones once both gave key 47
    inst = _instance([
        {"id": "a", "input_tokens": 64, "output_tokens": 2, "hash_ids": [1, 2, 3, 4],
         "hash_block_tokens": 16},
        {"id": "b", "input_tokens": 64, "output_tokens": 2, "hash_ids": [9, 8],
         "hash_block_tokens": 32}])
    index = PrefixIndex(inst.requests, 16)
    b = index.keys(1).tolist()  # b's chain first: nodes 0, 1; then a's: 2 .. 5
    a = index.keys(0).tolist()
    assert len(a) == len(b) == 4 and not set(a) & set(b)
