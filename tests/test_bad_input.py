"""Every user mistake: one line naming file, field and value; exit code 2; no traceback."""

from __future__ import annotations

import json
import os

import pytest

from conftest import TOY
from llmopt.cli import COMMANDS, loaded
from llmopt.data.instance import load_instance
from llmopt.errors import LlmoptError, OptionError
from llmopt.files import out_path

GOOD_HEAD = """name: t
model: pang-llama65b-ascend8
system: {clients: 2}
"""

GOOD_ONE = GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n"
PANG_INLINE = ("{family: pang_linear, source: test, prefill: {overhead_ms: 1, per_token_ms: 1},"
               " decode: {overhead_ms: 1, per_client_ms: 1}}")

CASES = {
    # id: (yaml text or None for a missing file, extra CLI args, expected fragments)
    "missing_file": (None, [], ["does-not-exist.yaml", "not found"]),
    "yaml_syntax": (
        "name: t\nmodel: pang-llama65b-ascend8\nsystem: {clients: 2\nrequests: []\n",
        [], ["inst.yaml", "YAML syntax error", "line"],
    ),
    "unknown_profile": (
        "name: t\nmodel: no-such-gpu\nsystem: {clients: 2}\n"
        "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "model", "no-such-gpu", "unknown profile"],
    ),
    "missing_field": (
        "name: t\nmodel: pang-llama65b-ascend8\n"
        "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "system", "required"],
    ),
    "missing_request_field": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 3}]\n",
        [], ["inst.yaml", "requests[0].output_tokens", "required"],
    ),
    "negative_tokens": (
        GOOD_HEAD + "requests:\n  - {id: a, input_tokens: 3, output_tokens: 4}\n"
        "  - {id: b, input_tokens: -5, output_tokens: 4}\n",
        [], ["inst.yaml", "requests[1].input_tokens", "-5"],
    ),
    "non_integer_tokens": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 3, output_tokens: 4.5}]\n",
        [], ["inst.yaml", "requests[0].output_tokens", "4.5"],
    ),
    "duplicate_ids": (
        GOOD_HEAD + "requests:\n  - {id: a, input_tokens: 3, output_tokens: 4}\n"
        "  - {id: a, input_tokens: 2, output_tokens: 9}\n",
        [], ["inst.yaml", "requests[1].id", "'a'", "duplicate"],
    ),
    "zero_clients": (
        "name: t\nmodel: pang-llama65b-ascend8\nsystem: {clients: 0}\n"
        "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "system.clients", "0"],
    ),
    "empty_requests": (GOOD_HEAD + "requests: []\n", [], ["inst.yaml", "requests", "empty"]),
    "unknown_problem": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        ["--problem", "tsp"], ["--problem", "'tsp'", "unknown problem"],
    ),
    "unknown_solver": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        ["--solver", "gurobi"], ["--solver", "'gurobi'", "unknown solver"],
    ),
    "unknown_solver_in_file": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n"
        "solve: {solver: cplex}\n",
        [], ["inst.yaml", "solve.solver", "'cplex'"],
    ),
    "trace_wrong_columns": (
        GOOD_HEAD + "requests: {trace: trace.csv, format: azure}\n",
        [], ["trace.csv", "columns", "wrong columns", "prompt"],
    ),
    "trace_missing": (
        GOOD_HEAD + "requests: {trace: nowhere.csv}\n", [], ["nowhere.csv", "not found"],
    ),
    "trace_bad_tokens": (
        GOOD_HEAD + "requests: {trace: bad.csv}\n", [],
        ["bad.csv", "num_decode_tokens (row 1, counted from 0)", "-3"],
    ),
    "unknown_top_level_field": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\nclients: 3\n",
        [], ["inst.yaml", "clients", "unknown field"],
    ),
    "generator_bad_dist": (
        GOOD_HEAD + "requests: {generate: {count: 3, seed: 1, input: {dist: zipf},"
        " output: {dist: constant, value: 3}}}\n",
        [], ["inst.yaml", "requests.generate.input.dist", "'zipf'"],
    ),
    "top_level_not_mapping": ("- a\n- b\n", [], ["inst.yaml", "mapping"]),
    "name_dotdot": (GOOD_ONE.replace("name: t", "name: ../../escaped"), [],
                    ["inst.yaml", "name", "'../../escaped'", "safe file name"]),
    "name_absolute": (GOOD_ONE.replace("name: t", "name: /tmp/abs"), [],
                      ["inst.yaml", "name", "'/tmp/abs'", "safe file name"]),
    "name_slash": (GOOD_ONE.replace("name: t", "name: a/b"), [], ["name", "'a/b'"]),
    "name_space": (GOOD_ONE.replace("name: t", "name: a b"), [], ["name", "'a b'"]),
    "name_control": (GOOD_ONE.replace("name: t", 'name: "a\\tb"'), [], ["name", "'a\\tb'"]),
    "profile_inf": (
        "name: t\nmodel: " + PANG_INLINE.replace("overhead_ms: 1,", "overhead_ms: .inf,", 1)
        + "\nsystem: {clients: 2}\nrequests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "model.prefill.overhead_ms", "inf", "finite"],
    ),
    "profile_all_zero": (
        "name: t\nmodel: " + PANG_INLINE.replace(": 1,", ": 0,").replace(": 1}", ": 0}")
        + "\nsystem: {clients: 2}\nrequests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "model", "every time coefficient is 0"],
    ),
    "profile_huge_int": (
        "name: t\nmodel: " + PANG_INLINE.replace("}}", "}, max_prefill_tokens: 1e30}")
        + "\nsystem: {clients: 2}\nrequests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "model.max_prefill_tokens"],
    ),
    "generator_nan": (
        GOOD_HEAD + "requests: {generate: {count: 3, seed: 1, input: {dist: constant, value: .nan},"
        " output: {dist: constant, value: 3}}}\n",
        [], ["inst.yaml", "requests.generate.input.value", "nan", "finite"],
    ),
    "generator_inf": (
        GOOD_HEAD + "requests: {generate: {count: 3, seed: 1, input: {dist: constant, value: 3},"
        " output: {dist: normal, mean: .inf, std: 1}}}\n",
        [], ["inst.yaml", "requests.generate.output.mean", "inf"],
    ),
    "generator_count_huge": (
        GOOD_HEAD + "requests: {generate: {count: 100000000000, seed: 1, input: {dist: constant,"
        " value: 3}, output: {dist: constant, value: 3}}}\n",
        [], ["inst.yaml", "requests.generate.count", "100000000000"],
    ),
    "generator_slow_poisson": (
        GOOD_HEAD + "requests: {generate: {count: 3, seed: 1, input: {dist: constant, value: 3},"
        " output: {dist: constant, value: 3}, arrival: {process: poisson, rate_per_s: 1e-300}}}\n",
        [], ["inst.yaml", "requests.generate[1].arrival_ms"],
    ),
    "inline_huge_tokens": (
        GOOD_HEAD + f"requests: [{{id: a, input_tokens: {10**30}, output_tokens: 1}}]\n",
        [], ["inst.yaml", "requests[0].input_tokens", str(10**30)],
    ),
    "inline_inf_arrival": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1, arrival_ms: .inf}]\n",
        [], ["inst.yaml", "requests[0].arrival_ms", "inf"],
    ),
    "huge_clients": (
        "name: t\nmodel: pang-llama65b-ascend8\nsystem: {clients: 10000000000}\n"
        "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        [], ["inst.yaml", "system.clients", "10000000000"],
    ),
    "time_limit_inf_in_file": (
        GOOD_ONE + "solve: {time_limit_s: .inf}\n", [], ["inst.yaml", "solve.time_limit_s", "inf"],
    ),
    "jsonl_huge_tokens": (
        GOOD_HEAD + "requests: {trace: huge.jsonl}\n", [],
        ["huge.jsonl", "input_tokens (row 1, counted from 0)", "1e+30"],
    ),
    "nan_time_limit": (GOOD_ONE, ["--time-limit", "nan"], ["--time-limit", "nan", "finite"]),
    "inf_time_limit": (GOOD_ONE, ["--time-limit", "inf"], ["--time-limit", "inf", "finite"]),
    "out_under_a_file": (GOOD_ONE, ["--out", "{tmp}/trace.csv/out"],
                         ["--out", "trace.csv is not a folder"]),
    "negative_time_limit": (
        GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n",
        ["--time-limit", "-1"], ["--time-limit", "-1", "positive"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_reports_user_mistakes_on_one_line(case, cli, tmp_path):
    text, args, fragments = CASES[case]
    (tmp_path / "trace.csv").write_text("time,prompt,answer\n0,1,2\n")
    (tmp_path / "huge.jsonl").write_text(
        '{"input_tokens": 5, "output_tokens": 6}\n{"input_tokens": 1e30, "output_tokens": 6}\n'
    )
    (tmp_path / "bad.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n1.5,7,-3\n"
    )
    path = tmp_path / ("does-not-exist.yaml" if text is None else "inst.yaml")
    if text is not None:
        path.write_text(text)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = cli("solve", path, "--out", tmp_path / "out", *args)
    assert result.exit_code == 2, result.output
    stderr = result.stderr.strip()
    assert "Traceback" not in result.output + stderr
    assert stderr.startswith("error:")
    assert len(stderr.splitlines()) == 1, stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)
    assert not (tmp_path / "out").exists()


def test_library_raises_llmopt_error_with_parts(tmp_path):
    path = tmp_path / "i.yaml"
    path.write_text(GOOD_HEAD + "requests: [{id: a, input_tokens: 0, output_tokens: 1}]\n")
    with pytest.raises(LlmoptError) as info:
        load_instance(path)
    assert info.value.file == str(path)
    assert info.value.field == "requests[0].input_tokens"
    assert info.value.value == 0


def test_validate_and_bound_commands_report_bad_files(cli, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD_HEAD + "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n")
    bad_json = tmp_path / "sol.json"
    bad_json.write_text("{not json")
    result = cli("validate", good, bad_json)
    assert result.exit_code == 2 and "sol.json" in result.stderr and "JSON" in result.stderr
    (tmp_path / "partial.json").write_text('{"problem": "binpacking"}')
    result = cli("validate", good, tmp_path / "partial.json")  # JSON, but no solution: invalid
    assert result.exit_code == 1 and "missing required keys" in result.stdout
    assert result.stdout.startswith("invalid: ")
    result = cli("bound", tmp_path / "nope.yaml")
    assert result.exit_code == 2 and "nope.yaml" in result.stderr


def test_validate_says_invalid_when_the_schedule_file_changed(cli, tmp_path):
    """A schedule Parquet edited after the solution was written is an invalid solution (exit
    1, the reason given), not an unreadable input."""
    inst = TOY / "quickstart.yaml"
    assert cli("replay", inst, "--policy", "baseline", "--out", tmp_path,
               "--no-plot").exit_code == 0
    sol = next(tmp_path.rglob("replay-baseline.json"))
    assert cli("validate", inst, sol).exit_code == 0
    sidecar = sol.parent / "replay-baseline.schedule.parquet"
    sidecar.write_bytes(sidecar.read_bytes() + b"\0")
    result = cli("validate", inst, sol)
    assert result.exit_code == 1 and "SHA-256 differs" in result.stdout


def _one_line_error(result, *fragments):
    stderr = result.stderr.strip()
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + stderr
    assert stderr.startswith("error:") and len(stderr.splitlines()) == 1, stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)


