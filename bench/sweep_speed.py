"""Sweep engines (issue 14 targets): the speed-up of 8 cells of at least 2 s each on 2 workers
over the serial run, for the local engine and a Dask LocalCluster, and the per-cell overhead
of the local engine on cheap cells (wall time per cell on one worker minus the cell's own
runtime).

Two speed-ups per engine: end to end (``run_sweep`` from the call until the tables are
written, the engine's start-up included) and running (the 8 cells on an engine already started
and warmed by one small cell per worker, as on a cluster that is up, against the serial engine
in a warmed process).

Usage::

    python bench/sweep_speed.py [--workers 2] [--cheap 200] [--write-docs]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import ROOT, command_line, header, publish

from llmopt.sweep.engines import open_engine
from llmopt.sweep.runner import run_sweep
from llmopt.sweep.spec import load_sweep

HEAVY = """
name: heavy
instances:
  - name: gsm8k-4000
    model: pang-llama65b-ascend8
    system: {clients: 200, kv_capacity: 131072, max_batch_tokens: 4096, max_prefill_tokens: 4096}
    requests:
      generate:
        count: 5000
        seed: 1000
        input: {dist: normal, mean: 68.43, std: 25.04, min: 1}
        output: {dist: normal, mean: 344.83, std: 187.99, min: 1, max: 512}
grid: {policy: [hybrid], seed: {from: 1, to: 8}}
"""
WARM = """
name: warm
instances: [TWO]
grid: {policy: [hybrid], clients: {from: 1, to: 4}}
"""
CHEAP = f"""
name: cheap
instances: [{ROOT / 'instances' / 'toy' / 'two-clients.yaml'}]
grid: {{policy: [baseline], clients: {{from: 1, to: COUNT}}}}
"""


def timed(sweep_file: Path, out: Path, engine: str, workers: int) -> tuple[float, object]:
    t0 = time.perf_counter()
    report = run_sweep(load_sweep(sweep_file), out, engine=engine, workers=workers)
    return time.perf_counter() - t0, report


def running(sweep_file: Path, warm_file: Path, engine: str, workers: int) -> tuple[float, float]:
    """(start-up s, running s): the engine started, warmed by the small cells, then the
    sweep's cells mapped (nothing stored)."""
    t0 = time.perf_counter()
    runner = open_engine(engine, workers if engine != "serial" else None)
    started = time.perf_counter() - t0
    try:
        list(runner.map(load_sweep(warm_file).cells))
        t1 = time.perf_counter()
        rows = [row for _, row in runner.map(load_sweep(sweep_file).cells)]
        ran = time.perf_counter() - t1
    finally:
        runner.close()
    assert all(r["cell_status"] == "ok" for r in rows), rows
    return started, ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cheap", type=int, default=200, help="cells of the overhead run")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        heavy = folder / "heavy.yaml"
        heavy.write_text(HEAVY)
        warm = folder / "warm.yaml"
        warm.write_text(WARM.replace("TWO", str(ROOT / "instances" / "toy" / "two-clients.yaml")))
        serial_s, report = timed(heavy, folder / "serial", "serial", 1)
        cell_s = report.table["runtime_s"]  # type: ignore[attr-defined]
        rows = [(engine, timed(heavy, folder / engine, engine, args.workers)[0],
                 *running(heavy, warm, engine, args.workers)) for engine in ("local", "dask")]
        _, serial_run = running(heavy, warm, "serial", 1)
        cheap = folder / "cheap.yaml"
        cheap.write_text(CHEAP.replace("COUNT", str(args.cheap)))
        cheap_serial, cheap_report = timed(cheap, folder / "cheap-serial", "serial", 1)
        cheap_local, local_report = timed(cheap, folder / "cheap-local", "local", 1)
    n = args.cheap
    own = float(local_report.table["runtime_s"].sum())  # type: ignore[attr-defined]
    own_serial = float(cheap_report.table["runtime_s"].sum())  # type: ignore[attr-defined]
    lines = [header(command_line()),
             f"Heavy cells: 8 replays of a 5,000-request GSM8K-like workload (Pang et al. 2025 "
             f"Table III statistics) under the hybrid policy, seeds 1–8; each cell "
             f"{cell_s.min():.2f}–{cell_s.max():.2f} s (median {statistics.median(cell_s):.2f} "
             "s) in the serial run, replay and validation included.\n",
             "| engine | workers | end to end (s) | speed-up | engine start-up (s) | "
             "running (s) | speed-up running |",
             "|---|---|---|---|---|---|---|",
             f"| serial | 1 | {serial_s:.1f} | 1.00× | — | {serial_run:.1f} | 1.00× |"]
    lines += [f"| {engine} | {args.workers} | {wall:.1f} | {serial_s / wall:.2f}× | "
              f"{start:.1f} | {ran:.1f} | {serial_run / ran:.2f}× |"
              for engine, wall, start, ran in rows]
    lines += ["",
              "End to end: `run_sweep` from the call until the tables are written (loading "
              "the sweep, starting the engine, each worker's first imports, running, storing "
              "every cell). Running: the 8 cells on an engine already started and warmed by "
              "one small cell per worker (a cluster that is up), against the serial engine in "
              "a warmed process. Engine start-up: the process pool object (its fork server "
              "and workers start on the first cell) or the Dask LocalCluster with its "
              "scheduler and worker processes.",
              "",
              f"Per-cell overhead on cheap cells: {n} replays of a 5-request instance "
              f"(mean cell runtime {own / n * 1000:.1f} ms).",
              "",
              "| engine | workers | wall time (s) | wall per cell (ms) | overhead per cell (ms) |",
              "|---|---|---|---|---|",
              f"| serial | 1 | {cheap_serial:.2f} | {cheap_serial / n * 1000:.1f} | "
              f"{(cheap_serial - own_serial) / n * 1000:.1f} |",
              f"| local | 1 | {cheap_local:.2f} | {cheap_local / n * 1000:.1f} | "
              f"{(cheap_local - own) / n * 1000:.1f} |",
              "",
              "Overhead per cell = (wall time − the cells' own runtimes) / cells: the engine's "
              "start-up spread over the cells, sending each cell to a worker and back, and "
              "writing its record."]
    publish(args.write_docs, "sweep-speed", "\n".join(lines))


if __name__ == "__main__":
    main()
