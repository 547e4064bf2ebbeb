"""``llmopt compare``: policies beside the best schedule llmopt finds and the lower bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from llmopt.cli.common import (
    InstanceArg,
    OutOpt,
    TimeLimitOpt,
    VerboseOpt,
    check_number,
    check_out_dir,
    command,
    err,
    out,
    policy_help,
    progress,
)
from llmopt.cli.replay import parse_policies
from llmopt.data.instance import Instance, load_instance
from llmopt.files import out_path, write_atomic
from llmopt.problems.api import DEFAULT_TIME_LIMIT_S
from llmopt.problems.workflows.compare import compare as run_compare
from llmopt.report import plot as plots
from llmopt.report.compare import Rendered, render
from llmopt.report.slo_plot import itl_cdf_figure, slo_cdf_figure


@command
def compare(
    instance: InstanceArg,
    policy: Annotated[str | None, typer.Option("--policy", "--policies",
                                               help=policy_help())] = None,
    time_limit: TimeLimitOpt = None,
    optimize: Annotated[bool, typer.Option(
        help="Also solve the family's exact problem under the replays' time model "
        "(pd-competition with batch-dependent rounds; the InferMax CSP on small instances) "
        "and the solvers' bounds.")] = True,
    out_dir: OutOpt = Path("solutions"),
    verbose: VerboseOpt = False,
) -> None:
    """Replay policies beside the best schedule llmopt finds and the lower bounds; write
    compare.md, compare.csv, compare.png. Default policies: the paper's of the instance's
    family."""
    check_number(time_limit, "--time-limit")
    check_out_dir(out_dir)
    inst = load_instance(instance)
    names = parse_policies(policy, inst.profile.policy_family, "compare")
    limit = time_limit or inst.solve.time_limit_s or DEFAULT_TIME_LIMIT_S
    shown = progress(verbose)
    comparison = run_compare(inst, names, limit, shown, optimize=optimize)
    shown.done()
    write_comparison(inst, out_dir, render(comparison, inst))
    failed: dict[str, str] = getattr(comparison, "failed", {})
    label = "[bold red]error:[/]" if policy is not None else "[yellow]skipped:[/]"
    for name, reason in failed.items():  # the defaults that cannot run are skipped, noted
        err.print(f"{label} policy {name}: {escape(reason)}", markup=True, soft_wrap=True)
    if failed and policy is not None:  # asked for by name: as replay does
        err.print(f"{len(failed)} of {len(names)} policies could not run this instance; the "
                  "others were compared")
        raise typer.Exit(2)
    ceilings = getattr(comparison, "ceilings", None)
    if comparison.interrupted or (ceilings is not None and ceilings.signalled):
        raise typer.Exit(130)  # written with the exact solve's incumbent, as solve does, or
        #                        with the ceiling's best bound so far


def write_comparison(inst: Instance, out_dir: Path, rendered: Rendered) -> None:
    """compare.md, compare.csv, compare.png (when there is a chart), itl-cdf.png (the
    inter-token latencies, when there are schedules) and, with SLOs, slo-cdf.png; the markdown
    printed."""
    folder = out_path(out_dir, inst.name)
    write_atomic(folder / "compare.md", f"# {inst.name}: {rendered.heading}\n\n"
                                        f"{rendered.markdown}")
    write_atomic(folder / "compare.csv", rendered.table.to_csv(index=False))
    written = ["compare.md", "compare.csv"]
    if rendered.figure is not None:
        plots.save(rendered.figure, folder / "compare.png")
        written.append("compare.png")
    if inst.has_slos and rendered.schedules:
        plots.save(slo_cdf_figure(inst, rendered.schedules), folder / "slo-cdf.png")
        written.append("slo-cdf.png")
    if rendered.schedules:
        plots.save(itl_cdf_figure(inst, rendered.schedules), folder / "itl-cdf.png")
        written.append("itl-cdf.png")
    out.print(rendered.markdown, soft_wrap=True)  # markdown lines whole, never wrapped
    for name in written:
        out.print(f"wrote {folder / name}")
