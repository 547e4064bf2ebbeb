"""The CLI writes the solution contract, charts and bounds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import llmopt.cli.solve as solve_cli
from conftest import ROOT, TOY
from llmopt.errors import LlmoptWarning, one_line_warnings
from llmopt.result import CONTRACT_KEYS, read_solution


def test_solve_writes_contract_json_and_png(cli, tmp_path):
    result = cli("solve", TOY / "quickstart.yaml", "--out", tmp_path)
    assert result.exit_code == 0, result.output + result.stderr
    for fragment in ("binpacking", "auto", "optimal", "25,274.5"):
        assert fragment in result.output
    sol_path = tmp_path / "quickstart" / "binpacking-auto.json"
    sol = json.loads(sol_path.read_text())
    for key in CONTRACT_KEYS:
        assert key in sol
    assert sol["units"] == "ms" and sol["time_limit_s"] == 30
    assert set(sol["assignment"]) == {f"q{i}" for i in range(12)}
    assert len(sol["loads"]) == 4
    png = (tmp_path / "quickstart" / "binpacking-auto.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert cli("validate", TOY / "quickstart.yaml", sol_path).exit_code == 0
    assert not list((tmp_path / "quickstart").glob(".*"))  # no temp files left behind


def test_solve_draws_a_packing_with_idle_clients(cli, tmp_path, write_yaml):
    path = write_yaml("name: idle\nmodel: pang-llama65b-ascend8\nsystem: {clients: 3}\n"
                      "requests: [{id: a, input_tokens: 3, output_tokens: 4}]\n", "idle.yaml")
    result = cli("solve", path, "--out", tmp_path)
    assert result.exit_code == 0, result.output + result.stderr
    assert (tmp_path / "idle" / "binpacking-auto.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_flags_override_instance_defaults(cli, tmp_path):
    result = cli("solve", TOY / "quickstart.yaml", "--out", tmp_path, "--solver", "highs",
                 "--time-limit", "12", "--no-plot")
    assert result.exit_code == 0
    sol = json.loads((tmp_path / "quickstart" / "binpacking-highs.json").read_text())
    assert sol["solver"] == "highs" and sol["time_limit_s"] == 12
    assert sol["solver_version"].startswith("highs ")
    assert not (tmp_path / "quickstart" / "binpacking-highs.png").exists()


def test_bound_reports_eq31_and_eq32_parts(cli):
    result = cli("bound", TOY / "quickstart.yaml", "--json", "--no-solvers")
    assert result.exit_code == 0, result.stderr
    bounds = {b["name"]: b for b in json.loads(result.stdout)["bounds"]}
    eq32 = bounds["pang_eq32"]
    # 808 prompt tokens fit one largest-level stage of 4096 tokens: 25 + 0.13 × 4096 ms;
    # the bin-packing optimum is 847 tokens at t_round = 29 + 0.21 × 4 ms.
    assert eq32["parts"]["t_p"] == pytest.approx(557.48)
    assert eq32["parts"]["t_d"] == pytest.approx(847 * 29.84)
    assert eq32["value_ms"] == pytest.approx(557.48 + 847 * 29.84)
    levels = bounds["pang_eq32_levels"]
    assert levels["parts"]["t_p"] == pytest.approx(25 + 0.13 * 808)
    table = cli("bound", TOY / "quickstart.yaml", "--time-limit", "3")
    assert table.exit_code == 0 and "pang_eq32" in table.stdout and "eq 31" in table.stdout
    assert "compact_cpsat_replay" in table.stdout


@pytest.mark.parametrize("first", ["highspy", "ortools.sat.python.cp_model"])
def test_highspy_and_ortools_load_in_either_order(first):
    """Both packages ship a libhighs.so.1 and the loader keeps whichever comes first."""
    second = "ortools.sat.python.cp_model" if first == "highspy" else "highspy"
    code = (f"import {first}, {second}\n"
            "import highspy\nh = highspy.Highs(); h.setOptionValue('output_flag', False)\n"
            "h.addVar(0, 4); h.changeColCost(0, -1.0); h.run()\n"
            "assert abs(h.getInfo().objective_function_value + 4) < 1e-9\n"
            "from ortools.sat.python import cp_model\n"
            "m = cp_model.CpModel(); x = m.new_int_var(0, 3, 'x'); m.maximize(x)\n"
            "s = cp_model.CpSolver(); assert s.solve(m) == cp_model.OPTIMAL\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_replay_writes_valid_schedules_and_charts(cli, tmp_path):
    result = cli("replay", TOY / "gsm8k-small.yaml", "--policy", "baseline,hybrid", "--out",
                 tmp_path)
    assert result.exit_code == 0, result.stderr
    assert "baseline" in result.stdout and "hybrid" in result.stdout
    folder = tmp_path / "gsm8k-small"
    for policy in ("baseline", "hybrid"):
        path = folder / f"replay-{policy}.json"
        sol = json.loads(path.read_text())
        assert sol["problem"] == "replay" and sol["solver"] == policy
        assert sol["status"] == "feasible" and sol["metrics"]
        assert "segments" not in sol and (folder / sol["schedule"]["file"]).is_file()
        assert len(read_solution(path)["segments"]) == sol["schedule"]["segments"] > 0
        for key in ("makespan_ms", "utilization", "tokens_per_s", "ttft_p99_ms",
                    "tpot_p50_ms", "e2e_mean_ms"):
            assert key in sol["metrics"]
        assert (folder / f"replay-{policy}.png").read_bytes()[:4] == b"\x89PNG"
        check = cli("validate", TOY / "gsm8k-small.yaml", folder / f"replay-{policy}.json")
        assert check.exit_code == 0, check.stdout


def test_replay_of_a_solver_plan(cli, tmp_path):
    assert cli("solve", TOY / "quickstart.yaml", "--out", tmp_path, "--no-plot").exit_code == 0
    plan = tmp_path / "quickstart" / "binpacking-auto.json"
    result = cli("replay", TOY / "quickstart.yaml", "--policy", "plan", "--plan", plan,
                 "--out", tmp_path, "--no-plot")
    assert result.exit_code == 0, result.stderr
    sol = read_solution(tmp_path / "quickstart" / "replay-plan.json")
    placed = dict(zip(sol["segments"]["request"], sol["segments"]["client"], strict=True))
    assert placed == json.loads(plan.read_text())["assignment"]


def test_replay_runs_the_policies_that_can_and_reports_the_others(cli, tmp_path):
    result = cli("replay", TOY / "quickstart.yaml", "--policy", "baseline,vllm,online",
                 "--out", tmp_path, "--no-plot")
    assert result.exit_code == 2
    assert "error: policy vllm:" in result.stderr and "profiles of family infermax" in result.stderr
    assert "1 of 3 policies could not run" in result.stderr
    assert "Traceback" not in result.stderr
    for name in ("baseline", "online"):
        assert cli("validate", TOY / "quickstart.yaml",
                   tmp_path / "quickstart" / f"replay-{name}.json").exit_code == 0
    assert not (tmp_path / "quickstart" / "replay-vllm.json").exists()


def test_replay_rejects_unknown_policy_and_missing_plan(cli, tmp_path):
    bad = cli("replay", TOY / "quickstart.yaml", "--policy", "baseline,fifo", "--out", tmp_path)
    assert bad.exit_code == 2 and "'fifo'" in bad.stderr and "--policy" in bad.stderr
    no_plan = cli("replay", TOY / "quickstart.yaml", "--policy", "plan", "--out", tmp_path)
    assert no_plan.exit_code == 2 and "--plan" in no_plan.stderr


def test_compare_writes_table_csv_and_chart(cli, tmp_path):
    import pandas as pd

    result = cli("compare", TOY / "gsm8k-small.yaml", "--out", tmp_path, "--time-limit", "1")
    assert result.exit_code == 0, result.stderr
    folder = tmp_path / "gsm8k-small"
    table = pd.read_csv(folder / "compare.csv")
    policies = ["baseline", "offline", "online", "iteration", "hybrid"]
    assert list(table["schedule"]) == [*policies, "pd-competition"]
    assert (table["gap_to_bound"] >= 0).all()
    md = (folder / "compare.md").read_text()
    assert "pd_replay_rounds" in md and "| hybrid |" in md
    assert (folder / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_gantt_draws_replays_and_assignments(cli, tmp_path):
    cli("replay", TOY / "quickstart.yaml", "--policy", "online", "--out", tmp_path, "--no-plot")
    cli("solve", TOY / "quickstart.yaml", "--out", tmp_path, "--no-plot")
    for name in ("replay-online", "binpacking-auto"):
        png = tmp_path / f"{name}.png"
        result = cli("gantt", TOY / "quickstart.yaml", tmp_path / "quickstart" / f"{name}.json",
                     "--out", png)
        assert result.exit_code == 0, result.stderr
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_pd_competition_from_the_cli(cli, tmp_path):
    inst = TOY / "pd-tiny.yaml"
    result = cli("solve", inst, "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert "optimal" in result.stdout and "replayed with batch-dependent rounds" in result.stdout
    folder = tmp_path / "pd-tiny"
    sol = read_solution(folder / "pd-competition-auto.json")
    assert sol["status"] == "optimal" and sol["formulation"] == "compact"
    assert sol["stages"] and len(sol["segments"]) and len(sol["iterations"])
    assert (folder / "pd-competition-auto.png").read_bytes()[:4] == b"\x89PNG"
    assert cli("validate", inst, folder / "pd-competition-auto.json").exit_code == 0
    original = cli("solve", inst, "--formulation", "original", "--solver", "highs", "--bins", "5",
                   "--out", tmp_path / "o", "--no-plot")
    assert original.exit_code == 0 and "optimal" in original.stdout
    other = json.loads((tmp_path / "o" / "pd-tiny" / "pd-competition-highs.json").read_text())
    assert other["objective"] == pytest.approx(sol["objective"])
    plan = folder / "pd-competition-auto.json"
    replayed = cli("replay", inst, "--policy", "plan", "--plan", plan, "--out", tmp_path,
                   "--no-plot")
    assert replayed.exit_code == 0
    plan_replay = json.loads((folder / "replay-plan.json").read_text())
    assert plan_replay["objective"] == pytest.approx(sol["objective_replay_ms"], abs=1e-3)


def test_pd_competition_option_errors(cli, tmp_path):
    inst = TOY / "pd-tiny.yaml"
    bad = cli("solve", inst, "--formulation", "fancy", "--out", tmp_path)
    assert bad.exit_code == 2 and "--formulation" in bad.stderr and "'fancy'" in bad.stderr
    bad = cli("solve", inst, "--formulation", "original", "--solver", "cpsat", "--out", tmp_path)
    assert bad.exit_code == 2 and "highs" in bad.stderr
    bad = cli("solve", inst, "--time-model", "wallclock", "--out", tmp_path)
    assert bad.exit_code == 2 and "--time-model" in bad.stderr


def test_bound_lists_solver_bounds_with_their_time_model(cli):
    result = cli("bound", TOY / "pd-tiny.yaml", "--json")
    assert result.exit_code == 0, result.stderr
    bounds = {b["name"]: b for b in json.loads(result.stdout)["bounds"]}
    assert {"pang_eq32", "pd_replay_rounds", "mip_lp_relaxation", "compact_cpsat_stage",
            "compact_cpsat_replay"} <= set(bounds)
    assert bounds["compact_cpsat_stage"]["time_model"] == "stage"
    assert bounds["mip_lp_relaxation"]["value_ms"] <= bounds["compact_cpsat_stage"]["value_ms"]


def test_plot_save_takes_a_string_path(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from llmopt.report import plot

    monkeypatch.chdir(tmp_path)
    _, ax = plt.subplots()
    plot.save(ax, "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("instance", "policy"), [("huang-chat-code.yaml", "vllm"),
                                                  ("huang-chat-code.yaml", "baseline"),
                                                  ("infermax-tiny.yaml", "hybrid")])
def test_replay_refuses_a_policy_of_another_profile_family(cli, tmp_path, instance, policy):
    result = cli("replay", TOY / instance, "--policy", policy, "--out", tmp_path, "--no-plot")
    assert result.exit_code == 2
    assert f"policy {policy} runs on profiles of family" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_list_gives_what_is_asked_in_either_form(cli):
    traces = cli("list", "traces", "--markdown")
    assert traces.exit_code == 0
    assert traces.output.startswith("| trace format |") and "| problem |" not in traces.output
    profiles = cli("list", "profiles", "--markdown").output
    for path in sorted((ROOT / "models").glob("*.yaml")):
        line = next(x for x in profiles.splitlines() if f"`{path.stem}`" in x)
        assert f"| {path.read_text().split('family:')[1].split()[0]} |" in line
    assert "| `scls-llama2-13b-a100` | scls | — | scls-batching |" in profiles
    plain = cli("list", "routers").output
    assert "routers" in plain and "problems" not in plain


def test_solve_holds_the_file_it_writes_against_the_validator(cli, tmp_path, monkeypatch):
    good = cli("solve", TOY / "pd-tiny.yaml", "--out", tmp_path, "--no-plot")
    assert good.exit_code == 0, good.output
    assert "validated: valid" in good.output and "optimality checked independently" in good.output
    real = solve_cli.run_solve

    def off_by_a_bit(*args, **kwargs):  # a solver bug: an objective its answer does not give
        result = real(*args, **kwargs)
        result.objective *= 0.99
        return result

    monkeypatch.setattr(solve_cli, "run_solve", off_by_a_bit)
    bad = cli("solve", TOY / "pd-tiny.yaml", "--out", tmp_path / "bad", "--no-plot")
    assert bad.exit_code == 1
    assert "internal error" in bad.stderr and "fails the independent validator" in bad.stderr
    assert (tmp_path / "bad" / "pd-tiny").is_dir()  # the file is kept for the report


def test_a_broken_profile_file_spoils_no_listing(cli, tmp_path, monkeypatch):
    (tmp_path / "broken.yaml").write_text("name: x\nfamily: [\n")
    monkeypatch.setenv("LLMOPT_MODELS", str(tmp_path))
    result = cli("list")
    assert result.exit_code == 0, result.output
    assert "broken" in result.output and "cannot be read" in result.output


def test_only_llmopts_own_warnings_are_printed_as_one_line():
    printed, passed_on = [], []
    show = one_line_warnings(printed.append, lambda *args: passed_on.append(args[1]))
    for _ in range(2):
        show(LlmoptWarning("a trace was sorted"), LlmoptWarning, "x.py", 1)
    show(UserWarning("no artists with labels"), UserWarning, str(ROOT / "llmopt" / "x.py"), 1)
    assert printed == ["warning: a trace was sorted"] and passed_on == [UserWarning]


def test_version_option_prints_the_version(cli):
    from llmopt.version import __version__

    result = cli("--version")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"llmopt {__version__}"


@pytest.mark.parametrize(("args", "suggested"), [
    (("replay", TOY / "infermax-tiny.yaml", "--policy", "sarathii"), "'sarathi'"),
    (("solve", TOY / "quickstart.yaml", "--problem", "binpackin"), "'binpacking'"),
    (("replay", TOY / "quickstart.yaml", "--policy", "baseline", "--router", "round-robbin"),
     "'round-robin'"),
])
def test_a_misspelt_name_gets_a_did_you_mean(cli, tmp_path, args, suggested):
    result = cli(*args, "--out", tmp_path)
    assert result.exit_code == 2, result.output
    assert f"did you mean {suggested}" in result.stderr


def _replay_table(tmp_path, columns: str | None) -> str:
    """``llmopt replay`` of an SLO instance (eleven columns) printed to a pipe, not a
    terminal, with ``COLUMNS`` set or not."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    args = ["replay", str(TOY / "huang-chat-code.yaml"), "--policy", "huang-vllm", "--no-plot",
            "--out", str(tmp_path)]
    done = subprocess.run([sys.executable, "-m", "llmopt", *args], capture_output=True,
                          text=True, env=env, check=True)
    return done.stdout


