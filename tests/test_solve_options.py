"""``llmopt solve`` takes every registered problem's options (issue 31: they were reachable from
Python only): one flag per option, its help naming the problems that take it and its range,
passed to the problem only when given."""

from __future__ import annotations

import json

from conftest import TOY
from llmopt.problems.registry import PROBLEMS


def test_every_registered_option_is_a_flag(cli):
    res = cli("solve", "--help")
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for info in PROBLEMS.values():
        for name in info.options:
            assert f"--{name.replace('_', '-')}" in text, name


def test_the_options_reach_the_problem(cli, tmp_path):
    inst = TOY / "huang-chat-code.yaml"
    res = cli("solve", inst, "--problem", "slo-priority", "--solver", "sa", "--seed", "3",
              "--iters", "20", "--max-batch", "1", "--out", tmp_path, "--no-plot")
    assert res.exit_code == 0, res.output
    sol = json.loads((tmp_path / "huang-chat-code" / "slo-priority-sa.json").read_text())
    assert sol["sa"]["seed"] == 3 and sol["sa"]["iters"] == 20 and sol["max_batch"] == 1
    assert "validated: valid" in res.output


def test_an_option_of_another_problem_or_out_of_range_is_refused(cli, tmp_path):
    res = cli("solve", TOY / "quickstart.yaml", "--seed", "3", "--out", tmp_path)
    assert res.exit_code == 2 and "not an option of problem binpacking" in res.stderr
    res = cli("solve", TOY / "huang-chat-code.yaml", "--iters", "0", "--out", tmp_path)
    assert res.exit_code == 2 and "--iters" in res.stderr
