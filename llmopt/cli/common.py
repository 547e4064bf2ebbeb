"""What every command shares: the consoles, the error policy, option types and small tables.

Error policy: a user's mistake (:class:`~llmopt.errors.LlmoptError`) prints one line ``error:
<file>: <field>: <value>: <reason>`` and exits 2; Ctrl-C exits 130; anything else is a bug in
llmopt: one line saying so, the traceback in a log file whose path it prints, exit 1. A warning
llmopt gives the user (an :class:`~llmopt.errors.LlmoptWarning`, e.g. a trace sorted by arrival)
prints as one line ``warning: <message>``, once per command.

Numeric options are checked with :func:`check_number`, output folders with
:func:`check_out_dir` before any work starts; :func:`write_solution` keeps a solution that cannot
be written where asked.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from typer.exceptions import TyperException

from llmopt.cli.usage import err
from llmopt.errors import LlmoptError, OptionError, one_line_warnings
from llmopt.files import write_atomic
from llmopt.policies.registry import POLICIES, ROUTERS
from llmopt.problems.registry import PROBLEMS
from llmopt.progress import ConsoleProgress
from llmopt.report.units import time_column
from llmopt.version import __version__

if TYPE_CHECKING:
    from llmopt.problems.workflows.ceiling import PolicyCeilings
    from llmopt.result import Result

# tables fit COLUMNS when set, else the terminal, else (a log, a pipe) 120 columns
out = Console(highlight=False, width=None if sys.stdout.isatty()
              or os.environ.get("COLUMNS", "").isdigit() else 120)

F = TypeVar("F", bound=Callable[..., Any])

InstanceArg = Annotated[Path, typer.Argument(help="Instance YAML file.", show_default=False)]
SolutionArg = Annotated[Path, typer.Argument(help="Solution JSON file.", show_default=False)]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the solver log.")]
TimeLimitOpt = Annotated[
    float | None,
    typer.Option("--time-limit", "-t", help="Seconds (default: the instance's, else 60)."),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Folder for outputs.")]


def command(fn: F) -> F:
    """Apply the error policy (see the module doc) to a command."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = one_line_warnings(
                    lambda line: err.print(f"[yellow]{escape(line)}[/]", markup=True,
                                           soft_wrap=True), warnings.showwarning)
                return fn(*args, **kwargs)
        except LlmoptError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except Exception as exc:
            log = write_crash_log()
            err.print(f"[bold red]internal error[/] (a bug in llmopt, not in your input): "
                      f"{type(exc).__name__}: {escape(str(exc))}; the traceback is in "
                      f"{escape(str(log))}",
                      markup=True, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def check_number(value: float | None, option: str, *, zero_ok: bool = False) -> None:
    """An option's number must be finite and positive (or 0 when ``zero_ok``); None passes."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        allowed = "0 or a positive" if zero_ok else "a positive"
        raise OptionError(f"must be {allowed}, finite number", field=option, value=value)


def check_out_dir(folder: Path, option: str = "--out") -> None:
    """The output folder exists, or its nearest existing ancestor does, as a writable folder;
    nothing is created."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise OptionError(f"{probe} is not a folder", field=option, value=str(folder))
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OptionError(f"{probe} is not writable", field=option, value=str(folder))


def write_or_print(text: str, path: Path | None) -> None:
    """``text`` into ``path`` (atomically, then "wrote PATH"), or to standard output."""
    if path:
        write_atomic(path, text)
        out.print(f"wrote {path}")
    else:
        sys.stdout.write(text)


def write_solution(result: Result, path: Path, instance: Any) -> Path:
    """``result.write`` to ``path``; if that fails, the whole solution (schedule inline) goes to
    a new file of the current folder and an OptionError says where."""
    try:
        return result.write(path, instance)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        text = json.dumps(result.to_dict(instance), indent=1, allow_nan=False) + "\n"
        try:
            fd, rescued = tempfile.mkstemp(prefix=f"llmopt-{path.stem}-", suffix=".json",
                                           dir=".")
            os.close(fd)
            write_atomic(Path(rescued), text)
        except OSError:
            sys.stdout.write(text)
            rescued = "standard output"
        raise OptionError(f"cannot write ({reason}); the solution was written to {rescued}",
                          field="--out", value=str(path)) from exc


def write_crash_log() -> str:
    """The current exception's traceback in a new file of the temporary folder; its path."""
    fd, path = tempfile.mkstemp(prefix="llmopt-crash-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        fh.write(f"llmopt {__version__}, command: {' '.join(sys.argv)}\n\n")
        fh.write(traceback.format_exc())
    return path


def progress(verbose: bool) -> ConsoleProgress:
    return ConsoleProgress(verbose=verbose)


def print_table(table: Table) -> None:
    """Print ``table`` on stdout without cutting a value: when it is wider than the console
    (COLUMNS, the terminal, or 120 columns), the widest columns wrap at spaces (headers, text)
    down to their longest word; the first column (the names) never narrows; a table that cannot
    fit even so is printed at its narrowest, wider than the console."""
    wide = out.options.update_width(1_000_000)
    floors, widths = [], []
    for k, column in enumerate(table.columns):
        sizes = [Measurement.get(out, wide, cell) for cell in [column.header, *column.cells]]
        widths.append(max(m.maximum for m in sizes))
        floors.append(widths[-1] if k == 0 else max(m.minimum for m in sizes))
    spare = Measurement.get(out, wide, table).maximum - sum(widths)  # padding and rules
    excess = sum(widths) + spare - out.width
    if excess <= 0:
        out.print(table)
        return
    while excess > 0:
        narrower = [k for k in range(len(widths)) if widths[k] > floors[k]]
        if not narrower:
            break
        widths[max(narrower, key=lambda k: widths[k])] -= 1
        excess -= 1
    for column, width in zip(table.columns, widths, strict=True):
        column.width, column.no_wrap = width, False
    saved = out.width
    out.width = max(saved, sum(widths) + spare)
    try:
        out.print(table)
    finally:
        out.width = saved


CEILING_GAP = "to ceiling (pts)"  # the SLO ceiling's share − attainment, percentage points


def fmt_ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def metrics_table(rows: list[tuple[str, dict[str, Any]]],
                  ceilings: PolicyCeilings | None = None) -> Table:
    """Replay metrics, with the SLO attainment columns when the instance has SLOs and, with
    ``ceilings``, each policy's gap to the ceiling that holds for it (ceiling − attainment, in
    percentage points); each time column in ms or s by the one rule of
    ``llmopt.report.units``."""
    times = [time_column(name, [m[key] for _, m in rows])
             for name, key in (("total", "makespan_ms"), ("TTFT p50", "ttft_p50_ms"),
                               ("TPOT p50", "tpot_p50_ms"), ("E2E p99", "e2e_p99_ms"))]
    slo = any("attainment" in m for _, m in rows)
    gaps = {name: _gap(ceilings, name, m.get("attainment")) for name, m in rows} \
        if slo and ceilings is not None else {}
    slo_cols: tuple[str, ...] = ("SLO met", "TTFT met", "TPOT met") if slo else ()
    slo_cols += (CEILING_GAP,) if any(g != "—" for g in gaps.values()) else ()
    (total, totals), (ttft, ttfts), (tpot, tpots), (e2e, e2es) = times
    table = Table(show_edge=False, header_style="bold")
    for col in ("policy", total, "utilization", "tokens/s", ttft, tpot, e2e, "iterations",
                *slo_cols):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for k, (name, m) in enumerate(rows):
        shares = [_share(m.get(key)) for key in ("attainment", "attainment_ttft",
                                                 "attainment_tpot")] if slo else []
        shares += [gaps[name]] if CEILING_GAP in slo_cols else []
        table.add_row(name, totals[k], f"{m['utilization']:.2%}", f"{m['tokens_per_s']:.1f}",
                      ttfts[k], tpots[k], e2es[k], f"{m['iterations']:,}", *shares)
    return table


def _gap(ceilings: PolicyCeilings, name: str, attainment: float | None) -> str:
    found = ceilings.for_schedule(name)
    if found is None or attainment is None:
        return "—"
    return f"{100 * (found.share - attainment):.1f}"


def latency_tables(rows: list[tuple[str, dict[str, Any]]]) -> list[Table]:
    """The rates and latency distributions of replays: requests per second, with SLOs the
    run's goodput (requests meeting their SLO per second), queueing delay (arrival to first
    scheduled) and inter-token latency (ITL) percentiles; TTFT, TPOT and E2E at p90 and
    p95."""
    goodput = any("goodput_rps" in m for _, m in rows)
    layouts = [
        ("rates (req/s); queueing delay and inter-token latency (ms)",
         [("req/s", "requests_per_s"), *((("goodput", "goodput_rps"),) if goodput else ()),
          ("queue p50", "queue_p50_ms"), ("queue p95", "queue_p95_ms"),
          ("queue p99", "queue_p99_ms"), ("ITL p50", "itl_p50_ms"), ("ITL p95", "itl_p95_ms"),
          ("ITL p99", "itl_p99_ms")]),
        ("latency percentiles: TTFT and TPOT in ms, E2E in s",
         [("TTFT p90", "ttft_p90_ms"), ("TTFT p95", "ttft_p95_ms"),
          ("TPOT p90", "tpot_p90_ms"), ("TPOT p95", "tpot_p95_ms"),
          ("E2E p90", "e2e_p90_ms"), ("E2E p95", "e2e_p95_ms")])]
    tables = []
    for title, columns in layouts:
        table = Table(show_edge=False, header_style="bold", title=title, title_justify="left")
        table.add_column("policy", no_wrap=True)
        for header, _ in columns:
            table.add_column(header, justify="right", no_wrap=True)
        for name, m in rows:
            table.add_row(name, *(_rate_or_ms(key, m.get(key)) for _, key in columns))
        tables.append(table)
    return tables


def prefix_table(rows: list[tuple[str, dict[str, Any]]]) -> Table | None:
    """With a prefix cache: each replay's hit rates (prompt tokens and full blocks found cached
    at the requests' first admissions), the prefill tokens the hits spared (refills included)
    and the preemptions; None without one."""
    if not any("prefix_hit_rate_tokens" in m for _, m in rows):
        return None
    table = Table(show_edge=False, header_style="bold", title="prefix cache",
                  title_justify="left")
    for col in ("policy", "hit rate (tokens)", "hit rate (blocks)", "prefill tokens saved",
                "preemptions"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, m in rows:
        table.add_row(name, _share(m.get("prefix_hit_rate_tokens")),
                      _share(m.get("prefix_hit_rate_blocks")),
                      f"{int(m.get('prefill_tokens_saved', 0)):,}", f"{int(m['evictions']):,}")
    return table


def _rate_or_ms(key: str, value: float | None) -> str:
    if value is None:
        return "—"
    if key.startswith("e2e_"):
        return f"{value / 1000:,.2f}"
    return f"{value:,.2f}" if key.endswith(("_per_s", "_rps")) else fmt_ms(value)


def problem_help() -> str:
    from_registry = "; ".join(f"{p.name} ({p.paper}, {p.equations})" for p in PROBLEMS.values())
    return (f"One of: {from_registry}. Default: the instance's (solve.problem), else the first "
            "of its profile family's.")


def solver_help() -> str:
    return "; ".join(f"{p.name}: {' | '.join(p.solvers)}" for p in PROBLEMS.values()) + \
        " (the first is the default)."


def policy_help() -> str:
    families: dict[str, list[str]] = {}
    for p in POLICIES.values():
        families.setdefault(p.family, []).append(p.name)
    listed = "; ".join(f"{family}: {', '.join(names)}" for family, names in families.items())
    return f"Comma-separated policies ({listed}). `llmopt list policies` describes them."


def router_help() -> str:
    return ("Router of multi-replica systems: " + ", ".join(ROUTERS)
            + " (default: the policy's own; round-robin without an assignment).")