TIME_LIMIT_COMMANDS = sorted(
    name for name in COMMANDS
    if any(p.name == "time_limit" for p in getattr(loaded(name), "params", []))
)


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
@pytest.mark.parametrize("command", TIME_LIMIT_COMMANDS)
def test_every_time_limit_must_be_finite_and_positive(command, value, cli, tmp_path):
    assert {"solve", "bound", "compare"} <= set(TIME_LIMIT_COMMANDS)
    inst = tmp_path / "inst.yaml"
    inst.write_text(GOOD_ONE)
    result = cli(command, inst, "--time-limit", value)
    _one_line_error(result, "--time-limit", value, "finite")


@pytest.mark.parametrize("command", ["solve", "replay", "compare"])
@pytest.mark.parametrize("name", ["../../escaped", "/abs", "a/b", "a b", "a\\x01b", ".."])
def test_instance_names_cannot_leave_the_output_folder(command, name, cli, tmp_path):
    work = tmp_path / "deep" / "er"
    work.mkdir(parents=True)
    inst = work / "inst.yaml"
    inst.write_text(GOOD_ONE.replace("name: t", f"name: {json.dumps(name)}"))
    result = cli(command, inst, "--out", work / "out", "--no-plot" if command != "compare"
                 else "--no-optimize")
    _one_line_error(result, "inst.yaml", "name", "safe file name")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deep", "er", "inst.yaml"]


