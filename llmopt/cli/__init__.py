"""Command-line interface: one small module per command, each a thin layer over the public API;
choices and help come from the registries. Error policy: ``common.command``."""

from __future__ import annotations

from typing import Annotated

import typer

from llmopt.cli import (
    bound,
    compare,
    fit_profile,
    gantt,
    listing,
    profile,
    replay,
    solve,
    sweep,
    validate,
)
from llmopt.cli.common import OneLineUsageErrors
from llmopt.signals import sigterm_as_interrupt
from llmopt.version import __version__

app = typer.Typer(
    name="llmopt",
    cls=OneLineUsageErrors,
    help="Optimal schedules, proven lower bounds and heuristic replays for LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"llmopt {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print llmopt's version and exit.")] = False) -> None:
    """Optimal schedules, proven lower bounds and heuristic replays for LLM inference."""


app.command()(solve.solve)
app.command()(bound.bound)
app.command()(validate.validate)
app.command()(replay.replay)
app.command()(compare.compare)
app.command()(gantt.gantt)
app.command("fit-profile")(fit_profile.fit_profile)
app.command("list")(listing.list_)
app.add_typer(sweep.app, name="sweep")
app.add_typer(profile.app, name="profile")


def main() -> None:
    sigterm_as_interrupt()
    app()


__all__ = ["app", "main"]
