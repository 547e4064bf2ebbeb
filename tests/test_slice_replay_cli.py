"""``llmopt replay`` / ``compare`` / ``validate`` with the slice-level schedulers (Cheng et al.
2024): the solution file carries the slice schedule, the Gantt is written, the validator accepts
it and refuses a tampered copy, and bad input is one line with exit code 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import load_instance
from llmopt.errors import OptionError
from llmopt.policies.registry import POLICIES, default_policies, slice_policies
from llmopt.policies.replay import replay
from llmopt.policies.slice import LADDER
from llmopt.policies.slice.replay import slice_frames, slice_result

CLUSTER = TOY / "scls-cluster.yaml"
FIG11 = TOY / "scls-fig11.yaml"
SLICE_KEYS = {"instance", "start_ms", "end_ms", "requests", "padded_length", "iterations",
              "prompt_tokens", "generated", "pad_tokens", "invalid_tokens"}


def test_the_registry_lists_the_ladder():
    assert tuple(slice_policies()) == LADDER
    assert all(POLICIES[p].family == "scls" and POLICIES[p].paper.startswith("Cheng")
               for p in LADDER)
    # the ladder and ILS, the paper's iteration-level baseline (section 5.1)
    for command in ("replay", "compare"):
        assert default_policies("scls", command) == [*LADDER, "ils"]


def test_replay_writes_the_slice_schedule_and_its_gantt(cli, tmp_path):
    res = cli("replay", CLUSTER, "--policy", "sls,scls", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    folder = tmp_path / "scls-cluster"
    for name in ("sls", "scls"):
        assert (folder / f"replay-{name}.png").stat().st_size > 1000
        assert f" {name} " in res.output
    sol = json.loads((folder / "replay-scls.json").read_text())
    assert (sol["problem"], sol["solver"], sol["mode"], sol["status"]) == \
        ("replay", "scls", "slices", "feasible")
    assert sol["slice_length"] == 128 and sol["instances"] == 4  # system.instances
    assert all(set(s) == SLICE_KEYS for s in sol["slices"])
    # every request is in some slice, and the generated tokens add up to its output
    generated: dict[str, int] = {}
    for s in sol["slices"]:
        for rid, g in zip(s["requests"], s["generated"], strict=True):
            generated[rid] = generated.get(rid, 0) + g
    assert len(generated) == 60 and sum(generated.values()) > 0
    assert {"throughput_rps", "response_mean_ms", "response_p95_ms", "completion_std_ms",
            "completion_ms_0", "batch_size_mean", "pad_tokens_per_request",
            "invalid_tokens_per_request"} <= set(sol["metrics"])
    assert sol["objective"] == pytest.approx(sol["metrics"]["makespan_ms"], abs=1e-3)

    ok = cli("validate", CLUSTER, folder / "replay-scls.json")
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("valid:")
    sol["slices"][0]["end_ms"] += 3.0
    (tmp_path / "bad.json").write_text(json.dumps(sol))
    bad = cli("validate", CLUSTER, tmp_path / "bad.json")
    assert bad.exit_code == 1
    assert "slices[0] lasts" in bad.output


def test_default_policies_are_the_ladder_and_ils_and_compare_tables_them(cli, tmp_path):
    res = cli("replay", FIG11, "--out", tmp_path, "--no-plot")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "scls-fig11").glob("*.json")) == \
        sorted(f"replay-{p}.json" for p in (*LADDER, "ils"))
    assert not list((tmp_path / "scls-fig11").glob("*.png"))
    comp = cli("compare", FIG11, "--out", tmp_path)
    assert comp.exit_code == 0, comp.output
    md = (tmp_path / "scls-fig11" / "compare.md").read_text()
    rows = [line.split("|")[1].strip() for line in md.splitlines()
            if line.startswith("| ") and not line.startswith("| schedule")]
    assert rows == [*LADDER, "ils"]
    ils = next(line for line in md.splitlines() if line.startswith("| ils "))
    assert [c.strip() for c in ils.split("|")[-4:-1]] == ["0.0", "0.0", "—"]  # no slices
    # Fig. 11: SLS serves the sixteen requests in one batch (13.5 s), SCLS splits (7.6 s)
    last_end = {r: float(line.split("|")[5]) for r, line in zip(
        rows, [x for x in md.splitlines() if x.startswith("| ") and "schedule" not in x],
        strict=True)}
    assert last_end["sls"] == pytest.approx(13.5, abs=0.1)
    assert last_end["scls"] == pytest.approx(7.6, abs=0.1)
    assert (tmp_path / "scls-fig11" / "compare.csv").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["replay", TOY / "quickstart.yaml", "--policy", "scls"],
     "policy scls runs on profiles of family scls"),
    (["replay", CLUSTER, "--policy", "baseline"], "policy baseline runs on profiles of family "
     "pang_linear"),
    (["replay", CLUSTER, "--policy", "scls", "--router", "round-robin"],
     "--router: value 'round-robin'"),
    (["compare", TOY / "quickstart.yaml", "--policy", "lb", "--no-optimize"],
     "policy lb runs on profiles of family scls"),
])
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, needle):
    res = cli(*args, "--out", tmp_path)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output
    assert "Traceback" not in res.output


def test_a_sweep_replays_slice_policies_and_validates_them(cli, tmp_path):
    sweep = tmp_path / "ladder.yaml"
    sweep.write_text(f"name: ladder\ninstances: [{TOY / 'scls-fig11.yaml'}]\n"
                     "grid:\n  policy: [sls, scls]\n")
    result = cli("sweep", "run", sweep, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    table = pd.read_parquet(tmp_path / "out" / "results.parquet").set_index("policy")
    assert table["valid"].all() and (table["cell_status"] == "ok").all()
    # Fig. 11: the 16 requests together (SLS) take 13.5 s, split (SCLS) 7.6 s
    assert table.loc["sls", "makespan_ms"] > table.loc["scls", "makespan_ms"]
    assert table.loc["scls", "throughput_rps"] > table.loc["sls", "throughput_rps"]


def test_the_iteration_level_replay_refuses_a_slice_policy_with_a_pointer():
    with pytest.raises(OptionError, match="slice_result"):
        replay(load_instance(TOY / "scls-fig11.yaml"), "scls")


def test_gantt_draws_a_slice_solution_from_its_file(cli, tmp_path):
    res = cli("replay", CLUSTER, "--policy", "scls", "--out", tmp_path, "--no-plot")
    assert res.exit_code == 0, res.output
    path = tmp_path / "scls-cluster" / "replay-scls.json"
    inst, sol = load_instance(CLUSTER), json.loads(path.read_text())
    bat, mem, done, workers, policy = slice_frames(inst, sol)
    replay = slice_result(inst, "scls")[1]
    ref = replay.batches
    assert (workers, policy) == (4, "scls") and len(bat) == len(ref)
    for column in ("instance", "size", "padded_length", "iterations"):
        assert bat[column].tolist() == ref[column].tolist()
    for column in ("start_ms", "end_ms", "prefill_ms"):
        assert bat[column].to_numpy() == pytest.approx(ref[column].to_numpy(), abs=1e-5)
    assert done == pytest.approx(replay.completion_ms, abs=1e-5)
    assert mem["pad_tokens"].sum() == replay.members["pad_tokens"].sum()
    drawn = cli("gantt", CLUSTER, path, "--out", tmp_path / "chart.png")
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "chart.png").stat().st_size > 10_000
    sol["slices"][2].pop("padded_length")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(sol))
    bad = cli("gantt", CLUSTER, broken, "--out", tmp_path / "bad.png")
    assert bad.exit_code == 2
    assert "slices[2]" in bad.stderr and "Traceback" not in bad.stderr
