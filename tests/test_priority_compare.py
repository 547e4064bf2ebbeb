"""``llmopt compare`` of a bilinear instance (Huang et al. 2025): G of each replay beside the
best priority plan and the proven upper bound on G."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import load_instance
from llmopt.validate import validate_solution

INSTANCE = TOY / "huang-chat-code.yaml"


def test_compare_shows_each_replay_beside_the_plan_and_the_bound(cli, tmp_path):
    result = cli("compare", INSTANCE, "--out", tmp_path, "--time-limit", "20")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "huang-chat-code"
    table = pd.read_csv(folder / "compare.csv")
    assert list(table["schedule"]) == ["huang-vllm", "slo-priority plan (optimal)",
                                       "slo-priority plan, replayed"]
    for name in ("compare.md", "compare.png", "slo-cdf.png"):
        assert (folder / name).stat().st_size > 0
    plan = table[table["scored_by"] == "eqs 14–17"].iloc[0]
    assert plan["gap_to_bound"] == pytest.approx(0.0, abs=1e-6)  # optimal: at its bound
    assert table.loc[table["scored_by"] == "replay", "gap_to_bound"].isna().all()
    # the plan's G is what the validator recomputes from the plan itself
    cli("solve", INSTANCE, "--solver", "cpsat", "--out", tmp_path, "--no-plot")
    sol = json.loads((folder / "slo-priority-cpsat.json").read_text())
    inst = load_instance(INSTANCE)
    assert validate_solution(inst, sol) == []
    assert plan["g_per_s"] == pytest.approx(sol["g_per_s"], rel=1e-9)
    assert plan["n_met"] == sol["n_met"]


def test_without_optimizing_the_closed_form_bound_is_shown(cli, tmp_path):
    result = cli("compare", INSTANCE, "--no-optimize", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "huang-chat-code" / "compare.csv")
    assert list(table["schedule"]) == ["huang-vllm"]
    assert "closed form" in result.output
    # the closed-form bound on G over plans is above the best plan CP-SAT finds (validated)
    bound = float(result.output.split("**")[1].split()[0])
    cli("solve", INSTANCE, "--solver", "cpsat", "--out", tmp_path, "--no-plot")
    sol = json.loads((tmp_path / "huang-chat-code" / "slo-priority-cpsat.json").read_text())
    assert validate_solution(load_instance(INSTANCE), sol) == []
    assert bound >= sol["g_per_s"] > table["g_per_s"].iloc[0]


def test_the_bound_on_several_model_instances_is_over_algorithm_2s_plans(cli, tmp_path):
    """On two model instances compare shows Algorithm 2's plan (scored by the predictor and
    replayed) and the bound over every plan on two instances (a one-instance bound would sit
    below the replays): the plan's G is below it."""
    two = tmp_path / "two.yaml"
    two.write_text(INSTANCE.read_text().replace("system: {clients: 2}",
                                                "system: {clients: 2, instances: 2}"))
    result = cli("compare", two, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "upper bound on G over priority plans on 2 model instances" in result.output
    bound = float(result.output.split("**")[1].split()[0])
    table = pd.read_csv(tmp_path / "huang-chat-code" / "compare.csv")
    assert list(table["schedule"]) == ["huang-vllm", "Algorithm 2 plan (SA per instance)",
                                       "Algorithm 2 plan, replayed"]
    assert table["g_per_s"].iloc[1] <= bound
