"""``llmopt gantt``: draw a solution file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmopt.cli.common import InstanceArg, SolutionArg, check_out_dir, command, out
from llmopt.data.instance import load_instance
from llmopt.errors import SolutionFileError
from llmopt.report import plot as plots
from llmopt.result import read_solution
from llmopt.schedule import Schedule


@command
def gantt(
    instance: InstanceArg,
    solution: SolutionArg,
    png: Annotated[Path | None, typer.Option("--out", help="PNG path (default: beside the "
                                             "solution).")] = None,
) -> None:
    """Draw a solution: a Gantt chart with KV memory for schedules, the per-client assignment
    for bin packing."""
    png = png or solution.with_suffix(".png")
    check_out_dir(png.parent)
    inst = load_instance(instance)
    sol = read_solution(solution)
    if sol.get("segments") is not None and len(sol["segments"]):
        sched = Schedule.from_solution(sol)
        ax = plots.gantt_figure(inst, sched.segments, sched.iterations if len(sched.iterations)
                                else None, policy=str(sol.get("solver")),
                                metrics=sol.get("metrics"))
    elif sol.get("assignment"):
        ax = plots.plot_assignment(inst, sol)
    else:
        raise SolutionFileError("nothing to draw: no segments and no assignment", file=solution)
    out.print(f"wrote {plots.save(ax, png)}")
