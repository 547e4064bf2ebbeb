"""Run a sweep: the cells not yet finished in the output folder, on an engine, then the tables.

``run_sweep(sweep, out)`` skips the cells the folder already holds (a re-run finishes an
interrupted sweep), stores each cell as it finishes, runs the bisection search if the sweep
has one, and writes ``results.parquet``/``.csv`` (rows in the sweep's cell order, whatever the
order cells finished in). Ctrl-C stops the workers; the finished cells stay and the tables are
written from them before the interrupt goes on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from llmopt.problems.api import DEFAULT_TIME_LIMIT_S
from llmopt.sweep import goodput
from llmopt.sweep.cell import run_cell
from llmopt.sweep.engines import Engine, open_engine
from llmopt.sweep.search import bisect
from llmopt.sweep.spec import Cell, Sweep, probe_value
from llmopt.sweep.store import Store


class SweepProgress:
    """Receives the sweep's progress (the CLI shows a live bar; the default shows nothing)."""

    def start(self, total: int, done: int) -> None:
        """``total`` cells of which ``done`` were already finished."""

    def update(self, done: int, running: int, failed: int, total: int) -> None:
        """A cell finished."""

    def stage(self, text: str) -> None:
        """Work outside the cells began (the goodput bound's ceiling)."""

    def stop(self) -> None:
        """The sweep ended (or was interrupted)."""


@dataclass
class SweepReport:
    table: pd.DataFrame
    search: pd.DataFrame | None
    ran: int                   # cells run now
    skipped: int               # cells and probes found finished in the folder
    failed: int                # failed cells in the table
    written: list[Path] = field(default_factory=list)
    interrupted: bool = False
    runtime_s: float = 0.0


def run_sweep(sweep: Sweep, out: Path, *, engine: str = "local", workers: int | None = None,
              address: str | None = None, progress: SweepProgress | None = None) -> SweepReport:
    store = Store.check(out, sweep)
    shown = progress or SweepProgress()
    t0 = time.perf_counter()
    runner = open_engine(engine, workers, address)
    store.open()
    finished = store.finished()
    before = {key for key, record in finished.items() if record["row"].get("cell_status") == "ok"}
    todo = [c for c in sweep.cells if not _finished_ok(finished, c)]
    skipped = len(sweep.cells) - len(todo)
    counts = {"ran": 0, "failed": 0}
    probes_used: dict[str, None] = {}
    search_table: pd.DataFrame | None = None
    curve: pd.DataFrame | None = None
    interrupted = False
    shown.start(len(sweep.cells), skipped)
    try:
        _run(runner, todo, store, finished, counts, shown, total=len(sweep.cells),
             done=skipped)
        if sweep.search is not None:
            search_table = bisect(sweep, lambda probes: _probe_round(
                runner, probes, store, finished, counts, shown, probes_used))
        if search_table is not None and goodput.applies(sweep):
            shown.stage("goodput bound: the SLO ceiling")
            columns, curve = goodput.goodput_bounds(sweep, out, shown.stage)
            search_table = _with_bound(search_table, columns)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        shown.stop()
        runner.close()
    records = [finished[c.key] for c in sweep.cells if c.key in finished]
    probe_records = [finished[k] for k in probes_used if k in finished]
    if probe_records:
        records += sorted(probe_records, key=_probe_order(sweep))
    table = store.table(records)
    written = store.write_table(table, "results")
    if search_table is not None:
        written += store.write_table(search_table, "search")
    if curve is not None and len(curve):
        written += store.write_table(curve, "ceiling")
    reused = sum(1 for key in probes_used if key in before)
    report = SweepReport(table, search_table, counts["ran"], skipped + reused,
                         int((table["cell_status"] == "failed").sum()), written, interrupted,
                         time.perf_counter() - t0)
    if interrupted:
        raise SweepInterrupted(report)
    return report


