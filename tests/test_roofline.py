"""The roofline estimate and ``llmopt profile roofline``: the architecture counts against the
models' published parameter counts, the roofline's regimes against hand computations, the fit
(non-negative, its stated error recomputed), the refusals, and the bundled roofline profiles
solving and replaying the bundled SLO instances."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from conftest import ROOT, SHARED_DATA, TOY
from llmopt.data.cost import available_profiles, load_profile
from llmopt.data.cost.hardware import bundled_configs, find_gpu, load_architecture
from llmopt.data.cost.roofline import Efficiency, Roofline, default_efficiency
from llmopt.data.cost.roofline_fit import COEFFICIENTS, fit_infermax, operating_region
from llmopt.data.instance import instance_from_mapping
from llmopt.errors import InputFileError, OptionError
from llmopt.policies.replay import replay_result
from llmopt.problems.api import solve
from llmopt.validate import validate_solution

MODELS = {p.name.removesuffix(".config.json"): p for p in bundled_configs()}
# the fitted (infermax) ones; the roofline family's are tests/test_roofline_family.py's
ROOFLINE_PROFILES = [p for p in available_profiles()
                     if p.startswith("roofline-") and load_profile(p).family == "infermax"]
IDEAL = Efficiency(mfu_prefill=1.0, mfu_decode=1.0, mbu=1.0, mbu_elementwise=1.0,
                   kernel_floor_ms=0.0)


def arch(name: str):
    return load_architecture(MODELS[name])


@pytest.mark.parametrize(("model", "billions"), [
    # the parameter counts the model cards state
    ("llama-2-7b-hf", 6.74), ("llama-3.1-8b-instruct", 8.03), ("llama-3.1-70b-instruct", 70.6),
    ("qwen2.5-7b-instruct", 7.62), ("mixtral-8x7b-v0.1", 46.7), ("qwen3-30b-a3b", 30.5)])
def test_parameter_counts_match_the_model_cards(model, billions) -> None:
    assert arch(model).total_params / 1e9 == pytest.approx(billions, rel=0.01)


def test_active_parameters_of_mixtures_of_experts() -> None:
    # Mixtral: 12.9B active, Qwen3-30B-A3B: 3.3B active (model cards; embeddings included)
    for model, active in (("mixtral-8x7b-v0.1", 12.9), ("qwen3-30b-a3b", 3.3)):
        a = arch(model)
        counted = a.layers * a.active_layer_params + 2 * a.head_params
        assert counted / 1e9 == pytest.approx(active, rel=0.03)


def test_ideal_roofline_by_hand() -> None:
    """Peaks reached exactly, no floor: a decode of one token reads every weight once; a large
    prefill runs at the compute roof; decode attention reads each KV's bytes once."""
    a = arch("llama-2-7b-hf")
    gpu = find_gpu("A100-SXM4-80GB")
    roof = Roofline(a, gpu, 1, "bf16", IDEAL)
    weights_ms = (a.layers * a.layer_params + a.head_params) * 2 / (2.039e12) * 1e3
    one = roof.iteration_ms(0, 1, 0, 0, 0)
    assert weights_ms < one < weights_ms * 1.02  # + one token's activations
    n = 4096
    flops = 2 * n * a.layers * a.layer_params + 2 * a.head_params
    big = roof.parts(n, 0, 0, 0, 1)
    assert big["layers"] + big["head"] >= flops / 312e12 * 1e3
    assert big["layers"] + big["head"] < flops / 312e12 * 1e3 * 1.15  # + element-wise traffic
    assert roof.decode_kv_ms() == pytest.approx(524_288 / 2.039e12 * 1e3)
    per_batch, per_kv = roof.decode_iteration_costs(8)
    assert roof.iteration_ms(0, 8, 10_000, 0, 0) == pytest.approx(per_batch + 10_000 * per_kv)


def test_tensor_parallelism_splits_weights_and_adds_allreduces() -> None:
    a, gpu = arch("llama-3.1-70b-instruct"), find_gpu("H100-SXM5-80GB")
    one, four = (Roofline(a, gpu, tp, "bf16", IDEAL) for tp in (1, 4))
    assert four.weights_gib() == pytest.approx(one.weights_gib() / 4)
    assert one.parts(1, 0, 0, 1, 1)["allreduce"] == 0
    # two all-reduces per layer; ring: 2(tp-1)/tp of the hidden state per GPU at 450 GB/s × 0.8
    ring_ms = 2 * 3 / 4 * 1000 * 8192 * 2 / (450e9 * 0.8) * 1e3
    assert four.parts(1000, 0, 0, 0, 1)["allreduce"] == pytest.approx(
        2 * 80 * (0.01 + ring_ms))


