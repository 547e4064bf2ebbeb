"""Nothing heavy at import time (issue 31): listing the commands imports no solver, engine,
table or plotting library, and a command loads what it uses when it runs. Timings are
bench/cli_startup.py's; here, which modules each step imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import TOY
from llmopt.cli import COMMANDS, help_text, loaded

HEAVY = ("pandas", "pyarrow", "pyomo", "ortools", "highspy", "matplotlib", "dask", "scipy")


def imported_after(code: str) -> list[str]:
    """The heavy libraries a fresh interpreter has imported after running ``code``."""
    probe = (f"{code}\nimport sys\n"
             f"print('imported:', *(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("imported:")][-1]
    return line.split()[1:]


def test_the_command_line_and_its_help_import_nothing_heavy():
    assert imported_after("import llmopt.cli") == []
    assert imported_after("import llmopt, llmopt.policies.registry, "
                          "llmopt.problems.registry") == []
    code = ("import sys\nfrom llmopt.cli import main\nsys.argv = ['llmopt', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    assert imported_after(code) == []


def test_list_imports_no_solver_or_table_library():
    code = ("import sys\nfrom llmopt.cli import main\nsys.argv = ['llmopt', 'list']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    assert imported_after(code) == []


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_listed_unloaded_shows_its_own_help(name):
    assert help_text(name) == loaded(name).help


def test_a_bin_packing_solve_loads_no_solver_library_it_does_not_run(tmp_path):
    """The quickstart's bin packing is closed by its bounds and searches: no Pyomo, no CP-SAT,
    no table library (its chart needs matplotlib; highspy, 25 ms, comes with the arc-flow
    module the search imports)."""
    code = ("import sys\nfrom llmopt.cli import main\n"
            f"sys.argv = ['llmopt', 'solve', {str(TOY / 'quickstart.yaml')!r}, '--out', "
            f"{str(tmp_path)!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    assert set(imported_after(code)) <= {"matplotlib", "highspy"}
