"""Shared helpers for the tests: small instances built in memory, the CLI runner, data paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmopt.data.instance import Instance, instance_from_mapping

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "instances" / "toy"
SHARED_DATA = ROOT.parent / "shared" / "data"
# the head of a sweep file: one generated instance of six requests on the Pang profile
GENERATED_SWEEP = """
instances:
  - name: gen
    model: pang-llama65b-ascend8
    system: {clients: 2, max_prefill_tokens: 4096}
    requests:
      generate:
        count: 6
        seed: 1
        input: {dist: uniform, low: 20, high: 80}
        output: {dist: uniform, low: 10, high: 120}
"""


def make_instance(outputs: list[int], clients: int, inputs: list[int] | None = None,
                  **system: Any) -> Instance:
    """An in-memory instance on the Pang profile with the given output lengths."""
    inputs = inputs or [50] * len(outputs)
    data = {
        "name": "test",
        "model": "pang-llama65b-ascend8",
        "system": {"clients": clients, "max_prefill_tokens": 4096, **system},
        "requests": [
            {"id": f"r{i}", "input_tokens": a, "output_tokens": b}
            for i, (a, b) in enumerate(zip(inputs, outputs, strict=True))
        ],
    }
    return instance_from_mapping(data, base_dir=ROOT)


@pytest.fixture
def cli():
    from llmopt.cli import app

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, [str(a) for a in args])

    return run


@pytest.fixture
def write_yaml(tmp_path):
    """Write a YAML text under tmp_path and return its path."""

    def write(text: str, name: str = "inst.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
