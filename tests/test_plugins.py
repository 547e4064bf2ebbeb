"""A package extends llmopt without forking it (issue 31 item 5): tests/data/plugin_pkg, a
scheduler, a router, a problem with its checker and a trace format registered through entry
points, installed with pip into a folder of its own (the project's environment is left as it
is) and put on PYTHONPATH of llmopt's command line; ``llmopt list`` shows each, and each runs
by name, its answers held by the independent validator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, TOY

PACKAGE = ROOT / "tests" / "data" / "plugin_pkg"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The demo package installed (pip install --target) into a folder of its own."""
    tmp = tmp_path_factory.mktemp("plugin")
    source = tmp / "source"
    shutil.copytree(PACKAGE, source)  # the build leaves its files beside the source
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(source)], check=True,
                   capture_output=True)
    # a second package whose entry point is broken: llmopt leaves it out with a warning
    broken = target / "broken_plugin-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\n"
                                     "Version: 0.1\n")
    (broken / "entry_points.txt").write_text("[llmopt.policies]\n"
                                             "gone = no_such_module:POLICY\n")
    return target


def llmopt(site: Path, *args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "llmopt", *map(str, args)], env=env,
                          capture_output=True, text=True, cwd=ROOT)


def test_llmopt_list_shows_what_the_package_adds(site):
    for what, name in (("policies", "shortest-prompt-first"), ("routers", "fewest-running"),
                       ("problems", "one-at-a-time"), ("traces", "plain")):
        res = llmopt(site, "list", what, "--markdown")
        assert res.returncode == 0, res.stderr
        assert f"`{name}`" in res.stdout, what
    res = llmopt(site, "list", "policies")
    warned = [line for line in res.stderr.splitlines() if "broken-plugin" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: entry point 'gone'"), res.stderr
    assert "no_such_module" in warned[0] and res.returncode == 0


def test_the_scheduler_replays_compares_and_validates(site, tmp_path):
    res = llmopt(site, "replay", TOY / "infermax-azure-sample.yaml", "--policy",
                 "shortest-prompt-first", "--out", tmp_path, "--no-plot")
    assert res.returncode == 0, res.stderr
    written = tmp_path / "infermax-azure-sample" / "replay-shortest-prompt-first.json"
    check = llmopt(site, "validate", TOY / "infermax-azure-sample.yaml", written)
    assert check.returncode == 0 and check.stdout.startswith("valid"), check.stdout
    res = llmopt(site, "compare", TOY / "infermax-tiny.yaml", "--policy",
                 "vllm,shortest-prompt-first", "--no-optimize", "--out", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "| shortest-prompt-first |" in res.stdout


def test_the_router_routes(site, tmp_path):
    doc = yaml.safe_load((TOY / "slo-chat.yaml").read_text())
    doc["system"] = {**doc["system"], "instances": 2}
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump(doc))
    res = llmopt(site, "replay", two, "--policy", "sarathi", "--router", "fewest-running",
                 "--out", tmp_path, "--no-plot")
    assert res.returncode == 0, res.stderr
    check = llmopt(site, "validate", two, tmp_path / doc["name"] / "replay-sarathi.json")
    assert check.returncode == 0, check.stdout


def test_the_problem_solves_and_its_checker_validates(site, tmp_path):
    res = llmopt(site, "solve", TOY / "quickstart.yaml", "--problem", "one-at-a-time", "--out",
                 tmp_path, "--no-plot")
    assert res.returncode == 0, res.stderr
    assert "validated: valid" in res.stdout and "optimal" in res.stdout


def test_the_trace_format_reads(site, tmp_path):
    (tmp_path / "t.txt").write_text("12 30 0\n40 10 5.5\n7 22 9\n")
    inst = tmp_path / "plain.yaml"
    inst.write_text(yaml.safe_dump({
        "name": "plain", "model": "infermax-llama2-7b-a100",
        "system": {"clients": 4, "kv_capacity": 4000, "max_batch_tokens": 2048},
        "requests": {"trace": "t.txt", "format": "plain"}}))
    res = llmopt(site, "replay", inst, "--policy", "vllm", "--out", tmp_path, "--no-plot")
    assert res.returncode == 0, res.stderr
    res = llmopt(site, "validate", inst, tmp_path / "plain" / "replay-vllm.json")
    assert res.returncode == 0, res.stdout


def test_without_the_package_none_of_it_is_known(tmp_path):
    res = llmopt(tmp_path, "list", "policies", "--markdown")
    assert res.returncode == 0 and "shortest-prompt-first" not in res.stdout


GUIDE = ROOT / "docs" / "guide.md"


@pytest.mark.parametrize("title", ["Add your own scheduler", "Add your own problem"])
def test_the_guide_examples_run_and_print_what_it_shows(title, monkeypatch, capsys):
    from llmopt.policies.registry import POLICIES
    from llmopt.problems.registry import PROBLEMS

    text = GUIDE.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    shown = text.split("```text\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)  # the examples name instances relative to the repository
    before = (set(POLICIES), set(PROBLEMS))
    try:
        exec(compile(code, str(GUIDE), "exec"), {"__name__": "guide"})
        assert capsys.readouterr().out == shown
    finally:
        for registry, names in zip((POLICIES, PROBLEMS), before, strict=True):
            for name in set(registry) - names:
                del registry[name]
