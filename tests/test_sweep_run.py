"""Running sweeps: the same table from every engine, cells stored as they finish and skipped on
a re-run, a dead worker costing only its cell, failing cells recorded, the bisection search,
and the CLI's errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import GENERATED_SWEEP, TOY
from llmopt.report.sweep_plot import default_axes
from llmopt.sweep import cell as cells
from llmopt.sweep.engines import WORKER_DIED, LocalEngine
from llmopt.sweep.runner import SweepInterrupted, estimate, run_sweep
from llmopt.sweep.search import meets
from llmopt.sweep.spec import load_sweep
from llmopt.validate import check_solution

TWELVE = GENERATED_SWEEP + "grid: {policy: [baseline, online], seed: {from: 0, to: 5}}\n"
HUNDRED = GENERATED_SWEEP + "grid: {policy: [baseline, online], seed: {from: 0, to: 49}}\n"
WALL_CLOCK = ["runtime_s", "solve_runtime_s"]


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=[c for c in WALL_CLOCK if c in table]).reset_index(drop=True)


def test_every_engine_gives_the_serial_table(tmp_path):
    sweep = load_sweep(write(tmp_path, TWELVE))
    serial = run_sweep(sweep, tmp_path / "serial", engine="serial").table
    local = run_sweep(sweep, tmp_path / "local", engine="local", workers=2).table
    dask = run_sweep(sweep, tmp_path / "dask", engine="dask", workers=2).table
    assert len(serial) == 12 and serial["cell_status"].eq("ok").all()
    assert serial["valid"].all()
    pd.testing.assert_frame_equal(comparable(local), comparable(serial))
    pd.testing.assert_frame_equal(comparable(dask), comparable(serial))
    # the table is read back as written, for notebooks
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "local" / "results.parquet"),
                                  local)


def test_rows_match_a_replay_run_directly(tmp_path):
    sweep = load_sweep(write(tmp_path, TWELVE))
    table = run_sweep(sweep, tmp_path / "out", engine="serial").table
    cell = next(c for c in sweep.cells if c.params == {"instance": "gen", "policy": "online",
                                                       "seed": 3})
    inst = cells.build_instance(cell)
    assert [r.input_tokens for r in inst.requests] != [
        r.input_tokens for r in cells.build_instance(sweep.cells[0]).requests]
    from llmopt.policies.replay import replay_result

    result, _ = replay_result(inst, "online")
    assert check_solution(inst, result.to_dict(inst)).valid
    row = table[(table["policy"] == "online") & (table["seed"] == 3)].iloc[0]
    assert row["makespan_ms"] == pytest.approx(result.metrics["makespan_ms"])
    assert row["bound_ms"] <= row["makespan_ms"]
    assert row["instance_sha256"] == inst.sha256


def test_a_rerun_runs_only_what_is_missing(tmp_path, monkeypatch):
    """A 100-cell sweep killed (SIGKILL, whole process group) halfway, then re-run: only the
    missing cells run."""
    path = write(tmp_path, HUNDRED)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "llmopt", "sweep", str(path), "--out",
                             str(out), "--workers", "2", "--no-plot"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((out / "cells").glob("*.json"))) >= 50:
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(list((out / "cells").glob("*.json")))
    assert 0 < finished < 100
    calls = []
    real = cells.run_cell

    def counting(cell):
        calls.append(cell.key)
        return real(cell)

    monkeypatch.setattr(cells, "run_cell", counting)
    report = run_sweep(load_sweep(path), out, engine="serial")
    assert len(calls) == 100 - finished == report.ran
    assert report.skipped == finished
    assert len(report.table) == 100 and report.table["cell_status"].eq("ok").all()
    assert len(set(calls)) == len(calls)


def test_ctrl_c_keeps_finished_cells_and_writes_their_table(tmp_path, monkeypatch):
    sweep = load_sweep(write(tmp_path, TWELVE))
    real, calls = cells.run_cell, []

    def interrupted_at_the_fifth(cell):
        calls.append(cell)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(cell)

    monkeypatch.setattr(cells, "run_cell", interrupted_at_the_fifth)
    with pytest.raises(SweepInterrupted) as stop:
        run_sweep(sweep, tmp_path / "out", engine="serial")
    assert len(stop.value.report.table) == 4
    assert len(pd.read_csv(tmp_path / "out" / "results.csv")) == 4
    monkeypatch.setattr(cells, "run_cell", real)
    again = run_sweep(sweep, tmp_path / "out", engine="serial")
    assert (again.ran, again.skipped, len(again.table)) == (8, 4, 12)


def slow_cell(cell):
    time.sleep(0.3)
    return cells.run_cell(cell)


def dies_on_three_clients(cell):
    if cell.params.get("clients") == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return cells.run_cell(cell)


def test_a_killed_worker_costs_only_its_cell(tmp_path):
    sweep = load_sweep(write(tmp_path, TWELVE))
    engine = LocalEngine(workers=2)
    engine.function = slow_cell
    rows = {}
    try:
        for cell, row in engine.map(sweep.cells):
            rows[cell.key] = row
            if len(rows) == 1:
                pool = engine._pool
                assert pool is not None
                victim = next(p for p in pool._processes.values() if p.is_alive())
                os.kill(victim.pid, signal.SIGKILL)
    finally:
        engine.close()
    assert set(rows) == {c.key for c in sweep.cells}
    assert all(r["cell_status"] == "ok" for r in rows.values())


def test_a_cell_that_kills_its_worker_twice_is_recorded_failed(tmp_path):
    sweep = load_sweep(write(tmp_path, f"""
        instances: [{TOY / 'quickstart.yaml'}]
        grid: {{policy: [baseline], clients: [2, 3, 4, 5]}}
        """))
    engine = LocalEngine(workers=2)
    engine.function = dies_on_three_clients
    try:
        rows = {c.params["clients"]: r for c, r in engine.map(sweep.cells)}
    finally:
        engine.close()
    assert rows[3] == {"key": rows[3]["key"], "cell_status": "failed", "error": WORKER_DIED}
    assert all(rows[n]["cell_status"] == "ok" for n in (2, 4, 5))


def test_a_failing_cell_is_recorded_and_the_sweep_goes_on(tmp_path, cli):
    path = write(tmp_path, f"""
        instances: [{TOY / 'quickstart.yaml'}]
        grid: {{policy: [baseline], kv_capacity: [100, 100000]}}
        """)
    result = cli("sweep", path, "--out", tmp_path / "out", "--engine", "serial")
    assert result.exit_code == 2, result.output
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    bad = table[table["kv_capacity"] == 100].iloc[0]
    good = table[table["kv_capacity"] == 100000].iloc[0]
    assert bad["cell_status"] == "failed" and bad["error"].startswith("error: ")
    assert "\n" not in bad["error"]
    assert good["cell_status"] == "ok" and good["valid"]


def search_count(tmp_path, target: str, **engine):
    """Bisect the number of rows of the Azure sample (10 to 60) for sarathi's makespan against
    ``target`` (``at_most: …`` or ``at_least: …``), into ``tmp_path / "search"``."""
    return run_sweep(load_sweep(write(tmp_path, f"""
        instances: [{TOY / "infermax-azure-sample.yaml"}]
        grid: {{policy: [sarathi]}}
        metrics: [makespan_ms]
        search: {{parameter: count, low: 10, high: 60, metric: makespan_ms, {target},
                  steps: 10}}
        """, "search.yaml")), tmp_path / "search", **engine)


def test_search_brackets_the_largest_passing_value(tmp_path):
    """Bisection over the number of trace rows: the answer meets the target, the next integer
    does not, and on a monotone scan it is the scan's answer."""
    sample = TOY / "infermax-azure-sample.yaml"
    scan = run_sweep(load_sweep(write(tmp_path, f"""
        instances: [{sample}]
        grid: {{policy: [sarathi], count: {{from: 10, to: 60}}}}
        metrics: [makespan_ms]
        """, "scan.yaml")), tmp_path / "scan", engine="serial").table
    target = float(scan["makespan_ms"].median())
    searched = search_count(tmp_path, f"at_most: {target}", engine="local", workers=2)
    answer = searched.search.iloc[0]
    ok, failing = int(answer["largest_count"]), int(answer["first_failing_count"])
    by_count = scan.set_index("count")["makespan_ms"]
    assert failing == ok + 1
    assert by_count[ok] <= target < by_count[failing]
    assert answer["makespan_ms_at_largest"] == pytest.approx(by_count[ok])
    assert answer["makespan_ms_at_first_failing"] == pytest.approx(by_count[failing])
    if by_count.is_monotonic_increasing:
        assert ok == int(by_count[by_count <= target].index.max())
    probes = searched.table
    assert probes["probe"].all() and len(probes) == answer["probes"]
    assert meets(load_sweep(tmp_path / "search.yaml").search,
                 {"cell_status": "ok", "makespan_ms": target})