def test_tables_in_a_log_cut_no_value_and_honour_columns(tmp_path):
    piped = _replay_table(tmp_path, None)
    assert "…" not in piped
    assert " huang-vllm │" in piped  # the first column whole (was 'huang-v…' at 120 columns)
    assert all(len(line) <= 120 for line in piped.splitlines() if "│" in line or "┃" in line)
    wide = _replay_table(tmp_path, "200")
    header = next(line for line in wide.splitlines() if "policy" in line)
    assert "TTFT p50 (ms)" in header and "SLO met" in header  # one header line: nothing wrapped


def test_replay_and_compare_show_one_instances_times_in_the_same_units(cli, tmp_path):
    """One rule (llmopt.report.units): a time column whose largest value is under 10 s in ms,
    else in s; replay printed seconds (0.03 s) where compare printed ms for the same run."""
    replayed = cli("replay", TOY / "infermax-tiny.yaml", "--policy", "vllm,sarathi",
                   "--no-plot", "--out", tmp_path)
    compared = cli("compare", TOY / "infermax-tiny.yaml", "--policy", "vllm,sarathi",
                   "--no-optimize", "--out", tmp_path)
    assert replayed.exit_code == 0 and compared.exit_code == 0, replayed.output + compared.output
    for column in ("TTFT p50 (ms)", "TPOT p50 (ms)"):
        assert column in replayed.output and column in compared.output
    assert "total (ms)" in replayed.output and "total time (ms)" in compared.output
    # the same makespan, printed alike by both
    makespan = read_solution(tmp_path / "infermax-tiny" / "replay-vllm.json")["objective"]
    assert f"{makespan:,.2f}" in replayed.output and f"{makespan:,.2f}" in compared.output


