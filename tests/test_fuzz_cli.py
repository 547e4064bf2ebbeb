"""Fuzzing the CLI (issue 18): a table of hand-made bad files and options for every command, and
property tests mutating a valid instance at random.

Every bad input must end with exit code 2 and one ``error:`` line naming the file, the field
and the value, no traceback, and nothing written outside the output folder. The cases here are
new; ``test_bad_input.py`` holds the first table."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_bad_input
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import TOY
from llmopt.cli import COMMANDS, app, loaded

GOOD_HEAD = "name: t\nmodel: pang-llama65b-ascend8\nsystem: {clients: 2}\n"
ONE_REQ = "requests: [{id: a, input_tokens: 1, output_tokens: 1}]\n"
GOOD_ONE = GOOD_HEAD + ONE_REQ
TINY = (TOY / "infermax-tiny.yaml").read_text()
PANG = (
    "{family: pang_linear, source: s, prefill: {overhead_ms: 1, per_token_ms: 1}, "
    "decode: {overhead_ms: 1, per_client_ms: 1}}"
)
GEN = "{count: 3, seed: 1, input: {dist: constant, value: 3}, output: {dist: constant, value: 3}}"
FIT_ARGS = ["--name", "x", "--layers", "2", "--q-heads", "2", "--kv-heads", "2"]
GOOD_FIT_CSV = "num_tokens,num_tensor_parallel_workers,mlp.median\n1,1,0.5\n2,1,0.6\n4,1,0.8\n"

DIR = object()  # the file is a folder
UNREADABLE = object()  # the file exists without read permission


def head(
    system: str = "{clients: 2}", model: str = "pang-llama65b-ascend8", name: str = "t"
) -> str:
    return f"name: {name}\nmodel: {model}\nsystem: {system}\n"


def req(**fields: Any) -> str:
    base: dict[str, Any] = {"id": "a", "input_tokens": 1, "output_tokens": 1}
    base.update(fields)
    base = {k: v for k, v in base.items() if v is not DROP}
    return "requests: [" + json.dumps(base) + "]\n"


DROP = object()


def gen(**fields: Any) -> str:
    base = yaml.safe_load(GEN)
    for key, value in fields.items():
        node = base
        *path, last = key.split("__")
        for p in path:
            node = node[p]
        if value is DROP:
            del node[last]
        else:
            node[last] = value
    return GOOD_HEAD + "requests: {generate: " + json.dumps(base) + "}\n"


def trace(spec: str) -> str:
    return GOOD_HEAD + f"requests: {spec}\n"


def sol(base: str, **changes: Any) -> Callable[[dict[str, Any]], str]:
    """A solution JSON made from the base solution ``base`` with keys changed or dropped."""

    def make(bases: dict[str, Any]) -> str:
        data = copy.deepcopy(bases[base])
        for key, value in changes.items():
            if value is DROP:
                data.pop(key, None)
            else:
                data[key] = value
        return json.dumps(data)

    return make


def sidecar(bases: dict[str, Any]) -> bytes:
    return bases["parquet"]


RP = "replay-vllm.json"
RP_SIDE = "replay-vllm.schedule.parquet"
CSP_SIDE = "infermax-csp-auto.schedule.parquet"
TINY_FILES = {"i.yaml": TINY}
WITH_SIDE = {"i.yaml": TINY, RP_SIDE: sidecar}


def _schedule(**changes: Any) -> Callable[[dict[str, Any]], str]:
    def make(bases: dict[str, Any]) -> str:
        data = copy.deepcopy(bases["replay"])
        data["schedule"].update(changes)
        return json.dumps(data)

    return make


# id: (command line with {d} = the input folder and {out} = the output folder,
#      files written into {d}, fragments the error line must hold)
CASES: dict[str, tuple[list[str], dict[str, Any], list[str]]] = {
    # --- instance files: the file itself -------------------------------------------------
    "yaml_scalar_int": (["solve"], {"i.yaml": "42\n"}, ["i.yaml", "mapping", "int"]),
    "yaml_scalar_str": (["solve"], {"i.yaml": "just words\n"}, ["i.yaml", "mapping", "str"]),
    "yaml_empty": (["solve"], {"i.yaml": ""}, ["i.yaml", "empty"]),
    "yaml_comments_only": (["bound"], {"i.yaml": "# nothing here\n"}, ["i.yaml", "empty"]),
    "yaml_binary": (
        ["solve"],
        {"i.yaml": b"\x00\xff\xfe\x89PNG\r\n\x1a\n\x00\x00"},
        ["i.yaml", "cannot read", "utf-8"],
    ),
    "yaml_latin1": (
        ["solve"],
        {"i.yaml": GOOD_ONE.replace("name: t", "name: caf\xe9").encode("latin-1")},
        ["i.yaml", "cannot read"],
    ),
    "yaml_is_folder": (["solve"], {"i.yaml": DIR}, ["i.yaml", "directory"]),
    "yaml_unreadable": (["solve"], {"i.yaml": UNREADABLE}, ["i.yaml"]),
    "yaml_tab_indent": (
        ["solve"],
        {"i.yaml": "name: t\nsystem:\n\tclients: 2\n"},
        ["i.yaml", "YAML syntax error"],
    ),
    "yaml_python_tag": (
        ["solve"],
        {"i.yaml": "name: !!python/object:os.system x\n"},
        ["i.yaml", "YAML"],
    ),
    "yaml_duplicate_anchor_alias": (["solve"], {"i.yaml": "name: *nope\n"}, ["i.yaml", "YAML"]),
    # --- instance: name, model ---------------------------------------------------------------
    "name_list": (
        ["solve"],
        {"i.yaml": head(name="[a, b]") + ONE_REQ},
        ["i.yaml", "name", "['a', 'b']"],
    ),
    "name_int": (["solve"], {"i.yaml": head(name="12") + ONE_REQ}, ["i.yaml", "name", "12"]),
    "name_empty": (
        ["solve"],
        {"i.yaml": head(name='""') + ONE_REQ},
        ["i.yaml", "name", "''", "safe file name"],
    ),
    "model_int": (
        ["solve"],
        {"i.yaml": head(model="5") + ONE_REQ},
        ["i.yaml", "model", "5", "profile name or a mapping"],
    ),
    "model_list": (
        ["solve"],
        {"i.yaml": head(model="[a]") + ONE_REQ},
        ["i.yaml", "model", "['a']", "profile name or a mapping"],
    ),
    "model_empty": (["solve"], {"i.yaml": head(model='""') + ONE_REQ}, ["i.yaml", "model", "''"]),
    "model_file_not_mapping": (
        ["solve"],
        {"i.yaml": head(model="p.yaml") + ONE_REQ, "p.yaml": "- 1\n"},
        ["p.yaml", "mapping"],
    ),
    "profile_unknown_family": (
        ["solve"],
        {"i.yaml": head(model=PANG.replace("pang_linear", "tpu_magic")) + ONE_REQ},
        ["i.yaml", "model", "tpu_magic"],
    ),
    "profile_missing_decode": (
        ["solve"],
        {"i.yaml": head(model=PANG.split(", decode")[0] + "}") + ONE_REQ},
        ["i.yaml", "model", "decode"],
    ),
    "profile_negative_coeff": (
        ["solve"],
        {"i.yaml": head(model=PANG.replace("per_token_ms: 1", "per_token_ms: -2")) + ONE_REQ},
        ["i.yaml", "model.prefill.per_token_ms", "-2"],
    ),
    "profile_string_coeff": (
        ["solve"],
        {"i.yaml": head(model=PANG.replace("per_client_ms: 1", "per_client_ms: fast")) + ONE_REQ},
        ["i.yaml", "model.decode.per_client_ms", "fast"],
    ),
    "profile_unknown_key": (
        ["solve"],
        {"i.yaml": head(model=PANG.replace("source: s", "source: s, color: red")) + ONE_REQ},
        ["i.yaml", "model", "color"],
    ),
    # --- instance: system --------------------------------------------------------------------
    "system_list": (
        ["solve"],
        {"i.yaml": head(system="[2]") + ONE_REQ},
        ["i.yaml", "system", "[2]"],
    ),
    "system_string": (
        ["solve"],
        {"i.yaml": head(system="big") + ONE_REQ},
        ["i.yaml", "system", "big"],
    ),
    "clients_string": (
        ["solve"],
        {"i.yaml": head(system="{clients: two}") + ONE_REQ},
        ["i.yaml", "system.clients", "two"],
    ),
    "clients_bool": (
        ["solve"],
        {"i.yaml": head(system="{clients: true}") + ONE_REQ},
        ["i.yaml", "system.clients", "True"],
    ),
    "clients_float": (
        ["bound"],
        {"i.yaml": head(system="{clients: 2.5}") + ONE_REQ},
        ["i.yaml", "system.clients", "2.5"],
    ),
    "clients_negative": (
        ["replay", "--no-plot"],
        {"i.yaml": head(system="{clients: -3}") + ONE_REQ},
        ["i.yaml", "system.clients", "-3"],
    ),
    "clients_null": (
        ["solve"],
        {"i.yaml": head(system="{clients: null}") + ONE_REQ},
        ["i.yaml", "system.clients", "None"],
    ),
    "kv_capacity_zero": (
        ["solve"],
        {"i.yaml": head(system="{clients: 2, kv_capacity: 0}") + ONE_REQ},
        ["i.yaml", "system.kv_capacity", "0"],
    ),
    "max_batch_tokens_string": (
        ["solve"],
        {"i.yaml": head(system="{clients: 2, max_batch_tokens: lots}") + ONE_REQ},
        ["i.yaml", "system.max_batch_tokens", "lots"],
    ),
    "instances_zero": (
        ["compare", "--no-optimize"],
        {"i.yaml": head(system="{clients: 2, instances: 0}") + ONE_REQ},
        ["i.yaml", "system.instances", "0"],
    ),
    "instances_huge": (
        ["solve"],
        {"i.yaml": head(system="{clients: 2, instances: 99999999999}") + ONE_REQ},
        ["i.yaml", "system.instances", "99999999999"],
    ),
    "system_unknown_key": (
        ["solve"],
        {"i.yaml": head(system="{clients: 2, gpus: 3}") + ONE_REQ},
        ["i.yaml", "system.gpus", "unknown field"],
    ),
    # --- instance: requests ------------------------------------------------------------------
    "requests_int": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + "requests: 5\n"},
        ["i.yaml", "requests", "5"],
    ),
    "requests_string": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + "requests: lots\n"},
        ["i.yaml", "requests", "'lots'"],
    ),
    "requests_null": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + "requests:\n"},
        ["i.yaml", "requests", "None"],
    ),
    "requests_scalars": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + "requests: [1, 2]\n"},
        ["i.yaml", "requests[0]", "value 1"],
    ),
    "requests_unknown_mapping": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + "requests: {from: db}\n"},
        ["i.yaml", "requests", "from"],
    ),
    "request_unknown_key": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(priority=3)},
        ["i.yaml", "requests[0].priority", "unknown field"],
    ),
    "request_id_empty": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(id="")},
        ["i.yaml", "requests[0].id", "''"],
    ),
    "request_id_list": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(id=[1])},
        ["i.yaml", "requests[0].id", "[1]"],
    ),
    "request_id_missing": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(id=DROP)},
        ["i.yaml", "requests[0].id", "required"],
    ),
    "input_tokens_bool": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(input_tokens=True)},
        ["i.yaml", "requests[0].input_tokens", "True"],
    ),
    "input_tokens_string": (
        ["bound"],
        {"i.yaml": GOOD_HEAD + req(input_tokens="12")},
        ["i.yaml", "requests[0].input_tokens", "12"],
    ),
    "output_tokens_null": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(output_tokens=None)},
        ["i.yaml", "requests[0].output_tokens", "None"],
    ),
    "output_tokens_zero_replay": (
        ["replay", "--no-plot"],
        {"i.yaml": GOOD_HEAD + req(output_tokens=0)},
        ["i.yaml", "requests[0].output_tokens", "0"],
    ),
    "arrival_negative": (
        ["solve"],
        {"i.yaml": GOOD_HEAD + req(arrival_ms=-1)},
        ["i.yaml", "requests[0].arrival_ms", "-1"],
    ),
    "arrival_string": (
        ["replay", "--no-plot"],
        {"i.yaml": GOOD_HEAD + req(arrival_ms="soon")},
        ["i.yaml", "requests[0].arrival_ms", "soon"],
    ),
    # --- instance: generator -----------------------------------------------------------------
    "gen_count_zero": (
        ["solve"],
        {"i.yaml": gen(count=0)},
        ["i.yaml", "requests.generate.count", "0"],
    ),
    "gen_count_string": (
        ["solve"],
        {"i.yaml": gen(count="3")},
        ["i.yaml", "requests.generate.count", "3"],
    ),
    "gen_seed_float": (
        ["solve"],
        {"i.yaml": gen(seed=1.5)},
        ["i.yaml", "requests.generate.seed", "1.5"],
    ),
    "gen_seed_negative": (
        ["solve"],
        {"i.yaml": gen(seed=-1)},
        ["i.yaml", "requests.generate.seed", "-1"],
    ),
    "gen_missing_input": (
        ["solve"],
        {"i.yaml": gen(input=DROP)},
        ["i.yaml", "requests.generate.input", "required"],
    ),
    "gen_unknown_key": (
        ["solve"],
        {"i.yaml": gen(shuffle=True)},
        ["i.yaml", "requests.generate.shuffle"],
    ),
    "gen_normal_no_std": (
        ["solve"],
        {"i.yaml": gen(input={"dist": "normal", "mean": 5})},
        ["i.yaml", "requests.generate.input.std", "required"],
    ),
    "gen_lognormal_negative_mean": (
        ["solve"],
        {"i.yaml": gen(output={"dist": "lognormal", "mean": -4, "std": 1})},
        ["i.yaml", "requests.generate.output.mean", "-4"],
    ),
    "gen_uniform_reversed": (
        ["solve"],
        {"i.yaml": gen(input={"dist": "uniform", "low": 9, "high": 2})},
        ["i.yaml", "requests.generate.input.high", "2"],
    ),
    "gen_max_below_min": (
        ["solve"],
        {"i.yaml": gen(input__min=5, input__max=2)},
        ["i.yaml", "requests.generate.input.max", "2"],
    ),
    "gen_std_negative": (
        ["solve"],
        {"i.yaml": gen(input={"dist": "normal", "mean": 5, "std": -1})},
        ["i.yaml", "requests.generate.input.std", "-1"],
    ),
    "gen_arrival_unknown_process": (
        ["solve"],
        {"i.yaml": gen(arrival={"process": "burst"})},
        ["i.yaml", "requests.generate.arrival.process", "burst"],
    ),
    "gen_rate_zero": (
        ["solve"],
        {"i.yaml": gen(arrival={"process": "poisson", "rate_per_s": 0})},
        ["i.yaml", "requests.generate.arrival.rate_per_s", "0"],
    ),
    "gen_poisson_no_rate": (
        ["replay", "--no-plot"],
        {"i.yaml": gen(arrival={"process": "poisson"})},
        ["i.yaml", "requests.generate.arrival.rate_per_s"],
    ),
    "gen_input_is_list": (
        ["solve"],
        {"i.yaml": gen(input=[1, 2])},
        ["i.yaml", "requests.generate.input", "[1, 2]"],
    ),
    # --- instance: trace specs and trace files -----------------------------------------------
    "trace_format_unknown": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv, format: excel}"), "t.csv": "a\n1\n"},
        ["i.yaml", "requests.format", "excel"],
    ),
    "trace_start_negative": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv, start: -1}"), "t.csv": "a\n1\n"},
        ["i.yaml", "requests.start", "-1"],
    ),
    "trace_limit_zero": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv, limit: 0}"), "t.csv": "a\n1\n"},
        ["i.yaml", "requests.limit", "0"],
    ),
    "trace_path_int": (
        ["solve"],
        {"i.yaml": trace("{trace: 7}")},
        ["i.yaml", "requests.trace", "7"],
    ),
    "trace_and_generate": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv, generate: 3}"), "t.csv": "a\n1\n"},
        ["i.yaml", "requests", "generate"],
    ),
    "trace_csv_empty": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv}"), "t.csv": ""},
        ["t.csv", "cannot parse CSV"],
    ),
    "trace_csv_header_only": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.csv}"),
            "t.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n",
        },
        ["t.csv", "no requests"],
    ),
    "trace_csv_non_numeric": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.csv}"),
            "t.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n1,seven,3\n",
        },
        ["t.csv", "num_prefill_tokens", "seven"],
    ),
    "trace_csv_float_tokens": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.csv}"),
            "t.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5.5,6\n",
        },
        ["t.csv", "num_prefill_tokens", "5.5"],
    ),
    "trace_csv_nan_arrival": (
        ["replay", "--no-plot"],
        {
            "i.yaml": trace("{trace: t.csv}"),
            "t.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\nnan,5,6\n",
        },
        ["t.csv", "arrived_at", "missing", "NaN"],
    ),
    "trace_csv_binary": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv}"), "t.csv": b"\x00\x01\xff\xfe\x00garbage"},
        ["t.csv", "cannot parse CSV"],
    ),
    "trace_is_folder": (
        ["solve"],
        {"i.yaml": trace("{trace: t.csv}"), "t.csv": DIR},
        ["t.csv", "not found"],
    ),
    "trace_start_past_end": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.csv, start: 5}"),
            "t.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n",
        },
        ["t.csv", "no requests selected"],
    ),
    "trace_jsonl_arrival_on_some_rows": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.jsonl}"),
            "t.jsonl": '{"input_tokens": 5, "output_tokens": 6, "arrival_ms": 3}\n'
                       '{"input_tokens": 5, "output_tokens": 6}\n',
        },
        ["t.jsonl", "arrival_ms (row 1, counted from 0)", "every row or on none"],
    ),
    "misspelt_request_key": (
        ["solve"],
        {"i.yaml": trace("[{id: a, inptu_tokens: 3, output_tokens: 4}]")},
        ["i.yaml", "requests[0].inptu_tokens", "did you mean 'input_tokens'"],
    ),
    "trace_jsonl_not_object": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.jsonl}"),
            "t.jsonl": '{"input_tokens": 5, "output_tokens": 6}\n[1, 2]\n',
        },
        ["t.jsonl", "2", "line 2", "JSON object"],
    ),
    "trace_jsonl_bad_json": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.jsonl}"),
            "t.jsonl": '{"input_tokens": 5, "output_tokens": 6}\n{oops\n',
        },
        ["t.jsonl", "2", "line 2", "invalid JSON"],
    ),
    "trace_jsonl_missing_key": (
        ["solve"],
        {"i.yaml": trace("{trace: t.jsonl}"), "t.jsonl": '{"input_tokens": 5}\n'},
        ["t.jsonl", "output_tokens"],
    ),
    "trace_jsonl_empty": (
        ["solve"],
        {"i.yaml": trace("{trace: t.jsonl}"), "t.jsonl": ""},
        ["t.jsonl", "empty"],
    ),
    "trace_jsonl_string_tokens": (
        ["solve"],
        {
            "i.yaml": trace("{trace: t.jsonl}"),
            "t.jsonl": '{"input_tokens": "many", "output_tokens": 6}\n',
        },
        ["t.jsonl", "input_tokens", "many"],
    ),
    "trace_jsonl_negative": (
        ["replay", "--no-plot"],
        {
            "i.yaml": trace("{trace: t.jsonl}"),
            "t.jsonl": '{"input_tokens": 5, "output_tokens": -6}\n',
        },
        ["t.jsonl", "output_tokens", "-6"],
    ),
    # --- instance: solve defaults --------------------------------------------------------------
    "solve_section_list": (
        ["solve"],
        {"i.yaml": GOOD_ONE + "solve: [highs]\n"},
        ["i.yaml", "solve", "['highs']"],
    ),
    "solve_time_limit_zero": (
        ["solve"],
        {"i.yaml": GOOD_ONE + "solve: {time_limit_s: 0}\n"},
        ["i.yaml", "solve.time_limit_s", "0"],
    ),
    "solve_section_time_limit_string": (
        ["bound"],
        {"i.yaml": GOOD_ONE + "solve: {time_limit_s: fast}\n"},
        ["i.yaml", "solve.time_limit_s", "fast"],
    ),
    "solve_problem_unknown": (
        ["solve"],
        {"i.yaml": GOOD_ONE + "solve: {problem: tsp}\n"},
        ["i.yaml", "solve.problem", "tsp"],
    ),
    "solve_key_with_newline": (
        ["solve"],
        {"i.yaml": GOOD_ONE + 'solve: {"a\\nb": 1}\n'},
        ["i.yaml", "solve.a\\nb", "unknown field"],
    ),
    "solve_unknown_key": (
        ["solve"],
        {"i.yaml": GOOD_ONE + "solve: {threads: 4}\n"},
        ["i.yaml", "solve.threads"],
    ),
    # --- command-line options ----------------------------------------------------------------
    "solve_bins_zero": (
        ["solve", "--problem", "pd-competition", "--bins", "0"],
        {"i.yaml": GOOD_ONE},
        ["--bins", "0"],
    ),
    "solve_bins_negative": (
        ["solve", "--problem", "infermax-csp", "--bins", "-3"],
        TINY_FILES,
        ["--bins", "-3"],
    ),
    "solve_bins_not_int": (["solve", "--bins", "many"], {"i.yaml": GOOD_ONE}, ["--bins", "many"]),
    "solve_time_limit_string": (
        ["solve", "--time-limit", "soon"],
        {"i.yaml": GOOD_ONE},
        ["--time-limit", "soon"],
    ),
    "solve_formulation_unknown": (
        ["solve", "--problem", "pd-competition", "--formulation", "fancy"],
        {"i.yaml": GOOD_ONE},
        ["--formulation", "fancy"],
    ),
    "solve_time_model_unknown": (
        ["solve", "--problem", "pd-competition", "--time-model", "wall"],
        {"i.yaml": GOOD_ONE},
        ["--time-model", "wall"],
    ),
    "solve_solver_of_other_problem": (
        ["solve", "--problem", "pd-competition", "--solver", "heuristic"],
        {"i.yaml": GOOD_ONE},
        ["--solver", "heuristic"],
    ),
    "solve_bins_for_binpacking": (
        ["solve", "--problem", "binpacking", "--bins", "3"],
        {"i.yaml": GOOD_ONE},
        ["--bins", "3", "not an option"],
    ),
    "solve_formulation_for_infermax": (
        ["solve", "--problem", "infermax-csp", "--formulation", "compact"],
        TINY_FILES,
        ["--formulation", "compact", "not an option"],
    ),
    "solve_csp_on_pang": (
        ["solve", "--problem", "infermax-csp"],
        {"i.yaml": GOOD_ONE},
        ["i.yaml", "model", "infermax"],
    ),
    "solve_unknown_option": (
        ["solve", "--turbo"],
        {"i.yaml": GOOD_ONE},
        ["--turbo", "No such option"],
    ),
    "bound_time_limit_zero": (
        ["bound", "--time-limit", "0"],
        {"i.yaml": GOOD_ONE},
        ["--time-limit", "0"],
    ),
    "replay_policy_unknown": (
        ["replay", "--policy", "fifo"],
        {"i.yaml": GOOD_ONE},
        ["--policy", "fifo"],
    ),
    "replay_policy_commas": (
        ["replay", "--policy", ",,"],
        {"i.yaml": GOOD_ONE},
        ["--policy", ",,"],
    ),
    "replay_policy_other_family": (
        ["replay", "--policy", "vllm", "--no-plot"],
        {"i.yaml": GOOD_ONE},
        ["i.yaml", "model", "infermax"],
    ),
    "replay_router_unknown": (
        ["replay", "--policy", "vllm", "--router", "random"],
        TINY_FILES,
        ["--router", "random"],
    ),
    "replay_plan_without_policy_plan": (
        ["replay", "--policy", "vllm", "--plan", "{d}/" + RP],
        {**WITH_SIDE, RP: sol("replay")},
        ["--plan", "--policy plan"],
    ),
    "replay_policy_plan_without_plan": (
        ["replay", "--policy", "plan"],
        TINY_FILES,
        ["--plan", "solution file"],
    ),
    "compare_policy_unknown": (
        ["compare", "--policy", "nope", "--no-optimize"],
        {"i.yaml": GOOD_ONE},
        ["--policy", "nope"],
    ),
    "compare_time_limit_string": (
        ["compare", "--time-limit", "x"],
        {"i.yaml": GOOD_ONE},
        ["--time-limit", "x"],
    ),
    "list_unknown_topic": (["list", "gpus"], {}, ["gpus", "'gpus'"]),
    # --- solution files: validate --------------------------------------------------------------
    "validate_json_array": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": "[1, 2]"},
        ["s.json", "object"],
    ),
    "validate_json_empty": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": ""},
        ["s.json", "JSON"],
    ),
    "validate_solution_missing": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE},
        ["s.json", "not found"],
    ),
    "validate_solution_folder": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": DIR},
        ["s.json", "directory"],
    ),
    # --- solution files: gantt -----------------------------------------------------------------
    "gantt_not_json": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": "\x00\x01"},
        ["s.json", "JSON"],
    ),
    "gantt_json_string": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": '"solution"'},
        ["s.json", "object"],
    ),
    "gantt_missing_keys": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", units=DROP, gap=DROP)},
        ["s.json", "units"],
    ),
    "gantt_nothing_to_draw": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", assignment=DROP)},
        ["s.json", "nothing to draw"],
    ),
    "gantt_assignment_unknown_request": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", assignment={"zz": 0})},
        ["s.json", "assignment", "'a'"],
    ),
    "gantt_assignment_bad_client": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", assignment={"a": "first"})},
        ["s.json", "first", "assignment.a", "'first'"],
    ),
    "gantt_sidecar_not_parquet": (
        ["gantt", "{d}/i.yaml", "{d}/" + RP, "--out", "{out}/g.png"],
        {
            "i.yaml": TINY,
            RP_SIDE: "not parquet",
            RP: _schedule(sha256=hashlib.sha256(b"not parquet").hexdigest()),
        },
        [RP_SIDE, "Parquet"],
    ),
    "gantt_sidecar_truncated": (
        ["gantt", "{d}/i.yaml", "{d}/" + RP, "--out", "{out}/g.png"],
        {"i.yaml": TINY, RP_SIDE: lambda b: b["parquet"][:100], RP: sol("replay")},
        [RP_SIDE, "SHA-256"],
    ),
    "gantt_sidecar_absolute": (
        ["gantt", "{d}/i.yaml", "{d}/" + RP, "--out", "{out}/g.png"],
        {**WITH_SIDE, RP: _schedule(file="/etc/passwd")},
        [RP, "schedule.file", "/etc/passwd"],
    ),
    "gantt_sha_not_string": (
        ["gantt", "{d}/i.yaml", "{d}/" + RP, "--out", "{out}/g.png"],
        {**WITH_SIDE, RP: _schedule(sha256=12)},
        [RP, "schedule"],
    ),
    "gantt_solution_of_another_instance": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{out}/g.png"],
        {"i.yaml": GOOD_ONE.replace("output_tokens: 1", "output_tokens: 9"), "s.json": sol("bp")},
        ["s.json", "instance_sha256", "other data"],
    ),
    "gantt_out_under_file": (
        ["gantt", "{d}/i.yaml", "{d}/s.json", "--out", "{d}/i.yaml/g.png"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp")},
        ["--out", "not a folder"],
    ),
    # --- solution files: replay --plan ---------------------------------------------------------
    "plan_not_json": (
        ["replay", "--policy", "plan", "--plan", "{d}/p.json", "--no-plot"],
        {"i.yaml": TINY, "p.json": "{plan"},
        ["p.json", "JSON"],
    ),
    "plan_json_array": (
        ["replay", "--policy", "plan", "--plan", "{d}/p.json", "--no-plot"],
        {"i.yaml": TINY, "p.json": "[]"},
        ["p.json", "object"],
    ),
    "plan_missing_keys": (
        ["replay", "--policy", "plan", "--plan", "{d}/p.json", "--no-plot"],
        {"i.yaml": TINY, "p.json": '{"problem": "infermax-csp"}'},
        ["p.json", "missing required keys"],
    ),
    "plan_missing_file": (
        ["replay", "--policy", "plan", "--plan", "{d}/p.json", "--no-plot"],
        TINY_FILES,
        ["p.json", "not found"],
    ),
    "plan_no_plan_inside": (
        ["replay", "--policy", "plan", "--plan", "{d}/" + RP, "--no-plot"],
        {**WITH_SIDE, RP: sol("replay")},
        [RP, "plan", "list of batches"],
    ),
    "plan_sidecar_missing": (
        ["replay", "--policy", "plan", "--plan", "{d}/" + RP, "--no-plot"],
        {"i.yaml": TINY, RP: sol("replay")},
        [RP_SIDE, "missing"],
    ),
    "plan_of_another_instance": (
        ["replay", "--policy", "plan", "--plan", "{d}/s.json", "--no-plot"],
        {"i.yaml": TINY, "s.json": sol("csp"), CSP_SIDE: lambda b: b["csp_parquet"]},
        ["s.json", "instance", "instance_sha256", "other data"],
    ),
    "plan_wrong_types": (
        ["replay", "--policy", "plan", "--plan", "{d}/s.json", "--no-plot"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", assignment="all")},
        ["s.json", "assignment"],
    ),
    # --- profiling tables: fit-profile ---------------------------------------------------------
    "fit_csv_missing": (["fit-profile", "{d}/p.csv", *FIT_ARGS], {}, ["p.csv", "not found"]),
    "fit_csv_empty": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": ""},
        ["p.csv", "cannot parse CSV"],
    ),
    "fit_csv_binary": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": b"\x89PNG\r\n\x1a\n\x00\x00\xff"},
        ["p.csv", "cannot parse CSV"],
    ),
    "fit_csv_no_tokens_column": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": "num_tensor_parallel_workers,mlp.median\n1,0.5\n"},
        ["p.csv", "num_tokens"],
    ),
    "fit_csv_no_median": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": "num_tokens,num_tensor_parallel_workers,mlp.mean\n1,1,2\n"},
        ["p.csv", "median"],
    ),
    "fit_csv_non_numeric": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": GOOD_FIT_CSV.replace("0.6", "fast")},
        ["p.csv", "fast", "mlp.median (row 1)"],
    ),
    "fit_csv_non_numeric_tokens": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": GOOD_FIT_CSV.replace("\n2,", "\ntwo,")},
        ["p.csv", "num_tokens", "two", "(row 1)"],
    ),
    "fit_csv_one_row": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS],
        {"p.csv": GOOD_FIT_CSV.split("2,1")[0]},
        ["p.csv", "two rows"],
    ),
    "fit_csv_folder": (["fit-profile", "{d}/p.csv", *FIT_ARGS], {"p.csv": DIR}, ["p.csv"]),
    "fit_tp_zero": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS, "--tp", "0"],
        {"p.csv": GOOD_FIT_CSV},
        ["--tp", "0"],
    ),
    "fit_kv_heads_negative": (
        [
            "fit-profile",
            "{d}/p.csv",
            "--name",
            "x",
            "--layers",
            "2",
            "--q-heads",
            "2",
            "--kv-heads",
            "-2",
        ],
        {"p.csv": GOOD_FIT_CSV},
        ["--kv-heads", "-2"],
    ),
    "fit_out_under_file": (
        ["fit-profile", "{d}/p.csv", *FIT_ARGS, "--out", "{d}/p.csv/x.yaml"],
        {"p.csv": GOOD_FIT_CSV},
        ["--out", "not a folder"],
    ),
}


# Readable solutions with wrong contents: ``validate`` answers "invalid" with the reasons and
# exit code 1 (its documented verdict), still one reason per line and no traceback.
INVALID: dict[str, tuple[list[str], dict[str, Any], list[str]]] = {
    # a JSON object that is no solution file: invalid, with the reason
    "validate_schedule_not_mapping": (
        ["validate", "{d}/i.yaml", "{d}/" + RP],
        {"i.yaml": TINY, RP: sol("replay", schedule="x.parquet")},
        [RP, "schedule"],
    ),
    "validate_sidecar_missing": (
        ["validate", "{d}/i.yaml", "{d}/" + RP],
        {"i.yaml": TINY, RP: sol("replay")},
        [RP_SIDE, "missing"],
    ),
    "validate_sidecar_wrong_sha": (
        ["validate", "{d}/i.yaml", "{d}/" + RP],
        {**WITH_SIDE, RP: _schedule(sha256="0" * 64)},
        [RP_SIDE, "SHA-256"],
    ),
    "validate_sidecar_outside": (
        ["validate", "{d}/i.yaml", "{d}/" + RP],
        {**WITH_SIDE, RP: _schedule(file="../" + RP_SIDE)},
        [RP, "schedule.file", "../" + RP_SIDE],
    ),
    "validate_problem_unknown": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", problem="tsp")},
        ["s.json", "problem", "tsp"],
    ),
    "validate_problem_int": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", problem=3)},
        ["s.json", "problem", "3"],
    ),
    "validate_assignment_list": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", assignment=[0])},
        ["s.json", "assignment"],
    ),
    "validate_objective_string": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", objective="fast")},
        ["s.json", "objective", "fast"],
    ),
    "validate_status_unknown": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", status="great")},
        ["s.json", "status", "great"],
    ),
    "validate_solution_of_another_instance": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE.replace("output_tokens: 1", "output_tokens: 9"), "s.json": sol("bp")},
        ["instance_sha256", "other data"],
    ),
    "validate_assignment_out_of_range": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {"i.yaml": GOOD_ONE, "s.json": sol("bp", assignment={"a": 7})},
        ["a"],
    ),
    "validate_objective_nan": (
        ["validate", "{d}/i.yaml", "{d}/s.json"],
        {
            "i.yaml": GOOD_ONE,
            "s.json": lambda b: sol("bp")(b).replace('"objective": 29.42', '"objective": NaN'),
        },
        ["objective", "nan"],
    ),
}

# commands that take an instance file as their first argument and an --out folder
INSTANCE_COMMANDS = {"solve": True, "bound": False, "replay": True, "compare": True}


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Any]:
    """Valid solutions to mutate: bin packing of GOOD_ONE, a vllm replay of infermax-tiny
    (its schedule Parquet too), an InferMax CSP plan of a two-request instance."""
    folder = tmp_path_factory.mktemp("bases")
    runner = CliRunner()
    (folder / "good.yaml").write_text(GOOD_ONE)
    other = TINY.replace("name: infermax-tiny", "name: other").split("  - {id: c")[0]
    (folder / "other.yaml").write_text(other)
    for args in (
        ["solve", folder / "good.yaml", "--solver", "heuristic"],
        ["replay", TOY / "infermax-tiny.yaml", "--policy", "vllm"],
        ["solve", folder / "other.yaml", "--problem", "infermax-csp"],
    ):
        result = runner.invoke(app, [str(a) for a in [*args, "--out", folder, "--no-plot"]])
        assert result.exit_code == 0, result.output
    return {
        "bp": json.loads((folder / "t" / "binpacking-heuristic.json").read_text()),
        "replay": json.loads((folder / "infermax-tiny" / RP).read_text()),
        "parquet": (folder / "infermax-tiny" / RP_SIDE).read_bytes(),
        "csp": json.loads((folder / "other" / "infermax-csp-auto.json").read_text()),
        "csp_parquet": (folder / "other" / CSP_SIDE).read_bytes(),
    }


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def run_case(
    args: list[str],
    files: dict[str, Any],
    bases: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, str]:
    """Write ``files`` into tmp/in, run ``args`` from an empty tmp/cwd, check that nothing
    appeared outside tmp/out; the result and its one stderr line."""
    d, out, cwd = tmp_path / "in", tmp_path / "out", tmp_path / "cwd"
    for folder in (d, cwd):
        folder.mkdir()
    for name, content in files.items():
        path = d / name
        if content is DIR:
            path.mkdir()
            continue
        if content is UNREADABLE:
            if os.geteuid() == 0:
                pytest.skip("root reads unreadable files")
            path.write_text(GOOD_ONE)
            path.chmod(0)
            continue
        if callable(content):
            content = content(bases)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    argv = [a.replace("{d}", str(d)).replace("{out}", str(out)) for a in args]
    if argv[0] in INSTANCE_COMMANDS and (len(argv) < 2 or argv[1].startswith("-")):
        argv.insert(1, str(d / "i.yaml"))
        if INSTANCE_COMMANDS[argv[0]]:
            argv += ["--out", str(out)]
    before = listing(tmp_path)
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(app, argv)
    after = listing(tmp_path)
    stray = {p for p in after - before if not p.startswith("out")}
    assert not stray, f"files outside --out: {stray}"
    assert not list(cwd.iterdir())
    text = result.stderr + result.output
    assert "Traceback" not in text and "internal error" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result, result.stderr.strip()


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_line(case, bases, tmp_path, monkeypatch):
    args, files, fragments = CASES[case]
    result, stderr = run_case(args, files, bases, tmp_path, monkeypatch)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert stderr.startswith("error:"), stderr
    assert len(stderr.splitlines()) == 1, stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)
    assert not (tmp_path / "out").exists() or not listing(tmp_path / "out"), listing(
        tmp_path / "out"
    )


@pytest.mark.parametrize("case", sorted(INVALID))
def test_a_wrong_solution_is_invalid_not_a_crash(case, bases, tmp_path, monkeypatch):
    args, files, fragments = INVALID[case]
    result, _ = run_case(args, files, bases, tmp_path, monkeypatch)
    assert result.exit_code == 1, (result.exit_code, result.output, result.stderr)
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("invalid: ") and Path(args[-1]).name in lines[0], lines
    assert all(line.startswith("  - ") for line in lines[1:]) and len(lines) > 1, lines
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def test_there_are_at_least_75_new_kinds():
    assert len(CASES) >= 75
    assert not set(CASES) & set(test_bad_input.CASES)
    commands = {args[0] for args, _, _ in CASES.values()}
    # every command but the groups of subcommands (sweep, profile: tests of their own)
    assert commands == {name for name in COMMANDS if not hasattr(loaded(name), "list_commands")}


# --- property tests --------------------------------------------------------------------------


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a node of a nested mapping/list."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*prefix, i))
    return found


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(1, 64),
    st.floats(0, 100),
    st.sampled_from([0, -1, 1, 10**12, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(-3, 3), max_size=2),
)


@st.composite
def mutations(draw, base: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    paths = _paths(data)
    path = draw(st.sampled_from(paths))
    *parent_path, last = path
    parent = data
    for p in parent_path:
        parent = parent[p]
    kind = draw(st.sampled_from(["replace"] * 4 + ["delete", "add"]))
    if kind == "replace":
        parent[last] = draw(VALUES)
    elif kind == "delete":
        del parent[last]
    else:
        target = parent[last] if isinstance(parent[last], dict) else parent
        if isinstance(target, dict):
            target[draw(st.sampled_from(["extra", "Clients", "id2", "x"]))] = draw(VALUES)
        else:
            target.append(draw(VALUES))
    return data


def _yaml_text(data: Any) -> str:
    """YAML for ``data``: nan and infinities as .nan/.inf, huge integers kept exact."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _fuzz_once(data: dict[str, Any], args: list[str], tmp_path: Path, check_valid: bool) -> None:
    work = tmp_path / f"w{abs(hash(json.dumps(data, default=str))) % 10**9}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    inst = work / "i.yaml"
    inst.write_text(_yaml_text(data))
    out, cwd = work / "out", work / "cwd"
    cwd.mkdir()
    runner = CliRunner()
    before = listing(work)
    home = os.getcwd()
    os.chdir(cwd)  # each xdist worker is its own process
    try:
        result = runner.invoke(app, [args[0], str(inst), *args[1:], "--out", str(out)])
    finally:
        os.chdir(home)
    text = result.stderr + result.output
    assert "Traceback" not in text and "internal error" not in text, (data, text)
    assert result.exit_code in (0, 2), (data, result.exit_code, text)
    stray = {p for p in listing(work) - before if not p.startswith("out")}
    assert not stray, stray
    if result.exit_code == 2:
        stderr = result.stderr.strip()
        assert stderr.startswith("error:") and len(stderr.splitlines()) == 1, (data, stderr)
        assert not out.exists() or not listing(out), listing(out)
        return
    assert check_valid
    solution = next(p for p in out.rglob("*.json"))
    verdict = runner.invoke(app, ["validate", str(inst), str(solution)])
    assert verdict.exit_code == 0, (data, verdict.output, verdict.stderr)
    shutil.rmtree(work)


