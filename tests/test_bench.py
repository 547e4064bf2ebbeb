"""The benchmark scripts stay runnable: each answers --help (so its imports resolve) and none
writes the docs unless asked to (--write-docs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_answers_help(script):
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=BENCH,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
    writes_docs = "publish(" in script.read_text()
    assert not writes_docs or "--write-docs" in done.stdout
