"""``llmopt sweep``: run a sweep file (``llmopt sweep SWEEP.yaml`` is ``llmopt sweep run
SWEEP.yaml``) and plot its table (``llmopt sweep plot OUT``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

from llmopt.cli.common import check_out_dir, command, err, out, print_table
from llmopt.cli.usage import OneLineUsageErrors
from llmopt.errors import InputFileError, OptionError
from llmopt.report import plot as plots
from llmopt.report.sweep_plot import (
    check_columns,
    default_axes,
    plot_lines,
    plot_spread,
    set_title,
)
from llmopt.sweep.engines import ENGINES, check_engine, default_workers
from llmopt.sweep.runner import (
    SweepInterrupted,
    SweepProgress,
    SweepReport,
    estimate,
    run_sweep,
)
from llmopt.sweep.search import Target
from llmopt.sweep.spec import Sweep, load_sweep

SUBCOMMANDS = ("run", "plot")


class DefaultToRun(OneLineUsageErrors):
    """``llmopt sweep FILE …`` runs ``llmopt sweep run FILE …``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in SUBCOMMANDS and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=DefaultToRun, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False,
                  help="Experiment sweeps: many replays and solves, locally or on Dask, "
                       "resumable, as one tidy table. `llmopt sweep SWEEP.yaml --out DIR` "
                       "runs a sweep file; `llmopt sweep plot DIR` draws its table.")


class BarProgress(SweepProgress):
    """A live bar on a terminal's stderr: done / total, running, failed, elapsed, estimate."""

    def __init__(self) -> None:
        self._bar: RichProgress | None = None
        self._task: Any = None
        self._t0 = time.perf_counter()
        self._start_done = 0

    def start(self, total: int, done: int) -> None:
        if not err.is_terminal:
            return
        if self._bar is None:
            self._bar = RichProgress(
                TextColumn("cells"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"), console=err, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("cells", total=total, completed=done,
                                            state="", eta="")
        else:
            self._bar.update(self._task, total=total, completed=done)
        self._t0, self._start_done = time.perf_counter(), done

    def update(self, done: int, running: int, failed: int, total: int) -> None:
        if self._bar is None:
            return
        ran = done - self._start_done
        left = (time.perf_counter() - self._t0) / ran * (total - done) if ran else None
        self._bar.update(self._task, completed=done, total=total,
                         state=f"running {running} · failed {failed}",
                         eta="" if left is None else f"~{left:,.0f} s left")

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


EngineOpt = Annotated[str, typer.Option(
    help="Where cells run: " + "; ".join(f"{e.name}: {e.summary}" for e in ENGINES.values())
    + ".")]


@app.command()
@command
def run(
    sweep_file: Annotated[Path, typer.Argument(metavar="SWEEP", help="Sweep YAML file.",
                                               show_default=False)],
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Folder of the sweep's cells and tables (default: sweeps/<name>). A "
        "re-run into the same folder runs only the cells not finished.")] = None,
    engine: EngineOpt = "local",
    workers: Annotated[int | None, typer.Option(
        help="Worker processes of the local engine or the Dask LocalCluster (default: one "
        "per core).")] = None,
    address: Annotated[str | None, typer.Option(
        help="An existing Dask scheduler, tcp://HOST:PORT (implies --engine dask).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the number of cells and a time estimate; run nothing.")
    ] = False,
    plot: Annotated[bool, typer.Option(help="Write the default plot (plot.png).")] = True,
) -> None:
    """Run a sweep file: every cell (a replay or a solve of one instance variant) on the
    engine, stored as it finishes; then results.parquet and results.csv (one row per cell),
    the search's table and a plot."""
    if address is not None:
        engine = "dask"
    check_engine(engine, workers, address)
    sweep = load_sweep(sweep_file)
    folder = out_dir or Path("sweeps") / sweep.name
    check_out_dir(folder)
    if dry_run:
        _dry_run(sweep, folder, engine, workers)
        return
    try:
        report = run_sweep(sweep, folder, engine=engine, workers=workers, address=address,
                           progress=BarProgress())
    except SweepInterrupted as stop:
        _summary(sweep, stop.report)
        err.print(f"interrupted: {stop.report.ran} cells finished in this run are kept; run "
                  "the same command again to finish the others")
        raise typer.Exit(130) from None
    if plot and report.table["cell_status"].eq("ok").any():
        searched = (sweep.search.parameter, Target.of(sweep.search)) if sweep.search else None
        drawn = _default_plot(report.table, sweep.name, searched)
        if drawn is not None:
            report.written.append(plots.save(drawn, folder / "plot.png"))
    _summary(sweep, report)
    failed = report.table[report.table["cell_status"] == "failed"]
    if len(failed):
        internal = failed["error"].astype(str).str.startswith("internal error").any()
        raise typer.Exit(1 if internal else 2)


def _dry_run(sweep: Sweep, folder: Path, engine: str, workers: int | None) -> None:
    n = 1 if engine == "serial" else (workers or default_workers())
    guess = estimate(sweep, folder, n)
    work = (f"the search bisects {sweep.search.parameter} for {len(sweep.search_groups)} "
            f"group(s), at most {guess.cells} probes" if sweep.search
            else f"{len(sweep.cells)} cells")
    out.print(f"{sweep.name}: {work} ({guess.finished} already finished in {folder}); about "
              f"{guess.seconds:,.1f} s on {n} worker(s) of engine {engine} ({guess.how})")


