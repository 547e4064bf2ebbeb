"""``llmopt replay``: policies (and solver plans) through the simulation core."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from llmopt.cli.common import (
    InstanceArg,
    OutOpt,
    VerboseOpt,
    check_number,
    check_out_dir,
    command,
    err,
    latency_tables,
    metrics_table,
    out,
    policy_help,
    prefix_table,
    print_table,
    progress,
    router_help,
    write_solution,
)
from llmopt.data.instance import Instance, load_instance
from llmopt.errors import LlmoptError, OptionError, SolutionFileError, unknown_name
from llmopt.files import out_path, sidecar_name
from llmopt.policies.registry import POLICIES, Engine, default_policies, slice_policies
from llmopt.policies.replay import Replayed, replay_policy
from llmopt.policies.slice.replay import LADDER_COLUMNS
from llmopt.problems.workflows.ceiling import policy_ceilings
from llmopt.report import plot as plots
from llmopt.report.slice_plot import plot_slices
from llmopt.report.slo_plot import itl_cdf_figure, slo_cdf_figure
from llmopt.result import read_solution
from llmopt.schedule import Schedule

DEFAULT_CEILING_TIME_LIMIT_S = 10.0


def parse_policies(text: str | None, family: str, command: str) -> list[str]:
    """Comma-separated policy names (default: the registry's defaults of the instance's family
    for ``command``)."""
    if text is None:
        defaults = default_policies(family, command)
        if not defaults:
            raise OptionError(f"no default policies for profile family {family!r}: give "
                              "--policy", field="--policy")
        return list(defaults)
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        shown = unknown[0] if unknown else text
        raise OptionError(unknown_name("policy", shown, POLICIES), field="--policy",
                          value=shown)
    return names


@command
def replay(
    instance: InstanceArg,
    policy: Annotated[str | None, typer.Option("--policy", "--policies",
                                               help=policy_help())] = None,
    plan: Annotated[Path | None, typer.Option(help="Solution JSON whose plan policy "
                                              "'plan' replays.")] = None,
    router: Annotated[str | None, typer.Option(help=router_help())] = None,
    out_dir: OutOpt = Path("solutions"),
    plot: Annotated[bool, typer.Option(help="Also write Gantt charts.")] = True,
    ceiling: Annotated[bool, typer.Option(
        help="With SLO targets, also the proven ceiling on SLO attainment (at most how many "
        "requests can meet their SLOs in any schedule) beside each policy's.")] = True,
    ceiling_time_limit: Annotated[float, typer.Option(
        help="Seconds for the ceiling: the best of its bounds found within them is shown."
    )] = DEFAULT_CEILING_TIME_LIMIT_S,
    verbose: VerboseOpt = False,
) -> None:
    """Replay policies (and solver plans) through the simulation core; write one solution JSON
    (with metrics; segments and iteration log in a Parquet file beside it) and one Gantt chart
    per policy. Default policies: the paper's of the instance's profile family (Pang: baseline,
offline, online, hybrid; InferMax: every scheduler)."""
    check_out_dir(out_dir)
    check_number(ceiling_time_limit, "--ceiling-time-limit")
    inst = load_instance(instance)
    names = parse_policies(policy, inst.profile.policy_family, "replay")
    if plan and "plan" not in names:
        raise OptionError("given without policy plan, which alone replays it (add "
                          "--policy plan)", field="--plan", value=str(plan))
    plan_data = read_solution(plan) if plan else None
    if plan and plan_data and plan_data["instance_sha256"] != inst.sha256:
        raise SolutionFileError(f"does not match {instance} ({inst.sha256[:12]}…): the plan "
                                "was made for other data", file=plan, field="instance_sha256",
                                value=plan_data["instance_sha256"])
    shown = progress(verbose)
    if router is not None and any(POLICIES[n].engine is Engine.SLICE for n in names):
        raise OptionError(f"the slice-level schedulers ({', '.join(slice_policies())}) "
                          "dispatch by their own rule; no router applies", field="--router",
                          value=router)
    rows, written = [], []
    slice_rows: list[tuple[str, dict]] = []
    schedules: dict[str, Schedule] = {}
    failed: list[tuple[str, LlmoptError]] = []
    for name in names:
        try:
            replayed = replay_policy(inst, name, plan=plan_data, router=router, progress=shown)
        except LlmoptError as exc:
            if plan and name == "plan" and isinstance(exc, SolutionFileError) and not exc.file:
                exc = exc.in_file(plan)
            if len(names) == 1:
                raise exc from None
            failed.append((name, exc))
            continue
        finally:
            shown.done()
        written += write_replay(inst, name, replayed, out_dir, plot)
        if replayed.schedule is None:
            slice_rows.append((name, replayed.metrics))
            continue
        rows.append((name, replayed.metrics))
        schedules[name] = replayed.schedule
    if plot and schedules and inst.has_slos:
        written.append(plots.save(slo_cdf_figure(inst, schedules),
                                  out_path(out_dir, inst.name, "slo-cdf.png")))
    if plot and schedules:
        written.append(plots.save(itl_cdf_figure(inst, schedules),
                                  out_path(out_dir, inst.name, "itl-cdf.png")))
    ceilings = policy_ceilings(inst, [name for name, _ in rows], ceiling_time_limit,
                               shown) if ceiling and rows else None
    shown.done()
    if rows:
        print_table(metrics_table(rows, ceilings))
        for table in latency_tables(rows):
            print_table(table)
        cache_table = prefix_table(rows)
        if cache_table is not None:
            print_table(cache_table)
    if ceilings is not None:
        for line in ceilings.lines():
            out.print(line, soft_wrap=True)
    if slice_rows:
        print_table(slice_metrics_table(slice_rows))
    for path in written:
        out.print(f"wrote {path}")
    for name, reason in failed:
        err.print(f"[bold red]error:[/] policy {name}: {escape(str(reason))}", markup=True,
                  soft_wrap=True)
    if failed:
        err.print(f"{len(failed)} of {len(names)} policies could not run this instance; the "
                  "others were replayed")
        raise typer.Exit(2)
    if ceilings is not None and ceilings.signalled:
        raise typer.Exit(130)  # everything written, the ceiling's best bound so far shown


def write_replay(inst: Instance, name: str, replayed: Replayed, out_dir: Path,
                 plot: bool) -> list[Path]:
    """The solution JSON (its schedule in a Parquet file beside it, or the slice schedule
    inline for a slice-level replay) and, with ``plot``, its chart; the paths written."""
    base = out_path(out_dir, inst.name, f"replay-{name}")
    path = write_solution(replayed.result, base.with_suffix(".json"), inst)
    written = [path]
    schedule = replayed.schedule
    if schedule is not None:
        written.append(path.parent / sidecar_name(path))
    if not plot:
        return written
    if schedule is not None:
        ax = plots.gantt_figure(inst, schedule.segments, schedule.iterations, policy=name,
                                metrics=replayed.metrics, requests=schedule.requests)
    else:
        assert replayed.slices is not None
        ax = plot_slices(replayed.slices)
    written.append(plots.save(ax, base.with_suffix(".png")))
    return written


def slice_metrics_table(rows: list[tuple[str, dict]]) -> Table:
    """The section 5 metrics of slice-level replays (times in s)."""
    table = Table(show_edge=False, header_style="bold", title="slice-level replays: times in s; "
                  "pad, invalid (tokens) and slices per request", title_justify="left")
    for head in ("policy", "req/s", "resp mean", "resp p95", "last end", "compl std",
                 "batch", "pad", "invalid", "slices"):
        table.add_column(head, justify="left" if head == "policy" else "right",
                         no_wrap=True)
    for name, m in rows:
        table.add_row(name, *[f"{m[k] / 1000:,.2f}" if k.endswith("_ms")
                              else f"{m[k]:,.2f}" if k in ("throughput_rps",
                                                           "slices_per_request")
                              else f"{m[k]:,.1f}" for k in LADDER_COLUMNS])
    return table
