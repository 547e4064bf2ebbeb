"""``llmopt compare``: policies beside the best schedule llmopt finds and the lower bounds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from matplotlib.axes import Axes

from llmopt.cli.common import (
    InstanceArg,
    OutOpt,
    TimeLimitOpt,
    VerboseOpt,
    check_number,
    check_out_dir,
    command,
    out,
    policy_help,
    progress,
)
from llmopt.cli.replay import parse_policies
from llmopt.data.instance import Instance, load_instance
from llmopt.files import out_path, write_atomic
from llmopt.policies.registry import check_family
from llmopt.policies.replay import replay_result
from llmopt.policies.slice.ils import section5_metrics
from llmopt.policies.slice.replay import (
    is_slice_policy,
    ladder_markdown,
    ladder_table,
    slice_result,
)
from llmopt.problems.api import DEFAULT_TIME_LIMIT_S
from llmopt.report import plot as plots
from llmopt.report.compare import compare as run_compare
from llmopt.report.priority_compare import compare_priority, plot_priority
from llmopt.report.slo_plot import itl_cdf_figure, slo_cdf_figure
from llmopt.schedule import Schedule


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
    names = parse_policies(policy, inst.profile.family, "compare")
    if inst.profile.family == "scls" or any(is_slice_policy(name) for name in names):
        compare_slices(inst, names, out_dir)
        return
    limit = time_limit or inst.solve.time_limit_s or DEFAULT_TIME_LIMIT_S
    if inst.profile.family == "bilinear":
        compare_priority_plans(inst, names, out_dir, limit, optimize, verbose)
        return
    shown = progress(verbose)
    comp = run_compare(inst, names, limit, shown, optimize=optimize)
    shown.done()
    best = comp.best_bound
    ceiling = comp.attainment_bound
    ax = plots.comparison_figure(
        comp.table, best.value_ms if best else None,
        ceiling=ceiling.share_upper if ceiling is not None else None,
        ceiling_label=f"proven by the exact model ({ceiling.status})" if ceiling else "",
        title=f"{inst.name}: schedules compared")
    schedules = {name: r.schedule for name, r in comp.results.items() if r.schedule is not None}
    write_comparison(inst, out_dir, "schedules compared", comp.markdown(), comp.table, ax,
                     schedules)
    if comp.interrupted:
        raise typer.Exit(130)  # written with the exact solve's incumbent, as solve does


def compare_priority_plans(inst: Instance, names: list[str], out_dir: Path, limit: float,
                           optimize: bool, verbose: bool) -> None:
    """A bilinear instance: each policy's G (eq 2) beside the best priority plan and the
    proven upper bound on G (``llmopt.report.priority_compare``)."""
    shown = progress(verbose)
    comp = compare_priority(inst, names, limit, shown, optimize=optimize)
    shown.done()
    write_comparison(inst, out_dir, "schedules compared by G", comp.markdown(), comp.table,
                     plot_priority(comp, title=f"{inst.name}: G by schedule"), comp.schedules)


def write_comparison(inst: Instance, out_dir: Path, heading: str, md: str, table: pd.DataFrame,
                     ax: Axes, schedules: dict[str, Schedule]) -> None:
    """compare.md, compare.csv, compare.png, itl-cdf.png (the inter-token latencies) and, with
    SLOs, slo-cdf.png; the table printed."""
    folder = out_path(out_dir, inst.name)
    write_atomic(folder / "compare.md", f"# {inst.name}: {heading}\n\n{md}")
    write_atomic(folder / "compare.csv", table.to_csv(index=False))
    plots.save(ax, folder / "compare.png")
    written = ["compare.md", "compare.csv", "compare.png"]
    if inst.has_slos and schedules:
        plots.save(slo_cdf_figure(inst, schedules), folder / "slo-cdf.png")
        written.append("slo-cdf.png")
    if schedules:
        plots.save(itl_cdf_figure(inst, schedules), folder / "itl-cdf.png")
        written.append("itl-cdf.png")
    out.print(md, soft_wrap=True)  # markdown lines whole, never wrapped
    for name in written:
        out.print(f"wrote {folder / name}")


def ils_metrics(inst: Instance, name: str) -> dict[str, float]:
    """Section 5's metrics of an iteration-level replay (ILS) on the instance's model
    instances, as the slice-level replays define them (no slices: ``slices_per_request`` NaN)."""
    _, schedule = replay_result(inst, name)
    return {**section5_metrics(schedule, inst.system.instances), "slices_per_request": math.nan}


def compare_slices(inst: Instance, names: list[str], out_dir: Path) -> None:
    """The slice-level schedulers (Cheng et al. 2024, Fig. 15's ladder) and ILS side by side:
    their section 5 metrics in compare.md and compare.csv. No lower bound or exact row: llmopt
    has no exact model of a whole slice-level cluster replay (its exact checks are per period:
    ``scls-batching``)."""
    for name in names:
        check_family(inst, name)
    table = ladder_table({name: slice_result(inst, name)[0].data["metrics"]
                          if is_slice_policy(name) else ils_metrics(inst, name)
                          for name in names})
    folder = out_path(out_dir, inst.name)
    md = (f"{ladder_markdown(table)}\nReplays on {inst.system.instances} model instance(s) "
          "(Cheng et al. 2024, section 5): times in s; batch = mean batch size (requests per "
          "slice; per iteration for ILS); pad, invalid and slices per request. No lower "
          "bound: llmopt's exact model (scls-batching) covers one period's batching, not a "
          "whole replay.\n")
    write_atomic(folder / "compare.md", f"# {inst.name}: slice-level schedules compared\n\n{md}")
    write_atomic(folder / "compare.csv", table.to_csv(index=False))
    out.print(md, soft_wrap=True)  # markdown lines whole, never wrapped
    for name in ("compare.md", "compare.csv"):
        out.print(f"wrote {folder / name}")