def test_out_path_refuses_a_symlink_leaving_the_folder(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    assert out_path(tmp_path / "out", "t", "x.json") == tmp_path / "out" / "t" / "x.json"
    with pytest.raises(OptionError, match="outside the output folder"):
        out_path(tmp_path / "out", "link", "x.json")
    with pytest.raises(OptionError):
        out_path(tmp_path / "out", "..", "x.json")


@pytest.mark.parametrize("command", ["solve", "replay", "compare"])
def test_out_is_checked_before_the_work(command, cli, tmp_path):
    inst = tmp_path / "inst.yaml"
    inst.write_text(GOOD_ONE)
    (tmp_path / "file").write_text("keep")
    result = cli(command, inst, "--out", tmp_path / "file" / "sub")
    _one_line_error(result, "--out", "is not a folder")
    assert "simulating" not in result.output and "wrote" not in result.output
    assert (tmp_path / "file").read_text() == "keep"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_must_be_writable(cli, tmp_path):
    inst = tmp_path / "inst.yaml"
    inst.write_text(GOOD_ONE)
    (tmp_path / "ro").mkdir(mode=0o555)
    _one_line_error(cli("solve", inst, "--out", tmp_path / "ro" / "out"), "--out",
                    "not writable")


def test_solution_is_rescued_when_it_cannot_be_written(cli, tmp_path, monkeypatch):
    inst = tmp_path / "inst.yaml"
    inst.write_text(GOOD_ONE)
    (tmp_path / "out" / "t" / "binpacking-auto.json").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    result = cli("solve", inst, "--out", "out", "--no-plot")
    assert result.exit_code == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --out:") and "the solution was written to" in last
    rescued = list(tmp_path.glob("llmopt-binpacking-auto-*.json"))
    assert len(rescued) == 1 and last.endswith(str(rescued[0]))
    assert json.loads(rescued[0].read_text())["status"] == "optimal"


@pytest.mark.parametrize("option", ["--hbm-tb-s", "--peak-tflops", "--layers"])
def test_fit_profile_numbers_must_be_positive(option, cli, tmp_path):
    args = {"--name": "x", "--layers": "2", "--q-heads": "2", "--kv-heads": "2"}
    args[option] = "nan" if option != "--layers" else "0"
    result = cli("fit-profile", tmp_path / "p.csv", *[x for kv in args.items() for x in kv])
    _one_line_error(result, option)


def test_a_nameless_instance_needs_a_safe_file_stem(cli, tmp_path):
    inst = tmp_path / "my inst.yaml"
    inst.write_text(GOOD_ONE.replace("name: t\n", ""))
    _one_line_error(cli("solve", inst, "--out", tmp_path / "out"), "my inst.yaml", "name",
                    "'my inst'", "stem")
    assert not (tmp_path / "out").exists()


def test_error_text_with_rich_markup_is_printed_verbatim(cli, tmp_path):
    for args in (["solve", "[/x]"], ["solve", "[/x]", "--time-limit", "[/y]"]):
        result = cli(*args, "--out", tmp_path)
        assert result.exit_code == 2, result.stderr
        assert "[/" in result.stderr and "Traceback" not in result.stderr
        assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