PANG_BASE = yaml.safe_load(
    "name: t\nmodel: pang-llama65b-ascend8\nsystem: {clients: 2, max_prefill_tokens: 64}\n"
    "requests:\n  - {id: a, input_tokens: 3, output_tokens: 5}\n"
    "  - {id: b, input_tokens: 4, output_tokens: 2, arrival_ms: 1.5}\n"
    "solve: {time_limit_s: 5}\n"
)
PANG_GEN_BASE = {**PANG_BASE, "requests": {"generate": yaml.safe_load(GEN)}}
PANG_INLINE_BASE = {**PANG_BASE, "model": yaml.safe_load(PANG)}
TINY_BASE = yaml.safe_load(TINY)

# LLMOPT_FUZZ_EXAMPLES=2000 for a longer hunt
FUZZ = settings(
    max_examples=int(os.environ.get("LLMOPT_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(data=st.one_of(mutations(PANG_BASE), mutations(PANG_GEN_BASE), mutations(PANG_INLINE_BASE)))
def test_solve_on_a_mutated_instance_answers_or_refuses(data, tmp_path):
    _fuzz_once(
        data,
        ["solve", "--problem", "binpacking", "--time-limit", "2", "--no-plot"],
        tmp_path,
        check_valid=True,
    )


@FUZZ
@given(data=mutations(TINY_BASE))
def test_replay_on_a_mutated_instance_answers_or_refuses(data, tmp_path):
    _fuzz_once(data, ["replay", "--policy", "vllm", "--no-plot"], tmp_path, check_valid=True)


def test_yaml_text_keeps_nan_and_huge_ints():
    text = _yaml_text({"a": math.nan, "b": -math.inf, "c": 10**30})
    assert ".nan" in text and "-.inf" in text and str(10**30) in text