def test_search_says_when_the_ends_contradict_monotonicity(tmp_path):
    """A makespan at least a target is met by many requests and missed by few: the ends of
    the range are upside down for a search of the largest passing value, which must say so
    rather than bisect a bracket that holds no answer."""
    sample = TOY / "infermax-azure-sample.yaml"
    ends = run_sweep(load_sweep(write(tmp_path, f"""
        instances: [{sample}]
        grid: {{policy: [sarathi], count: [10, 60]}}
        metrics: [makespan_ms]
        """, "ends.yaml")), tmp_path / "ends", engine="serial").table
    by_count = ends.set_index("count")["makespan_ms"]
    target = float(by_count.mean())
    searched = search_count(tmp_path, f"at_least: {target}", engine="serial")
    answer = searched.search.iloc[0]
    assert answer["note"].startswith("not monotone") and answer["probes"] == 2
    assert int(answer["largest_count"]) == 60 and int(answer["first_failing_count"]) == 10
    assert answer["makespan_ms_at_first_failing"] == pytest.approx(by_count[10])
    again = run_sweep(load_sweep(tmp_path / "search.yaml"), tmp_path / "search",
                      engine="serial")
    assert (again.ran, again.skipped) == (0, 2)  # the probes are found, and said to be
    guess = estimate(load_sweep(tmp_path / "search.yaml"), tmp_path / "search", 1)
    assert (guess.finished, guess.cells, guess.seconds) == (2, 2, 0)  # answered: none to run


