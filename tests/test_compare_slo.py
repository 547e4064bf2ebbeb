"""``llmopt compare`` on an instance with SLOs: attainment columns and the exact bound."""

from __future__ import annotations

from llmopt.data.instance import instance_from_mapping
from llmopt.report.compare import compare


def test_compare_shows_attainment_below_the_exact_bound() -> None:
    inst = instance_from_mapping({
        "name": "tiny-slo", "model": "infermax-llama2-7b-a100",
        "system": {"clients": 8, "kv_capacity": 600, "max_batch_tokens": 512},
        "requests": {"generate": {"count": 6, "seed": 2,
                                  "input": {"dist": "uniform", "low": 8, "high": 128},
                                  "output": {"dist": "uniform", "low": 1, "high": 8},
                                  "arrival": {"process": "poisson", "rate_per_s": 200}}},
        "slo": {"multiple": 2, "basis": "each"}})
    result = compare(inst, ["sola", "vllm-v1", "vllm"], time_limit_s=5)
    bound = result.attainment_bound
    assert bound is not None and bound.requests == 6
    replays = result.table[result.table["schedule"].isin(["sola", "vllm-v1", "vllm"])]
    assert len(replays) == 3
    for share in replays["attainment"]:
        assert round(share * 6) <= bound.met_upper
    text = result.markdown()
    assert "SLO attainment" in text and "attainment bound" in text
    assert "E2E met" not in text  # no request has an E2E target