LONG_PROMPT = """\
name: long-prompt
model: infermax-llama2-7b-a100
system: {clients: 4, kv_capacity: 4000, max_batch_tokens: 256}
requests:
  - {id: a, input_tokens: 600, output_tokens: 3}
  - {id: b, input_tokens: 20, output_tokens: 4}
"""


def test_compare_skips_a_default_policy_that_cannot_run_and_refuses_a_named_one(
        cli, write_yaml, tmp_path):
    import pandas as pd

    path = write_yaml(LONG_PROMPT)  # a 600-token prompt, batches of 256: only chunked prefill
    done = cli("compare", path, "--out", tmp_path / "a", "--no-optimize", "--time-limit", "20")
    assert done.exit_code == 0, done.stderr
    assert "skipped: policy vllm:" in done.stderr and "chunked prefill" in done.stderr
    table = pd.read_csv(tmp_path / "a" / "long-prompt" / "compare.csv")
    assert "sarathi" in set(table["schedule"]) and "vllm" not in set(table["schedule"])
    assert "could not run vllm" in (tmp_path / "a" / "long-prompt" / "compare.md").read_text()
    named = cli("compare", path, "--out", tmp_path / "b", "--policy", "vllm,sarathi",
                "--no-optimize")
    assert named.exit_code == 2 and "error: policy vllm:" in named.stderr
    assert "1 of 2 policies could not run" in named.stderr and "Traceback" not in named.stderr
    written = pd.read_csv(tmp_path / "b" / "long-prompt" / "compare.csv")
    assert list(written["schedule"]) == ["sarathi"]
    alone = cli("compare", path, "--out", tmp_path / "c", "--policy", "vllm", "--no-optimize")
    assert alone.exit_code == 2 and "chunked prefill" in alone.stderr