def _summary(sweep: Sweep, report: SweepReport) -> None:
    table = report.table
    ok = int((table["cell_status"] == "ok").sum())
    out.print(f"{sweep.name}: {len(table)} cells, {ok} ok, {report.failed} failed; "
              f"{report.ran} run now, {report.skipped} finished before; "
              f"{report.runtime_s:,.1f} s")
    if "valid" in table and (table["valid"] == False).any():  # noqa: E712 (None: not checked)
        bad = table[table["valid"] == False]  # noqa: E712
        out.print(f"[bold red]{len(bad)} cells produced an answer the validator rejects[/]: "
                  f"{escape(str(bad['invalid_reason'].iloc[0]))}")
    if report.search is not None and sweep.search is not None:
        shown_search = report.search.drop(columns="target")
        if len(sweep.sources) == 1:
            shown_search = shown_search.drop(columns="instance", errors="ignore")
        name = sweep.search.parameter
        out.print(f"largest {name} with {report.search['target'].iloc[0]} (bisection; "
                  f"first failing: the smallest {name} probed that misses it):")
        print_table(_frame_table(shown_search.rename(columns={
            f"largest_{name}": "largest", f"first_failing_{name}": "first failing",
            f"{sweep.search.metric}_at_largest": f"{sweep.search.metric} at largest",
            f"{sweep.search.metric}_at_first_failing":
                f"{sweep.search.metric} at first failing"})))
    failed = table[table["cell_status"] == "failed"]
    for _, row in failed.head(5).iterrows():
        shown = {c: row[c] for c in sweep.columns if pd.notna(row[c])}
        err.print(f"[bold red]failed:[/] {escape(str(shown))}: {escape(str(row['error']))}",
                  markup=True, soft_wrap=True)
    if len(failed) > 5:
        err.print(f"… and {len(failed) - 5} more failed cells (column error of the table)")
    for path in report.written:
        out.print(f"wrote {path}")


def _frame_table(frame: pd.DataFrame) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for col in frame.columns:
        table.add_column(str(col))
    for row in frame.itertuples(index=False):
        table.add_row(*("—" if pd.isna(v) else f"{v:g}" if isinstance(v, float) else str(v)
                        for v in row))
    return table


def _default_plot(table: pd.DataFrame, name: str,
                  searched: tuple[str, Target] | None = None) -> Any:
    x, y, hue = _axes(table, searched)
    if y is None:
        return None
    if x is None and hue is None:
        return None
    drawn = _draw(table, x, y, hue, searched)
    set_title(drawn, f"{name}: {' '.join(drawn.get_title().split())}")
    return drawn


def _axes(table: pd.DataFrame, searched: tuple[str, Target] | None
          ) -> tuple[str | None, str | None, str | None]:
    """The default plot's x, y and hue: a search's parameter and metric, else
    ``default_axes``."""
    x, y, hue = default_axes(table)
    if searched is not None and searched[1].metric in table and searched[0] in table:
        return searched[0], searched[1].metric, hue
    return x, y, hue


def _draw(table: pd.DataFrame, x: str | None, y: str, hue: str | None,
          searched: tuple[str, Target] | None) -> Any:
    if x is None:
        return plot_spread(table, y, str(hue))
    target = searched[1] if searched is not None and searched[1].metric == y else None
    return plot_lines(table, x, y, hue, target=target.value if target else None,
                      target_label=("target: " + str(target).replace(">=", "≥").replace("<=", "≤")
                                    if target else "target"))


def _searched(folder: Path) -> tuple[str, Target] | None:
    """The parameter and target of the search a sweep folder holds (its search table)."""
    path = folder / "search.parquet"
    if not path.is_file():
        return None
    search = pd.read_parquet(path)
    parameter = next((c.removeprefix("largest_") for c in search.columns
                      if c.startswith("largest_")), None)
    target = Target.parse(str(search["target"].iloc[0])) if "target" in search and len(
        search) else None
    return (parameter, target) if parameter and target else None


@app.command("plot")
@command
def plot_command(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="A sweep's output folder.",
                                           show_default=False)],
    x: Annotated[str | None, typer.Option(help="Column on the x axis (default: the first "
                                          "numeric parameter that varies; none: a box per "
                                          "hue value).")] = None,
    y: Annotated[str | None, typer.Option(help="Column on the y axis (a metric).")] = None,
    hue: Annotated[str | None, typer.Option(help="One line per value of this column.")] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="PNG to write (default: DIR/plot-<y>-by-<x>.png).")] = None,
) -> None:
    """Plot a sweep's table: y against x with one line per hue value and a band over the
    other parameters (seeds); when no numeric parameter varies, the spread of y per hue
    value."""
    table_path = folder / "results.parquet"
    if not table_path.is_file():
        raise InputFileError("no results.parquet here: not a sweep's output folder, or the "
                             "sweep has not run", file=folder)
    table = pd.read_parquet(table_path)
    searched = _searched(folder)
    dx, dy, dhue = _axes(table, searched)
    x, y, hue = x or dx, y or dy, hue or dhue
    check_columns(table, x=x, y=y, hue=hue)
    if y is None:
        raise OptionError("no metric with values in the table; give --y", field="--y")
    if x is None and hue is None:
        raise OptionError("give --x, or --hue for a spread per value", field="--x")
    drawn = _draw(table, x, y, hue, searched)
    target = out_file or folder / f"plot-{y}-by-{x or hue}.png"
    check_out_dir(target.parent)
    out.print(f"wrote {plots.save(drawn, target)}")