def test_experts_read_grows_with_the_tokens() -> None:
    """A mixture of experts reads the experts its tokens touch: one token reads k of E, many
    tokens read all of them."""
    a, gpu = arch("mixtral-8x7b-v0.1"), find_gpu("H100-SXM5-80GB")
    roof = Roofline(a, gpu, 1, "bf16", IDEAL)
    gate_up = {n: dict((k, b) for k, _, b in roof.layer_kernels(n, 0))["gate_up_proj"]
               for n in (1, 4096)}
    expert_bytes = 2 * a.hidden * a.intermediate * 2

    def activations(n: int) -> int:  # each routed row reads the hidden state, writes 2 × I
        return n * 2 * (a.hidden + 2 * a.intermediate) * 2

    assert gate_up[1] == pytest.approx(2 * expert_bytes + activations(1))
    assert gate_up[4096] == pytest.approx(8 * expert_bytes + activations(4096))


def test_fit_is_non_negative_and_states_its_error() -> None:
    gpu = find_gpu("H100-SXM5-80GB")
    roof = Roofline(arch("llama-3.1-8b-instruct"), gpu, 1, "bf16", default_efficiency(gpu))
    shapes = list(operating_region(8192, 200_000))
    coefficients, errors = fit_infermax(roof, shapes)
    assert all(v >= 0 for v in coefficients.values())
    assert [e.region for e in errors] == ["prefill-heavy", "decode-heavy", "mixed"]
    # recompute the stated error from the coefficients and the roofline
    for e in errors:
        inside = [s for s in shapes if s.region == e.region]
        fitted = np.array([sum(coefficients[k] * x for k, x in zip(COEFFICIENTS, s.features(),
                                                                   strict=True)) for s in inside])
        exact = np.array([roof.iteration_ms(s.prefill_tokens, s.decodes, s.decode_kv, s.units,
                                            s.chunks) for s in inside])
        rel = np.abs(fitted / exact - 1)
        assert (rel.max(), rel.mean()) == pytest.approx((e.max_rel, e.mean_rel))
        assert e.mean_rel < 0.25  # a dense model: the form fits the roofline to ~10 % on average
    # every shape stays inside the region
    assert all(s.prefill_tokens + s.decodes <= 8192 for s in shapes)
    assert all(s.decode_kv <= 200_000 for s in shapes)


def test_profile_command_writes_a_loadable_profile(cli, tmp_path) -> None:
    out = tmp_path / "qwen-l40s.yaml"
    done = cli("profile", "roofline", "--model", MODELS["qwen2.5-7b-instruct"], "--gpu",
               "L40S-48GB", "--out", out)
    assert done.exit_code == 0, done.output
    data = yaml.safe_load(out.read_text())
    profile = load_profile(str(out))
    assert profile.name == "qwen-l40s" and profile.family == "infermax"
    for region in ("prefill-heavy", "decode-heavy", "mixed"):
        assert region in data["source"]
    assert "not calibrated on this GPU" in data["source"]  # the L40S has no measurement
    # the KV capacity: 90 % of 48 GiB less the weights and the reserve, over 57,344 bytes
    a = arch("qwen2.5-7b-instruct")
    assert a.kv_bytes_per_token() == 57_344
    assert 0 < data["kv_capacity"] < (0.9 * 48 * 2**30 - a.total_params * 2) / 57_344


@pytest.mark.parametrize(("model", "args", "field", "value"), [
    ("llama-3.1-8b-instruct", ["--gpu", "H100-SXM5-80GB", "--tp", "3"], "--tp", "3"),
    ("qwen2.5-7b-instruct", ["--gpu", "H100-SXM5-80GB", "--tp", "8"], "--tp", "8"),  # 4 KV heads
    ("llama-3.1-70b-instruct", ["--gpu", "L40S-48GB"], "--tp", "1"),  # does not fit
    ("llama-3.1-8b-instruct", ["--gpu", "H100-PCIe"], "--gpu", "'H100-PCIe'"),
    ("llama-3.1-8b-instruct", ["--gpu", "A100-SXM4-80GB", "--dtype", "fp8"], "--dtype", "'fp8'"),
    ("llama-3.1-8b-instruct", ["--gpu", "V100-SXM2-32GB"], "--dtype", "'bf16'"),
    ("llama-3.1-8b-instruct", ["--gpu", "H100-SXM5-80GB", "--dtype", "int3"], "--dtype",
     "'int3'"),
    ("llama-3.1-8b-instruct", ["--gpu", "H100-SXM5-80GB", "--mbu", "1.5"], "--mbu", "1.5"),
])
def test_profile_command_refuses_nonsense(cli, tmp_path, model, args, field, value) -> None:
    done = cli("profile", "roofline", "--model", MODELS[model], *args, "--out",
               tmp_path / "p.yaml")
    assert done.exit_code == 2, done.output
    line = done.output.strip()
    assert "\n" not in line and line.startswith("error:")
    assert f"{field}: value {value}" in line
    assert not (tmp_path / "p.yaml").exists()


