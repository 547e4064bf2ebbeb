"""What every command shares: the consoles, the error policy, option types and small tables.

Error policy: a user's mistake (:class:`~llmopt.errors.LlmoptError`) prints one line ``error:
<file>: <field>: <value>: <reason>`` and exits 2; Ctrl-C exits 130; anything else is a bug in
llmopt: one line saying so, the traceback in a log file whose path it prints, exit 1.
"""

from __future__ import annotations

import functools
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

from llmopt.errors import LlmoptError
from llmopt.policies.registry import POLICIES, ROUTERS
from llmopt.problems.registry import PROBLEMS
from llmopt.progress import ConsoleProgress
from llmopt.version import __version__

out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, highlight=False)

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
            log = write_crash_log()
            err.print(f"[bold red]internal error[/] (a bug in llmopt, not in your input): "
                      f"{type(exc).__name__}: {exc}; the traceback is in {log}",
                      markup=True, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def write_crash_log() -> str:
    """The current exception's traceback in a new file of the temporary folder; its path."""
    fd, path = tempfile.mkstemp(prefix="llmopt-crash-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        fh.write(f"llmopt {__version__}, command: {' '.join(sys.argv)}\n\n")
        fh.write(traceback.format_exc())
    return path


def progress(verbose: bool) -> ConsoleProgress:
    return ConsoleProgress(verbose=verbose)


def fmt_ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def metrics_table(rows: list[tuple[str, dict[str, Any]]]) -> Table:
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


def problem_help() -> str:
    from_registry = "; ".join(f"{p.name} ({p.paper}, {p.equations})" for p in PROBLEMS.values())
    return f"One of: {from_registry}. Default: the instance's, else binpacking."


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
