"""The package's import graph has no cycle, counting imports inside functions too (a local import
must not hide one); imports under ``if TYPE_CHECKING:`` are not executed and do not count."""

from __future__ import annotations

import ast
import graphlib
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
