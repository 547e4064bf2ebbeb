"""The README's quick start stays true: its commands name real files and the console script
runs the main job on the bundled instance."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", text, re.S)
    assert block, "README has no quick-start bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands_install_and_run_then_test():
    commands = quick_start_commands()
    assert len(commands) == 2
    install, test = commands
    assert 'pip install -e ".[dev]"' in install and "llmopt solve" in install
    assert test.strip() == "pytest"
    instance = re.search(r"llmopt solve (\S+)", install).group(1)
    assert (ROOT / instance).is_file()


def test_console_script_solves_the_quick_start_instance(tmp_path):
    install = quick_start_commands()[0]
    instance = ROOT / re.search(r"llmopt solve (\S+)", install).group(1)
    script = Path(sys.executable).parent / "llmopt"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "llmopt"]
    done = subprocess.run([*cmd, "solve", str(instance)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "optimal" in done.stdout
    sol = json.loads((tmp_path / "solutions" / "quickstart" / "binpacking-auto.json").read_text())
    assert sol["status"] == "optimal"
