"""One slice of a padded static batch (Cheng et al. 2024, sections 2.4, 4.2–4.3): padding,
early return, invalid tokens, time and memory, against hand calculations."""

from __future__ import annotations

import pytest

from conftest import ROOT
from llmopt.data.cost import load_profile
from llmopt.errors import InternalError, OptionError
from llmopt.files import load_yaml_mapping
from llmopt.sim.slices import serve_slice

PROFILE = "scls-llama2-13b-a100"
RAW = load_yaml_mapping(ROOT / "models" / f"{PROFILE}.yaml")


def hand_ms(n: int, length: int, iterations: int) -> float:
    p, d = RAW["prefill"], RAW["decode"]
    total = p["c1"] * n * length + p["c2"] * n + p["c3"] * length + p["c4"]
    for it in range(1, iterations + 1):
        total += d["c1"] * n * (length + it) + d["c2"] * n + d["c3"] * (length + it) + d["c4"]
    return total


def test_full_slice_pads_and_generates_invalid_tokens():
    # a new request (prompt 10, 5 to go) with a re-batched one (input 12 + 8 generated = 20)
    out = serve_slice(load_profile(PROFILE), [10, 20], [5, 300], 128)
    assert out.padded_length == 20 and out.iterations == 128 and not out.early_return
    assert out.pad_tokens == [10, 0]
    assert out.generated == [5, 128] and out.finished == [True, False]
    assert out.invalid_tokens == [123, 0]
    assert out.serve_ms == pytest.approx(hand_ms(2, 20, 128), rel=1e-12)
    assert out.kv_bytes == (20 + 128) * 2 * RAW["kv_bytes_per_token"]


def test_early_return_when_every_request_finishes():
    out = serve_slice(load_profile(PROFILE), [100, 40, 70], [5, 7, 1], 128)
    assert out.iterations == 7 and out.early_return
    assert out.finished == [True, True, True]
    assert out.invalid_tokens == [2, 0, 6] and out.pad_tokens == [0, 60, 30]
    assert out.serve_ms == pytest.approx(hand_ms(3, 100, 7), rel=1e-12)


def test_bad_slices():
    profile = load_profile(PROFILE)
    with pytest.raises(OptionError, match="slice_length"):
        serve_slice(profile, [10], [5], 0)
    with pytest.raises(InternalError):
        serve_slice(profile, [10], [0], 8)
