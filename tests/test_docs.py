"""The docs stay true: the registry tables are the registries' current text, and the worked
examples of docs/architecture.md (a policy, a router, a problem) run."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT
from llmopt.cli.listing import registry_markdown

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def python_blocks(path):
    return python_blocks_of(path.read_text())


def python_blocks_of(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_registry_table_in_the_docs_is_current():
    text = ARCHITECTURE.read_text()
    block = re.search(r"<!-- registry -->\n(.*?)<!-- /registry -->", text, flags=re.S)
    assert block is not None
    assert block.group(1) == registry_markdown(), \
        "regenerate with: llmopt list --markdown (into docs/architecture.md)"


def test_worked_examples_run(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the examples name instances relative to the repository
    namespace: dict = {}
    blocks = python_blocks(ARCHITECTURE)
    assert len(blocks) == 3
    for code in blocks:
        exec(compile(code, str(ARCHITECTURE), "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert re.match(r"[\d,]+ ms, 0 evictions", printed[0])  # the policy never preempts
    rr = float(printed[1].split()[1].replace(",", ""))
    fewest = float(printed[2].split()[1].replace(",", ""))
    assert printed[1].startswith("round-robin") and printed[2].startswith("fewest-running")
    assert fewest < rr  # the live-state router beats round-robin on the skewed system
    assert printed[3].startswith("optimal ")
    from llmopt.problems.registry import PROBLEMS
    assert "one-at-a-time" not in PROBLEMS


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_docs_name_modules_that_exist(name):
    text = (ROOT / "docs" / name).read_text()
    for path in set(re.findall(r"`(llmopt/[\w/]+\.py)`", text)):
        assert (ROOT / path).exists(), f"{name} names {path}, which does not exist"


def test_the_guides_python_api_runs_and_prints_what_it_shows(tmp_path, monkeypatch, capsys):
    """The guide's Python API example (one call per command) runs as written and prints the
    output the guide shows (it writes under runs/ of the current folder: here a temporary one)."""
    text = (ROOT / "docs" / "guide.md").read_text()
    section = text[text.index("## Python API"):]
    code = python_blocks_of(section)[0]
    shown = re.search(r"prints\n\n```text\n(.*?)```", section, flags=re.S)
    assert shown is not None
    (tmp_path / "instances").symlink_to(ROOT / "instances")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/guide.md", "exec"), {})
    assert capsys.readouterr().out == shown.group(1)
