"""Ctrl-C during a solve keeps the incumbent and the bound, and the solution file is written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import TOY


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_ctrl_c_keeps_incumbent_and_bound(solver, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmopt", "solve", str(TOY / "hard-100x20.yaml"), "--solver",
         solver, "--time-limit", "120", "--out", str(tmp_path), "--no-plot"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the solver has started (its stage line), then give it a moment to find a solution
    line = proc.stderr.readline()
    assert "eqs 26–30" in line, line
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    sol = json.loads((tmp_path / "hard-100x20" / f"binpacking-{solver}.json").read_text())
    assert sol["status"] in ("feasible", "optimal")
    assert sol["objective"] >= sol["bound"] > 0
    if sol["status"] == "feasible":
        assert sol.get("interrupted") is True
        assert "interrupted" in stdout
