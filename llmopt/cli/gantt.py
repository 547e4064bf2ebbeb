"""``llmopt gantt``: draw a solution file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from llmopt.cli.common import InstanceArg, SolutionArg, check_out_dir, command, out
from llmopt.data.instance import Instance, load_instance
from llmopt.errors import SolutionFileError
from llmopt.policies.pang.deploy import plan_assignment
from llmopt.policies.slice.replay import MODE, slice_frames
from llmopt.report import plot as plots
from llmopt.report.slice_plot import plot_slice_frames
from llmopt.result import read_solution
from llmopt.schedule import Schedule
from llmopt.validate.schedule import check_schedule


@command
def gantt(
    instance: InstanceArg,
    solution: SolutionArg,
    png: Annotated[Path | None, typer.Option("--out", help="PNG path (default: beside the "
                                             "solution).")] = None,
) -> None:
    """Draw a solution: a Gantt chart with KV memory for schedules, the slices of a slice-level
    replay, the per-client assignment for bin packing."""
    png = png or solution.with_suffix(".png")
    check_out_dir(png.parent)
    inst = load_instance(instance)
    sol = read_solution(solution)
    if sol["instance_sha256"] != inst.sha256:
        raise SolutionFileError(f"does not match {instance} ({inst.sha256[:12]}…): the "
                                "solution was made for other data", file=solution,
                                field="instance_sha256", value=sol["instance_sha256"])
    if sol.get("mode") == MODE:
        try:
            ax = plot_slice_frames(*slice_frames(inst, sol))
        except SolutionFileError as exc:
            raise exc.in_file(solution) from None
    elif sol.get("segments") is not None and len(sol["segments"]):
        sched = Schedule.from_solution(sol)
        ax = plots.gantt_figure(inst, sched.segments, sched.iterations if len(sched.iterations)
                                else None, policy=str(sol.get("solver")),
                                metrics=sol.get("metrics"), requests=request_times(inst, sol))
    elif sol.get("assignment"):
        try:
            plan_assignment(inst, sol)
        except SolutionFileError as exc:
            raise exc.in_file(solution) from None
        ax = plots.plot_assignment(inst, sol)
    else:
        raise SolutionFileError("nothing to draw: no segments and no assignment", file=solution)
    out.print(f"wrote {plots.save(ax, png)}")


def request_times(inst: Instance, sol: dict[str, Any]) -> pd.DataFrame | None:
    """Per request its first token and finish, as the validator derives them from a core
    replay's or an InferMax schedule's segments and iterations (what the chart needs to outline
    missed SLOs); None without SLOs, for other solutions, or when the schedule is invalid."""
    if not inst.has_slos or sol.get("problem") not in ("replay", "infermax-csp"):
        return None
    model = "infermax" if sol.get("mode") == "continuous" else "replay"
    _, checked = check_schedule(inst, sol, model, memory=sol.get("unlimited_memory") is not True)
    return checked.requests if checked is not None else None
