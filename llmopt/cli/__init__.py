"""Command-line interface: one small module per command, each a thin layer over the public API;
choices and help come from the registries. Error policy: ``common.command``."""

from __future__ import annotations

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

app = typer.Typer(
    name="llmopt",
    cls=OneLineUsageErrors,
    help="Optimal schedules, proven lower bounds and heuristic replays for LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
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