def _with_bound(search: pd.DataFrame, columns: pd.DataFrame) -> pd.DataFrame:
    """The search table with the goodput bound's columns before its ``note``."""
    at = list(search.columns).index("note")
    return pd.concat([search.iloc[:, :at], columns.set_index(search.index),
                      search.iloc[:, at:]], axis=1)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep; ``report`` has the tables of the cells that finished."""

    def __init__(self, report: SweepReport) -> None:
        super().__init__()
        self.report = report


def _finished_ok(finished: dict[str, dict[str, Any]], cell: Cell) -> bool:
    return bool(finished.get(cell.key, {}).get("row", {}).get("cell_status") == "ok")


def _run(runner: Engine, todo: Sequence[Cell], store: Store,
         finished: dict[str, dict[str, Any]], counts: dict[str, int], shown: SweepProgress,
         *, total: int, done: int, probe: bool = False) -> None:
    for cell, row in runner.map(todo):
        finished[cell.key] = store.save(cell, row, probe=probe)
        counts["ran"] += 1
        counts["failed"] += row.get("cell_status") != "ok"
        done += 1
        shown.update(done, runner.running(), counts["failed"], total)


def _probe_round(runner: Engine, probes: list[Cell], store: Store,
                 finished: dict[str, dict[str, Any]], counts: dict[str, int],
                 shown: SweepProgress, used: dict[str, None]) -> dict[str, dict[str, Any]]:
    used.update(dict.fromkeys(c.key for c in probes))
    todo = [c for c in probes if not _finished_ok(finished, c)]
    shown.start(len(probes), len(probes) - len(todo))
    _run(runner, todo, store, finished, counts, shown, total=len(probes),
         done=len(probes) - len(todo), probe=True)
    return {c.key: finished[c.key]["row"] for c in probes}


def _probe_order(sweep: Sweep) -> Any:
    """Probes in the order of their groups, then by the searched value."""
    assert sweep.search is not None
    name = sweep.search.parameter
    groups = {repr(sorted(g.items())): i for i, g in enumerate(sweep.search_groups)}

    def key(record: dict[str, Any]) -> tuple[int, float]:
        params = record["params"]
        group = {k: v for k, v in params.items() if k != name}
        return groups.get(repr(sorted(group.items())), len(groups)), float(params[name])

    return key


@dataclass
class Estimate:
    cells: int           # cells to run (with the search: at most this many probes)
    finished: int
    seconds: float       # wall time for the unfinished cells on ``workers`` workers
    workers: int
    how: str


def estimate(sweep: Sweep, out: Path, workers: int) -> Estimate:
    """How long the unfinished cells of ``sweep`` would take: per instance and policy (or
    problem), the mean runtime of that kind's cells already finished in ``out``, else the time
    of one such cell run here (not stored); a solve counts at its time limit. A search counts
    ``steps + 2`` probes per group at most, each timed like its cell at the low end, less the
    probes already finished in ``out``. Nothing is written."""
    finished = Store.check(out, sweep).finished()
    work = [(c, 1) for c in sweep.cells]
    stored_probes = 0
    if sweep.search is not None:
        spec = sweep.search
        low = probe_value(spec.parameter, spec.low)
        stored_probes, answered = _stored_probes(sweep, finished)
        at_most = spec.steps + 2
        left = 0 if answered else max(len(sweep.search_groups) * at_most - stored_probes, 0)
        groups = [sweep.cell({**g, spec.parameter: low}) for g in sweep.search_groups]
        # the probes left, spread over the groups (each at most steps + 2)
        share = [min(at_most, left // len(groups) + (k < left % len(groups)))
                 for k in range(len(groups))] if groups else []
        work += [(c, n) for c, n in zip(groups, share, strict=True) if n > 0]
    seen: dict[tuple[str, str], list[float]] = {}
    for c, _ in work:
        if c.key in finished:
            seen.setdefault(_kind(c), []).append(float(finished[c.key]["row"]["runtime_s"]))
    timed, total, count, done = 0, 0.0, 0, 0
    for c, weight in work:
        if _finished_ok(finished, c) and weight == 1:
            done += 1
            continue
        kind = _kind(c)
        if kind not in seen:
            if c.kind == "solve":
                limit = c.params.get("time_limit_s") or c.source.mapping.get(
                    "solve", {}).get("time_limit_s") or DEFAULT_TIME_LIMIT_S
                seen[kind] = [float(limit)]
            else:
                seen[kind] = [float(run_cell(c)["runtime_s"])]
                timed += 1
        total += weight * sum(seen[kind]) / len(seen[kind])
        count += weight
    how = (f"timed {timed} cell(s) here, one per instance and policy" if timed else
           "from the runtimes of finished cells")
    if any(c.kind == "solve" for c, _ in work):
        how += "; solves counted at their time limit"
    return Estimate(count + done + stored_probes, done + stored_probes,
                    total / max(workers, 1), workers, how)


class _NotStored(Exception):
    """A probe the search needs is not finished in the folder."""


def _stored_probes(sweep: Sweep, finished: dict[str, dict[str, Any]]) -> tuple[int, bool]:
    """(How many of this search's probes are finished in the folder, whether they answer the
    whole search): the bisection replayed on the stored rows alone, else the probe records
    whose key is still their cell's (an instance changed since makes new keys)."""
    used: set[str] = set()

    def stored(probes: list[Cell]) -> dict[str, dict[str, Any]]:
        if not all(_finished_ok(finished, c) for c in probes):
            raise _NotStored
        used.update(c.key for c in probes)
        return {c.key: finished[c.key]["row"] for c in probes}

    try:
        bisect(sweep, stored)
        return len(used), True
    except _NotStored:
        pass
    current = 0
    for key, record in finished.items():
        params = record["params"]
        if record.get("probe") and params.get("instance") in sweep.sources:
            cell = sweep.cell(params)
            current += cell.key == key and _finished_ok(finished, cell)
    return current, False


def _kind(cell: Cell) -> tuple[str, str]:
    return cell.params["instance"], str(cell.params.get("policy") or cell.params["problem"])
