"""Command-line interface: a thin layer over the public API.

User mistakes (bad files, fields, values, options) print one line ``error: <file>: <field>:
<value>: <reason>`` on stderr and exit with code 2, without a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from typer.exceptions import TyperException

from llmopt import __version__
from llmopt.errors import LlmoptError

app = typer.Typer(
    name="llmopt",
    help="Optimal schedules, proven lower bounds and heuristic replays for LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])

InstanceArg = Annotated[Path, typer.Argument(help="Instance YAML file.", show_default=False)]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the solver log.")]
TimeLimitOpt = Annotated[
    float | None,
    typer.Option("--time-limit", "-t", help="Seconds (default: the instance's, else 60)."),
]


def user_errors(fn: F) -> F:
    """Turn :class:`LlmoptError` into one line on stderr and exit code 2; any other exception
    is a bug: one line saying so, the traceback in a log file, exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LlmoptError as exc:
            err.print(f"[bold red]error:[/] {exc}", markup=True, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except Exception as exc:
            log = _write_crash_log()
            err.print(f"[bold red]internal error[/] (a bug in llmopt, not in your input): "
                      f"{type(exc).__name__}: {exc}; the traceback is in {log}",
                      markup=True, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _write_crash_log() -> str:
    """The current exception's traceback in a new file of the temporary folder; its path."""
    fd, path = tempfile.mkstemp(prefix="llmopt-crash-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        fh.write(f"llmopt {__version__}, command: {' '.join(sys.argv)}\n\n")
        fh.write(traceback.format_exc())
    return path


def _progress(verbose: bool):
    from llmopt.progress import ConsoleProgress

    return ConsoleProgress(verbose=verbose)


def _fmt_ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


@app.command()
@user_errors
def solve(
    instance: InstanceArg,
    problem: Annotated[str | None, typer.Option(
        "--problem", "-p", help="binpacking | pd-competition")] = None,
    solver: Annotated[
        str | None, typer.Option("--solver", "-s", help="auto | highs | cpsat | heuristic")
    ] = None,
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
        "solutions"
    ),
    plot: Annotated[bool, typer.Option(help="Also write a PNG chart.")] = True,
    verbose: VerboseOpt = False,
) -> None:
    """Solve a problem on an instance; write the solution JSON (and a PNG) under
    OUT/<instance name>/<problem>-<solver>.*"""
    from llmopt.data.instance import load_instance
    from llmopt.problems.api import resolve_options
    from llmopt.problems.api import solve as run_solve

    inst = load_instance(instance)
    problem, solver, time_limit = resolve_options(inst, problem, solver, time_limit)
    options = {"formulation": formulation, "bins": bins, "time_model": time_model,
               "literal": True if literal else None, "cuts": False if no_cuts else None}
    result = run_solve(inst, problem, solver, time_limit, progress=_progress(verbose),
                       **options)
    table = Table(show_edge=False, header_style="bold")
    for col in ("problem", "solver", "status", "objective (ms)", "bound (ms)", "gap", "runtime"):
        table.add_column(col, justify="right" if col not in ("problem", "solver") else "left",
                         no_wrap=True)
    gap = result.gap
    table.add_row(result.problem, result.solver, result.status, _fmt_ms(result.objective),
                  _fmt_ms(result.bound), "—" if gap is None else f"{gap:.2%}",
                  f"{result.runtime_s:.2f} s")
    out.print(table)
    if result.proof:
        out.print(f"proof: {result.proof}")
    for note in result.notes:
        out.print(f"note: {note}")
    if "objective_replay_ms" in result.data:
        d = result.data
        out.print(f"{d['prefill_stages']} prefill stages, {d['decode_rounds']} decode rounds; "
                  f"stage model {_fmt_ms(d['objective_stage_model_ms'])} ms, replayed with "
                  f"batch-dependent rounds {_fmt_ms(d['objective_replay_ms'])} ms")
        out.print("heuristics: " + ", ".join(f"{k} {_fmt_ms(v)}" for k, v in
                                               d["heuristics"].items()))
    if result.interrupted:
        out.print("interrupted: the incumbent and the bound so far are kept")
    base = out_dir / inst.name / f"{result.problem}-{result.solver}"
    path = result.write(base.with_suffix(".json"), inst)
    out.print(f"wrote {path}")
    if plot and (result.schedule is not None or result.data.get("assignment")):
        from llmopt.report import plot as plots

        if result.schedule is not None:
            ax = plots.gantt_figure(inst, result.schedule.segments, result.schedule.iterations,
                                    policy=f"{result.problem} ({result.solver})",
                                    metrics=result.data.get("metrics"))
        else:
            ax = plots.plot_assignment(inst, result.to_dict(inst))
        out.print(f"wrote {plots.save(ax, base.with_suffix('.png'))}")
    if result.status == "error":
        raise typer.Exit(1)


@app.command()
@user_errors
def bound(
    instance: InstanceArg,
    time_limit: TimeLimitOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    solver_bounds: Annotated[bool, typer.Option(
        "--solvers/--no-solvers", help="Also the LP relaxation of eqs 1–25 and CP-SAT's bounds "
        "on the compact model (small instances).")] = True,
    verbose: VerboseOpt = False,
) -> None:
    """Lower bounds on the total inference time, with their parts and validity."""
    from llmopt.data.instance import load_instance
    from llmopt.problems.pang.bounds import pang_bounds
    from llmopt.problems.pang.solver_bounds import pd_solver_bounds
    from llmopt.progress import SILENT

    inst = load_instance(instance)
    limit = time_limit or inst.solve.time_limit_s or 60.0
    progress = SILENT if as_json else _progress(verbose)
    bounds = pang_bounds(inst, limit, progress)
    if solver_bounds:
        bounds += pd_solver_bounds(inst, min(limit, 30.0), progress)
    progress.done()
    if as_json:
        payload = {"instance": inst.name, "instance_sha256": inst.sha256, "units": "ms",
                   "bounds": [b.to_dict() for b in bounds]}
        sys.stdout.write(json.dumps(payload, indent=1) + "\n")
        return
    d = bounds[0].detail
    table = Table(title=f"Lower bounds on total inference time for {inst.name}",
                  show_edge=False, header_style="bold", title_justify="left")
    for col, justify in (("bound", "left"), ("ms", "right"), ("t_p", "right"),
                         ("t_d", "right"), ("valid under", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for b in bounds:
        table.add_row(b.name, _fmt_ms(b.value_ms), _fmt_ms(b.parts.get("t_p")),
                      _fmt_ms(b.parts.get("t_d")), b.valid_under)
    for model in ("stage", "replay"):
        valid = [b for b in bounds if b.time_model == model]
        if valid:
            best = max(valid, key=lambda b: b.value_ms)
            table.add_row(f"best ({model} model)", _fmt_ms(best.value_ms), "", "",
                          f"= {best.name}", style="bold")
    out.print(table)
    out.print(f"t_p (eq 31) = T^p_L {d['largest_level_ms']:,.2f} ms × "
              f"ceil({d['total_input_tokens']:,} / {d['largest_level_tokens']:,}) = "
              f"{d['prefill_stages']} stages; t_d = {d['t_d_source']} (eqs 26–30) at "
              f"t_round {d['t_round_ms']} ms")


@app.command()
@user_errors
def validate(
    instance: InstanceArg,
    solution: Annotated[Path, typer.Argument(help="Solution JSON file.", show_default=False)],
) -> None:
    """Check a solution against its instance with code independent of the solvers.
    Exit 0 when valid, 1 (with the reasons) when not."""
    from llmopt.data.instance import load_instance
    from llmopt.result import read_solution
    from llmopt.validate import check_solution

    inst = load_instance(instance)
    sol = read_solution(solution)
    verdict = check_solution(inst, sol)
    if verdict.reasons:
        out.print(f"[bold red]invalid[/]: {solution}", soft_wrap=True)
        for r in verdict.reasons:
            out.print(f"  - {r}", soft_wrap=True)
        raise typer.Exit(1)
    objective = sol.get("objective")
    shown = f"objective {objective:,.1f} ms" if isinstance(objective, int | float) \
        else "no objective"
    out.print(f"[bold green]valid[/]: {solution} ({sol['problem']}, {sol['status']}, "
              f"{shown})", soft_wrap=True)
    for note in verdict.notes:
        out.print(f"note: {note}", soft_wrap=True)


PolicyOpt = Annotated[
    str, typer.Option("--policy", "--policies", help="Comma-separated policies: baseline, "
                      "offline, online, iteration, hybrid, plan.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Folder for outputs.")]


def _policies(text: str) -> list[str]:
    from llmopt.errors import OptionError
    from llmopt.policies.registry import policy_names

    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in policy_names()]
    if unknown or not names:
        raise OptionError(f"unknown policy (known: {', '.join(policy_names())})",
                          field="--policy", value=unknown[0] if unknown else text)
    return names


def _metrics_table(rows: list[tuple[str, dict[str, Any]]]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for col in ("policy", "total (s)", "utilization", "tokens/s", "TTFT p50 (s)",
                "TPOT p50 (ms)", "E2E p99 (s)", "iterations"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, m in rows:
        table.add_row(name, f"{m['makespan_ms'] / 1000:.2f}", f"{m['utilization']:.2%}",
                      f"{m['tokens_per_s']:.1f}", f"{m['ttft_p50_ms'] / 1000:.2f}",
                      f"{m['tpot_p50_ms']:.1f}", f"{m['e2e_p99_ms'] / 1000:.2f}",
                      f"{m['iterations']:,}")
    return table


@app.command()
@user_errors
def replay(
    instance: InstanceArg,
    policy: PolicyOpt = "baseline,offline,online,hybrid",
    plan: Annotated[Path | None, typer.Option(help="Solution JSON whose plan policy "
                                              "'plan' replays.")] = None,
    out_dir: OutOpt = Path("solutions"),
    plot: Annotated[bool, typer.Option(help="Also write Gantt charts.")] = True,
    verbose: VerboseOpt = False,
) -> None:
    """Replay policies (and solver plans) through the iteration-level engine; write one solution
    JSON (with segments and metrics) and one Gantt chart per policy."""
    from llmopt.data.instance import load_instance
    from llmopt.policies.replay import replay_result
    from llmopt.result import read_solution

    inst = load_instance(instance)
    names = _policies(policy)
    plan_data = read_solution(plan) if plan else None
    progress = _progress(verbose)
    rows, written = [], []
    for name in names:
        result, schedule = replay_result(inst, name, plan=plan_data, progress=progress)
        progress.done()
        rows.append((name, result.data["metrics"]))
        base = out_dir / inst.name / f"replay-{name}"
        written.append(result.write(base.with_suffix(".json"), inst))
        if plot:
            from llmopt.report import plot as plots

            ax = plots.gantt_figure(inst, schedule.segments, schedule.iterations, policy=name,
                                    metrics=result.data["metrics"])
            written.append(plots.save(ax, base.with_suffix(".png")))
    out.print(_metrics_table(rows))
    for path in written:
        out.print(f"wrote {path}")


@app.command()
@user_errors
def compare(
    instance: InstanceArg,
    policy: PolicyOpt = "baseline,offline,online,iteration,hybrid",
    time_limit: TimeLimitOpt = None,
    optimize: Annotated[bool, typer.Option(
        help="Also solve the PD-competition problem under the replay's time model.")] = True,
    out_dir: OutOpt = Path("solutions"),
    verbose: VerboseOpt = False,
) -> None:
    """Replay policies beside the best schedule llmopt finds and the lower bounds; write
    compare.md, compare.csv, compare.png."""
    from llmopt.data.instance import load_instance
    from llmopt.files import write_atomic
    from llmopt.report import plot as plots
    from llmopt.report.compare import compare as run_compare

    inst = load_instance(instance)
    names = _policies(policy)
    progress = _progress(verbose)
    comp = run_compare(inst, names, time_limit or inst.solve.time_limit_s or 60.0, progress,
                       optimize=optimize)
    progress.done()
    folder = out_dir / inst.name
    md = comp.markdown()
    write_atomic(folder / "compare.md", f"# {inst.name}: schedules compared\n\n{md}")
    write_atomic(folder / "compare.csv", comp.table.to_csv(index=False))
    best = comp.best_bound
    ax = plots.plot_comparison(comp.table, best.value_ms if best else None,
                               title=f"{inst.name}: total inference time by schedule")
    plots.save(ax, folder / "compare.png")
    out.print(md)
    for name in ("compare.md", "compare.csv", "compare.png"):
        out.print(f"wrote {folder / name}")


@app.command()
@user_errors
def gantt(
    instance: InstanceArg,
    solution: Annotated[Path, typer.Argument(help="Solution JSON file.", show_default=False)],
    png: Annotated[Path | None, typer.Option("--out", help="PNG path (default: beside the "
                                             "solution).")] = None,
) -> None:
    """Draw a solution: a Gantt chart with KV memory for schedules, the per-client assignment
    for bin packing."""
    from llmopt.data.instance import load_instance
    from llmopt.errors import SolutionFileError
    from llmopt.report import plot as plots
    from llmopt.result import read_solution
    from llmopt.schedule import Schedule

    inst = load_instance(instance)
    sol = read_solution(solution)
    png = png or solution.with_suffix(".png")
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


@app.command("fit-profile")
@user_errors
def fit_profile(
    csv: Annotated[Path, typer.Argument(help="Vidur-style per-operator profiling CSV.",
                                        show_default=False)],
    name: Annotated[str, typer.Option(help="Profile name.")],
    layers: Annotated[int, typer.Option(help="Transformer layers.")],
    q_heads: Annotated[int, typer.Option(help="Attention (query) heads.")],
    kv_heads: Annotated[int, typer.Option(help="KV heads (= q-heads without GQA).")],
    head_dim: Annotated[int, typer.Option(help="Dimensions per head.")] = 128,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs.")] = 1,
    hbm_tb_s: Annotated[float, typer.Option(help="HBM bandwidth per GPU, TB/s.")] = 2.039,
    peak_tflops: Annotated[float, typer.Option(help="Peak FP16 TFLOP/s per GPU.")] = 312.0,
    per_prefill_request_ms: Annotated[float, typer.Option()] = 0.02,
    kv_capacity: Annotated[int | None, typer.Option(help="M, KV tokens.")] = None,
    max_batch_tokens: Annotated[int | None, typer.Option(help="C, tokens per batch.")] = None,
    source: Annotated[str, typer.Option(help="Where the profiling data come from.")] = "",
    out_file: Annotated[Path | None, typer.Option("--out", help="YAML file to write.")] = None,
) -> None:
    """Build an InferMax cost profile: the non-attention line fitted to a profiling CSV, the
    attention terms from a roofline estimate, the derivation written into the profile."""
    import yaml

    from llmopt.data.cost import profile_from_mapping
    from llmopt.data.cost.fit import infermax_profile_from_profiling
    from llmopt.files import write_atomic

    data = infermax_profile_from_profiling(
        csv, name=name, layers=layers, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
        tensor_parallel=tp, hbm_tb_s=hbm_tb_s, peak_tflops=peak_tflops,
        per_prefill_request_ms=per_prefill_request_ms, kv_capacity=kv_capacity,
        max_batch_tokens=max_batch_tokens, source=source or f"fitted to {csv.name}")
    profile_from_mapping(data, file=csv)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=96)
    if out_file:
        write_atomic(out_file, text)
        out.print(f"wrote {out_file}")
    else:
        sys.stdout.write(text)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
