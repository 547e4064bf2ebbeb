"""The package's import graph has no cycle, counting imports inside functions too (a local import
must not hide one); imports under ``if TYPE_CHECKING:`` are not executed and do not count."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "llmopt"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported_modules(path: Path) -> set[str]:
    """The llmopt modules ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        stack.extend(ast.iter_child_nodes(node))
    return {m for m in found if m in MODULES}


def test_no_import_cycle():
    graph = {name: imported_modules(path) - {name} for name, path in MODULES.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


def test_the_graph_sees_local_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from llmopt.errors import OptionError\n"
                      "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from llmopt.result import Result\n")
    assert imported_modules(module) == {"llmopt.errors"}


# Layers (DESIGN.md; imports point down): data at the bottom; sim on data; problems (models and
# solvers) on data only; policies on sim and on a problem's solver; the workflow modules of
# problems (``api.py``, a ``workflows/`` folder) above both; report, sweep, cli on top. A
# module's imports and the ``"llmopt.x:f"`` strings it hands to ``plugins.load`` both count.
FORBIDDEN = {"data": {"sim", "policies", "problems", "report", "sweep", "cli"},
             "sim": {"policies", "problems", "report", "sweep", "cli"},
             "policies": {"report", "sweep", "cli"},
             "problems": {"sim", "policies", "report", "sweep", "cli"}}
PLUGIN_TARGET = re.compile(r"^llmopt\.([a-z_]+)[\w.]*:\w+$")


def referenced_modules(path: Path) -> set[str]:
    """The llmopt modules ``path`` imports (anywhere) or names to ``plugins.load``."""
    found = imported_modules(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and PLUGIN_TARGET.match(node.value):
            found.add(node.value.split(":")[0])
    return found


def is_workflow(name: str) -> bool:
    parts = name.split(".")
    return parts[1] == "problems" and (parts[-1] == "api" or "workflows" in parts)


def layer_violations() -> set[str]:
    bad = set()
    for name, path in MODULES.items():
        parts = name.split(".")
        layer = parts[1] if len(parts) > 2 or (path.name == "__init__.py" and len(parts) > 1) \
            else None
        if layer not in FORBIDDEN or is_workflow(name):
            continue
        for target in referenced_modules(path):
            other = target.split(".")[1] if target.count(".") else None
            if other in FORBIDDEN[layer]:
                bad.add(f"{name} -> llmopt.{other}")
    return bad


def test_layers():
    assert layer_violations() == set()


def test_the_layer_check_sees_plugin_strings(tmp_path, monkeypatch):
    module = PACKAGE / "sim" / "cluster.py"
    fake = tmp_path / "cluster.py"
    fake.write_text(module.read_text() + '\nTARGET = "llmopt.policies.replay:replay"\n')
    monkeypatch.setitem(MODULES, "llmopt.sim.cluster", fake)
    assert "llmopt.sim.cluster -> llmopt.policies" in layer_violations()


def test_policies_read_the_replica_through_its_view():
    """No policy reads or sets a private attribute of another object (the replica's internals:
    its decode stream, request state, free slots): ``llmopt.sim.policy.ReplicaView`` is what a
    policy has (mypy holds the policies to it)."""
    private = []
    for path in (PACKAGE / "policies").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                private.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {ast.unparse(node)}")
    assert private == []
