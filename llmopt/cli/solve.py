"""``llmopt solve``: solve a problem on an instance, write the solution (and a chart)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from llmopt.cli.common import (
    InstanceArg,
    TimeLimitOpt,
    VerboseOpt,
    check_number,
    check_out_dir,
    command,
    err,
    fmt_ms,
    out,
    print_table,
    problem_help,
    progress,
    solver_help,
    write_solution,
)
from llmopt.data.instance import Instance, load_instance
from llmopt.files import out_path
from llmopt.problems.api import resolve_options
from llmopt.problems.api import solve as run_solve
from llmopt.report import plot as plots
from llmopt.result import Result, read_solution
from llmopt.schedule.io import sidecar_name
from llmopt.validate import check_solution


@command
def solve(
    instance: InstanceArg,
    problem: Annotated[str | None, typer.Option("--problem", "-p", help=problem_help())] = None,
    solver: Annotated[str | None, typer.Option("--solver", "-s", help=solver_help())] = None,
    time_limit: TimeLimitOpt = None,
    formulation: Annotated[str | None, typer.Option(
        help="pd-competition: original (eqs 1–25) | compact")] = None,
    bins: Annotated[int | None, typer.Option(
        help="pd-competition: number of bins K; infermax-csp: number of batches N.")] = None,
    time_model: Annotated[str | None, typer.Option(
        help="pd-competition: stage (the MIP's) | replay (batch-dependent rounds)")] = None,
    literal: Annotated[bool, typer.Option(
        "--literal", help="pd-competition original: eq 13 as printed, no w ≤ d link.")] = False,
    no_cuts: Annotated[bool, typer.Option(
        "--no-cuts", help="pd-competition original: no symmetry cuts or valid inequalities.")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for solutions.")] = Path(
        "solutions"),
    plot: Annotated[bool, typer.Option(help="Also write a PNG chart.")] = True,
    verbose: VerboseOpt = False,
) -> None:
    """Solve a problem on an instance; write the solution JSON (its schedule, if any, in a
    Parquet file beside it) and, when there is a schedule or an assignment to draw, a PNG under
    OUT/<instance name>/<problem>-<solver>.*"""
    check_number(time_limit, "--time-limit", zero_ok=True)
    check_number(bins, "--bins")
    check_out_dir(out_dir)
    inst = load_instance(instance)
    problem, solver, time_limit = resolve_options(inst, problem, solver, time_limit)
    options = {"formulation": formulation, "bins": bins, "time_model": time_model,
               "literal": True if literal else None, "cuts": False if no_cuts else None}
    result = run_solve(inst, problem, solver, time_limit, progress=progress(verbose),
                       **options)
    show(result)
    base = out_path(out_dir, inst.name, f"{result.problem}-{result.solver}")
    path = write_solution(result, base.with_suffix(".json"), inst)
    out.print(f"wrote {path}")
    if result.schedule is not None:
        out.print(f"wrote {path.parent / sidecar_name(path)}")
    check_written(inst, path)
    if result.interrupted:
        raise typer.Exit(130)  # the incumbent is written; no chart
    if plot and (result.schedule is not None or result.data.get("assignment")):
        if result.schedule is not None:
            ax = plots.gantt_figure(inst, result.schedule.segments, result.schedule.iterations,
                                    policy=f"{result.problem} ({result.solver})",
                                    metrics=result.data.get("metrics"),
                                    requests=result.schedule.requests)
        else:
            ax = plots.plot_assignment(inst, result.to_dict(inst))
        out.print(f"wrote {plots.save(ax, base.with_suffix('.png'))}")
    if result.status == "error":
        raise typer.Exit(1)


def check_written(inst: Instance, path: Path) -> None:
    """The file just written, held against the instance by the independent validator (as
    ``llmopt validate`` does): its verdict in one line and the validator's notes; a file it
    rejects is a bug in llmopt (exit 1, the file kept for the report)."""
    verdict = check_solution(inst, read_solution(path))
    if verdict.reasons:
        err.print(f"[bold red]internal error[/] (a bug in llmopt, not in your input): the "
                  f"solver's answer fails the independent validator: "
                  f"{escape('; '.join(verdict.reasons))}", markup=True, soft_wrap=True)
        raise typer.Exit(1)
    out.print("validated: valid (llmopt.validate, independent of the solvers)")
    for note in verdict.notes:
        out.print(f"validator: {note}")


def show(result: Result) -> None:
    table = Table(show_edge=False, header_style="bold")
    for col in ("problem", "solver", "status", "objective (ms)", "bound (ms)", "gap", "runtime"):
        table.add_column(col, justify="right" if col not in ("problem", "solver") else "left",
                         no_wrap=True)
    gap = result.gap
    table.add_row(result.problem, result.solver, result.status, fmt_ms(result.objective),
                  fmt_ms(result.bound), "—" if gap is None else f"{gap:.2%}",
                  f"{result.runtime_s:.2f} s")
    print_table(table)
    if result.proof:
        out.print(f"proof: {result.proof}")
    for note in result.notes:
        out.print(f"note: {note}")
    d = result.data
    if "objective_replay_ms" in d:
        out.print(f"{d['prefill_stages']} prefill stages, {d['decode_rounds']} decode rounds; "
                  f"stage model {fmt_ms(d['objective_stage_model_ms'])} ms, replayed with "
                  f"batch-dependent rounds {fmt_ms(d['objective_replay_ms'])} ms")
        out.print("heuristics: " + ", ".join(f"{k} {fmt_ms(v)}" for k, v in
                                               d["heuristics"].items()))
    if result.interrupted:
        out.print("interrupted: the incumbent and the bound so far are kept")