def test_unknown_gpu_suggests_the_closest() -> None:
    with pytest.raises(OptionError, match="did you mean H100-SXM5-80GB"):
        find_gpu("H100-SXM5")


def test_unmodelled_architectures_are_refused(tmp_path) -> None:
    config = json.loads(MODELS["llama-3.1-8b-instruct"].read_text())
    for change, field in (({"model_type": "gpt2"}, "model_type"),
                          ({"kv_lora_rank": 512}, "kv_lora_rank"),
                          ({"num_key_value_heads": 5}, "num_key_value_heads"),
                          ({"hidden_size": "big"}, "hidden_size")):
        path = tmp_path / "c.config.json"
        path.write_text(json.dumps({**config, **change}))
        with pytest.raises(InputFileError) as caught:
            load_architecture(path)
        assert caught.value.file == str(path) and caught.value.field == field
    path.write_text("{not json")
    with pytest.raises(InputFileError, match="not valid JSON"):
        load_architecture(path)


def test_bundled_profiles_name_their_fit_error() -> None:
    assert len(ROOFLINE_PROFILES) >= 8
    for name in ROOFLINE_PROFILES:
        profile = load_profile(name)
        assert profile.family == "infermax"
        for region in ("prefill-heavy", "decode-heavy", "mixed"):
            assert f"{region} (n = " in profile.source


@pytest.mark.parametrize("name", ROOFLINE_PROFILES)
def test_bundled_profile_solves_and_replays_the_slo_instances(name) -> None:
    """slo-chat solved (the heuristics; the CSP would need too much memory for its 200
    requests, with any profile) and both SLO instances replayed, each replay validated. The
    Mooncake sample is not solved: its 300 requests exceed its clients, which the CSP refuses
    with any profile. (The solve's schedule is its best heuristic's replay; validating its
    plan takes the validator about 15 s per profile, so it is validated for one profile.)"""
    for instance_file in ("slo-chat.yaml", "slo-mooncake-sample.yaml"):
        data = yaml.safe_load((TOY / instance_file).read_text())
        data["model"] = name
        inst = instance_from_mapping(data, base_dir=TOY)
        if instance_file == "slo-chat.yaml":
            solved = solve(inst, time_limit_s=5)
            assert solved.status in ("optimal", "feasible")
            assert solved.objective is not None and solved.objective > 0
            if name == ROOFLINE_PROFILES[-1]:
                assert validate_solution(inst, solved.to_dict(inst)) == []
        result, _ = replay_result(inst, "sarathi")
        assert validate_solution(inst, result.to_dict(inst)) == []
        assert 0 <= result.metrics["attainment"] <= 1


@pytest.mark.skipif(not (SHARED_DATA / "models").is_dir(), reason="../shared/data is absent")
def test_bundled_configs_are_copies_of_the_shared_ones() -> None:
    for path in bundled_configs():
        assert path.read_bytes() == (SHARED_DATA / "models" / path.name).read_bytes()


@pytest.mark.skipif(not (SHARED_DATA / "gpus.csv").is_dir() and
                    not (SHARED_DATA / "gpus.csv").is_file(), reason="../shared/data is absent")
def test_bundled_gpu_facts_are_the_shared_ones() -> None:
    import csv

    shared = {r["gpu"]: r for r in csv.DictReader((SHARED_DATA / "gpus.csv").open())}
    bundled = {r["gpu"]: r for r in csv.DictReader(
        (ROOT / "llmopt" / "data" / "hardware" / "gpus.csv").open())}
    assert set(shared) == set(bundled)
    for gpu, row in shared.items():
        for key, value in row.items():
            assert bundled[gpu][key] == value
