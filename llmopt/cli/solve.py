"""``llmopt solve``: solve a problem on an instance, write the solution (and a chart)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

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
from llmopt.files import out_path, sidecar_name
from llmopt.plugins import load
from llmopt.problems.api import resolve_options
from llmopt.problems.api import solve as run_solve
from llmopt.problems.registry import PROBLEMS, Option
from llmopt.report import plot as plots
from llmopt.result import Result, read_solution
from llmopt.validate import check_solution


@command
def solve(
    instance: InstanceArg,
    problem: Annotated[str | None, typer.Option("--problem", "-p", help=problem_help())] = None,
    solver: Annotated[str | None, typer.Option("--solver", "-s", help=solver_help())] = None,
    time_limit: TimeLimitOpt = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for solutions.")] = Path(
        "solutions"),
    plot: Annotated[bool, typer.Option(help="Also write a PNG chart.")] = True,
    verbose: VerboseOpt = False,
    **options: Any,
) -> None:
    """Solve a problem on an instance; write the solution JSON (its schedule, if any, in a
    Parquet file beside it) and, when there is a schedule or an assignment to draw, a PNG under
    OUT/<instance name>/<problem>-<solver>.*"""
    check_number(time_limit, "--time-limit", zero_ok=True)
    check_out_dir(out_dir)
    inst = load_instance(instance)
    problem, solver, time_limit = resolve_options(inst, problem, solver, time_limit)
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
    if plot and (result.schedule is not None or "assignment" in result.data.to_json()):
        if result.schedule is not None:
            ax = plots.gantt_figure(inst, result.schedule.segments, result.schedule.iterations,
                                    policy=f"{result.problem} ({result.solver})",
                                    metrics=result.metrics,
                                    requests=result.schedule.requests)
        else:
            ax = plots.plot_assignment(inst, result.to_dict(inst))
        out.print(f"wrote {plots.save(ax, base.with_suffix('.png'))}")
    if result.status == "error":
        raise typer.Exit(1)


def problem_options() -> list[inspect.Parameter]:
    """A command-line option for every option of a registered problem (``ProblemInfo.options``:
    ``--max-batch`` for ``max_batch``), its help naming the problems that take it; unset, it
    is not passed (the problem's default applies). A range is enforced here when every problem
    taking the option states the same one."""
    taken: dict[str, list[tuple[str, Option]]] = {}
    for info in PROBLEMS.values():
        for name, option in info.options.items():
            taken.setdefault(name, []).append((info.name, option))
    made = []
    for name, uses in taken.items():
        kind = uses[0][1].kind
        flag = name.replace("_", "-")
        text = "; ".join(f"{problem}: {option.help}" for problem, option in uses) + "."
        ranges = {(option.low, option.high) for _, option in uses}
        low, high = ranges.pop() if len(ranges) == 1 else (None, None)
        info_: Any
        if kind is bool:
            info_ = typer.Option(f"--{flag}/--no-{flag}", help=text, show_default=False)
        else:
            info_ = typer.Option(f"--{flag}", help=text, min=low, max=high)
        made.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                      annotation=Annotated[kind | None, info_]))
    return made


def _with_problem_options(fn: Any) -> None:
    """``fn``'s signature, as typer reads it, with :func:`problem_options` for its
    ``**options``."""
    own = inspect.signature(fn, eval_str=True)
    fixed = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    fn.__signature__ = own.replace(parameters=[*fixed, *problem_options()])


_with_problem_options(solve)


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
    info = PROBLEMS.get(result.problem)
    if info is not None and info.describe:
        for line in load(info.describe)(result):
            out.print(line)
    if result.interrupted:
        out.print("interrupted: the incumbent and the bound so far are kept")
