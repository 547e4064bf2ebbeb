"""The ``roofline`` profile family: the bundled profile holds the roofline the command computes,
bad fields are refused with file, field and value, the infermax family's policies replay on it
and the validator re-times their schedules with the roofline (a tampered or linearly timed
iteration is rejected), and the exact problems, bounds and SLO ceiling refuse it or say they
do not apply."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import ROOT
from llmopt.data.cost import load_profile
from llmopt.data.cost.hardware import find_gpu, hardware_dir, load_architecture
from llmopt.data.cost.roofline import Roofline, RooflineProfile, default_efficiency
from llmopt.data.instance import instance_from_mapping
from llmopt.errors import InstanceError, ProfileError
from llmopt.policies.registry import default_policies
from llmopt.policies.replay import replay_result
from llmopt.problems.workflows.compare import compare
from llmopt.validate import validate_solution

DIRECT = "roofline-mixtral-8x7b-2xh100-direct"
FITTED = "roofline-mixtral-8x7b-2xh100"
MIXTRAL = hardware_dir() / "models" / "mixtral-8x7b-v0.1.config.json"
SHAPES = [(0, 1, 16, 0, 0), (0, 1, 20_000, 0, 0), (0, 300, 300 * 900, 0, 0),
          (4096, 0, 0, 4096**2, 1), (512, 0, 0, 4 * (128**2 + 2 * 256 * 128), 4),
          (1024, 64, 64 * 400, 1024**2 + 2 * 2048 * 1024, 1)]


def instance(model: str, count: int = 24):
    return instance_from_mapping({
        "name": "chat", "model": model, "system": {"clients": 64},
        "requests": {"generate": {
            "count": count, "seed": 3,
            "input": {"dist": "lognormal", "mean": 161, "std": 161, "min": 4, "max": 2048},
            "output": {"dist": "lognormal", "mean": 60, "std": 60, "min": 4, "max": 400},
            "arrival": {"process": "poisson", "rate_per_s": 10}}},
        "slo": {"multiple": 10}}, base_dir=ROOT)


def as_file(result, inst):
    return json.loads(json.dumps(result.to_dict(inst)))


def test_the_bundled_profile_is_the_roofline_of_its_command() -> None:
    """The YAML's fields give the times of the roofline built from the model's config.json and
    the GPU table's line, and the KV capacity it computes; the fitted profile of the same
    command differs from it by more than 20 % somewhere (the reason to bundle it)."""
    profile = load_profile(DIRECT)
    assert isinstance(profile, RooflineProfile) and profile.policy_family == "infermax"
    gpu = find_gpu("H100-SXM5-80GB")
    built = Roofline(load_architecture(MIXTRAL), gpu, 2, "bf16", default_efficiency(gpu))
    assert profile.kv_capacity == built.kv_capacity()
    fitted = load_profile(FITTED)
    worst = 0.0
    for shape in SHAPES:
        assert profile.iteration_ms(*shape) == pytest.approx(built.iteration_ms(*shape),
                                                             rel=1e-12)
        worst = max(worst, abs(fitted.iteration_ms(*shape) / built.iteration_ms(*shape) - 1))
    assert worst > 0.2
    per_batch, per_kv = profile.decode_iteration_costs(8)
    assert per_batch + per_kv * 5000 == pytest.approx(profile.iteration_ms(0, 8, 5000, 0, 0))


def test_the_command_writes_the_bundled_profile(cli, tmp_path) -> None:
    out = tmp_path / f"{DIRECT}.yaml"
    done = cli("profile", "roofline", "--model", MIXTRAL, "--gpu", "H100-SXM5-80GB", "--tp",
               "2", "--family", "roofline", "--out", out)
    assert done.exit_code == 0, done.output
    assert out.read_bytes() == (ROOT / "models" / f"{DIRECT}.yaml").read_bytes()
    done = cli("profile", "roofline", "--model", MIXTRAL, "--gpu", "H100-SXM5-80GB", "--tp",
               "2", "--family", "linear")
    assert done.exit_code == 2 and "--family: value 'linear'" in done.output


@pytest.mark.parametrize(("edit", "field", "value"), [
    (lambda d: d.update(tp=3), "tp", "3"),
    (lambda d: d.update(dtype="fp8", gpu={**d["gpu"], "fp8_dense_tflops": 0}), "dtype",
     "'fp8'"),
    (lambda d: d["efficiency"].update(mbu=1.5), "efficiency.mbu", "1.5"),
    (lambda d: d["architecture"].update(kv_heads=5), "architecture.kv_heads", "5"),
    (lambda d: d["architecture"].update(experts_per_token=9), "architecture.experts_per_token",
     "9"),
    (lambda d: d.pop("kv_capacity"), "kv_capacity", None),
])
def test_bad_fields_are_refused_with_file_field_and_value(tmp_path, cli, edit, field,
                                                          value) -> None:
    data = yaml.safe_load((ROOT / "models" / f"{DIRECT}.yaml").read_text())
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path))
    assert caught.value.file == str(path) and caught.value.field == field
    inst = tmp_path / "inst.yaml"
    inst.write_text(yaml.safe_dump({"name": "x", "model": str(path), "system": {"clients": 1},
                                    "requests": [
        {"id": "a", "input_tokens": 4, "output_tokens": 4}]}))
    done = cli("replay", inst, "--policy", "vllm", "--out", tmp_path / "out")
    line = done.output.strip()
    assert done.exit_code == 2 and "\n" not in line and str(path) in line
    assert f"{field}: value {value}" in line if value else f"{field}:" in line


@pytest.fixture(scope="module")
def replayed():
    inst = instance(DIRECT)
    return inst, {p: replay_result(inst, p)[0] for p in ("vllm", "sarathi", "least-slack")}


def test_infermax_policies_replay_and_validate(replayed) -> None:
    inst, results = replayed
    assert default_policies(inst.profile.policy_family, "replay") == default_policies(
        "infermax", "replay")
    for result in results.values():
        assert validate_solution(inst, as_file(result, inst)) == []


def test_a_tampered_iteration_and_the_linear_form_are_rejected(replayed) -> None:
    """The last iteration 0.5 ms longer (its segments with it): off the roofline. The same
    schedule checked against the fitted profile's linear times: off too (the validator times a
    roofline profile with the roofline, not with the InferMax form)."""
    inst, results = replayed
    sol = as_file(results["vllm"], inst)
    its = sol["iterations"]
    end = its["end_ms"][-1]
    its["end_ms"][-1] = round(end + 0.5, 3)
    for s in sol["segments"]:
        if s["end_ms"] == end:
            s["end_ms"] = round(end + 0.5, 3)
    reasons = validate_solution(inst, sol)
    assert any("off the roofline time model" in r for r in reasons), reasons
    linear = instance(FITTED)
    # the same requests (their SLO targets, derived from each profile, differ)
    assert (linear.input_tokens == inst.input_tokens).all()
    assert (linear.arrival_ms == inst.arrival_ms).all()
    reasons = validate_solution(linear, {**as_file(results["vllm"], inst),
                                         "instance_sha256": linear.sha256})
    assert any("off the infermax time model" in r for r in reasons), reasons


def test_solve_and_bound_refuse_compare_says_why(tmp_path, cli, replayed) -> None:
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "model": DIRECT, "system": {"clients": 1},
                                    "requests": [
        {"id": "a", "input_tokens": 4, "output_tokens": 4}]}))
    for command in ("solve", "bound"):
        done = cli(command, path)
        line = done.output.strip()
        assert done.exit_code == 2 and "\n" not in line, done.output
        assert "model: value 'roofline-mixtral-8x7b-2xh100-direct'" in line
        assert "InferMax linear form" in line and "fitted" in line
    inst, _ = replayed
    made = compare(inst, ["vllm"], time_limit_s=20)
    assert made.bounds == [] and made.best_bound is None
    assert made.ceilings is not None and "no proven SLO ceiling" in made.ceilings.note
    assert any(n.startswith("no lower bound for profile family roofline") for n in made.notes)
    assert made.table["gap_to_bound"].isna().all()


def test_other_families_policies_are_refused(replayed) -> None:
    inst, _ = replayed
    with pytest.raises(InstanceError, match="runs on profiles of family pang_linear"):
        replay_result(inst, "baseline")


def test_listing_shows_the_family(cli) -> None:
    done = cli("list", "profiles", "--markdown")
    assert done.exit_code == 0
    row = next(line for line in done.output.splitlines() if f"`{DIRECT}`" in line)
    assert "| roofline |" in row and "fitted infermax" in row
