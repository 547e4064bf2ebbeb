"""Committed reference solutions stay valid for the instances they were made for: a change to an
instance, a profile or the generator that alters the data shows up here."""

from __future__ import annotations

import pytest

from conftest import ROOT
from llmopt.data.instance import load_instance
from llmopt.files import load_yaml_mapping
from llmopt.result import read_solution
from llmopt.validate import validate_solution

REFERENCE = sorted((ROOT / "solutions" / "reference").glob("*/*.json"))


def instance_named(name: str):
    """The bundled instance of that name (only it is loaded: others may need ../shared)."""
    for path in sorted((ROOT / "instances").rglob("*.yaml")):
        if load_yaml_mapping(path).get("name") == name:
            return load_instance(path)
    raise AssertionError(f"no instance named {name}")


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reference_solution_is_valid(path):
    sol = read_solution(path)
    inst = instance_named(sol["instance"])
    assert validate_solution(inst, sol) == []
    assert sol["status"] == "optimal"


def test_there_are_reference_solutions():
    assert len(REFERENCE) >= 2
