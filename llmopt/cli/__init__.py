"""Command-line interface: one small module per command, each a thin layer over the public API;
choices and help come from the registries. Error policy: ``common.command``.

A command's module is imported when the command runs, not before: ``llmopt --help`` reads the
commands' help from their modules' source, so that listing them imports no solver, engine or
plotting library."""

from __future__ import annotations

import ast
import importlib
import warnings
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand

from llmopt.cli.usage import OneLineUsageErrors, err
from llmopt.errors import one_line_warnings
from llmopt.signals import sigterm_as_interrupt
from llmopt.version import __version__

#: command -> (module, attribute): a command function, or a Typer app of subcommands
COMMANDS: dict[str, tuple[str, str]] = {
    "solve": ("llmopt.cli.solve", "solve"),
    "bound": ("llmopt.cli.bound", "bound"),
    "validate": ("llmopt.cli.validate", "validate"),
    "replay": ("llmopt.cli.replay", "replay"),
    "compare": ("llmopt.cli.compare", "compare"),
    "gantt": ("llmopt.cli.gantt", "gantt"),
    "fit-profile": ("llmopt.cli.fit_profile", "fit_profile"),
    "list": ("llmopt.cli.listing", "list_"),
    "sweep": ("llmopt.cli.sweep", "app"),
    "profile": ("llmopt.cli.profile", "app"),
}


class LazyCommands(OneLineUsageErrors):
    """The command group whose commands load when they are run (their help, when listed, is
    read from their modules' source)."""

    listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if self.listing:
            return TyperCommand(cmd_name, help=help_text(cmd_name))
        return loaded(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


def loaded(name: str) -> Any:
    """The click command of ``name``, its module imported."""
    module, attribute = COMMANDS[name]
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        return typer.main.get_group(target)
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    one.command(name)(target)
    return typer.main.get_command(one)


@cache
def help_text(name: str) -> str:
    """A command's help as typer gives it (its function's docstring, or its Typer's help),
    read from the module's source without importing it."""
    module, attribute = COMMANDS[name]
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == attribute:
            return ast.get_docstring(node) or ""
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == attribute for t in node.targets) \
                and isinstance(node.value, ast.Call):
            for keyword in node.value.keywords:
                if keyword.arg == "help":
                    help_: Any = ast.literal_eval(keyword.value)
                    return str(help_)
    return ""


app = typer.Typer(
    name="llmopt",
    cls=LazyCommands,
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


def main() -> None:
    sigterm_as_interrupt()
    # llmopt's warnings as one line, those given while a command loads (a package's broken
    # entry point) too; each command does the same while it runs (common.command)
    warnings.showwarning = one_line_warnings(lambda line: err.print(line, markup=False,
                                                                    soft_wrap=True),
                                             warnings.showwarning)
    app()


__all__ = ["COMMANDS", "app", "main"]