def test_cli_run_rerun_dry_run_and_plot(tmp_path, cli):
    path = write(tmp_path, f"""
        instances: [{TOY / 'quickstart.yaml'}]
        grid: {{policy: [baseline, hybrid], clients: [2, 4]}}
        """)
    out = tmp_path / "out"
    dry = cli("sweep", path, "--out", out, "--dry-run", "--engine", "serial")
    assert dry.exit_code == 0, dry.output
    assert "4 cells (0 already finished" in dry.output and not out.exists()
    first = cli("sweep", "run", path, "--out", out, "--workers", "2")
    assert first.exit_code == 0, first.output
    assert "4 run now, 0 finished before" in first.output
    assert (out / "plot.png").stat().st_size > 0
    again = cli("sweep", path, "--out", out)
    assert "0 run now, 4 finished before" in again.output
    drawn = cli("sweep", "plot", out, "--x", "clients", "--y", "makespan_ms", "--hue",
                "policy")
    assert drawn.exit_code == 0, drawn.output
    assert (out / "plot-makespan_ms-by-clients.png").stat().st_size > 0
    bad = cli("sweep", "plot", out, "--y", "speed")
    assert bad.exit_code == 2 and "--y: value 'speed': no such column" in bad.output


def test_cli_refuses_a_folder_of_another_sweep_and_writes_nothing(tmp_path, cli):
    one = write(tmp_path, f"instances: [{TOY / 'quickstart.yaml'}]\n"
                "grid: {policy: [baseline]}\n", "one.yaml")
    other = write(tmp_path, f"instances: [{TOY / 'quickstart.yaml'}]\n"
                  "grid: {policy: [hybrid]}\n", "other.yaml")
    out = tmp_path / "out"
    assert cli("sweep", one, "--out", out, "--engine", "serial").exit_code == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    refused = cli("sweep", other, "--out", out, "--engine", "serial")
    assert refused.exit_code == 2
    assert "holds a sweep of a different file" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert before == {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    busy = cli("sweep", one, "--out", tmp_path / "busy")
    assert busy.exit_code == 2 and "holds no sweep" in busy.output


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "ray"], "--engine: value 'ray': unknown engine"),
    (["--workers", "0"], "--workers: value 0: must be at least 1"),
    (["--address", "tcp://127.0.0.1:9"], "--address: value 'tcp://127.0.0.1:9': cannot reach"),
])
def test_cli_option_errors(tmp_path, cli, args, message):
    path = write(tmp_path, f"instances: [{TOY / 'quickstart.yaml'}]\n"
                 "grid: {policy: [baseline]}\n")
    result = cli("sweep", path, "--out", tmp_path / "out", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out" / "cells").exists()


def test_cli_bad_sweep_file(tmp_path, cli):
    path = write(tmp_path, f"instances: [{TOY / 'quickstart.yaml'}]\n"
                 "grid: {policy: [baseline], replicas: [0]}\n")
    result = cli("sweep", path, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"error: {path}: grid.replicas[0]: value 0:")
    assert not (tmp_path / "out").exists()


def test_sweep_manifest_names_the_file(tmp_path):
    path = write(tmp_path, TWELVE)
    run_sweep(load_sweep(path), tmp_path / "out", engine="serial")
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert manifest["file"] == str(path) and manifest["sweep"] == "sweep"


def test_the_cells_own_columns_are_there_when_empty(tmp_path):
    """Nothing failed and nothing was validated: ``error`` and ``valid`` are still columns (all
    empty), as the guide lists them, so that ``table["error"]`` needs no test first."""
    table = run_sweep(load_sweep(write(tmp_path, f"""
        instances: [{TOY / 'quickstart.yaml'}]
        grid: {{policy: [baseline]}}
        validate: false
        """)), tmp_path / "out", engine="serial").table
    assert {"error", "valid", "invalid_reason", "cell_status"} <= set(table.columns)
    assert table["error"].isna().all() and table["valid"].isna().all()
    saved = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert "error" in saved.columns and "valid" in saved.columns


def test_the_default_plot_takes_the_first_varying_numeric_parameter_seeds_aside():
    from_slo_sweep = pd.DataFrame({"policy": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1],
                                   "slo_scale": [0.5, 2.0, 0.5, 2.0],
                                   "ttft_p99_ms": [1.0, 2.0, 3.0, 4.0],
                                   "cell_status": ["ok"] * 4})
    assert default_axes(from_slo_sweep) == ("slo_scale", "ttft_p99_ms", "policy")
    assert default_axes(from_slo_sweep.drop(columns="slo_scale"))[0] is None  # a box per policy
