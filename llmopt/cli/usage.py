"""Usage errors on one line (the command group's), and the error console every command
prints to; light, so that ``llmopt --help`` imports little."""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup
from typer.exceptions import TyperException

err = Console(stderr=True, highlight=False)


class OneLineUsageErrors(TyperGroup):
    """The command group whose usage errors (unknown option, a value that does not parse, a
    missing argument) print as one line ``error: <option>: value <value>: <reason>`` and exit 2,
    like every other user mistake, instead of the usage and a framed message."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except TyperException as exc:
            _usage_error(exc, args)
        ctx.meta["llmopt.args"] = list(args)
        return ctx

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except TyperException as exc:
            _usage_error(exc, ctx.meta.get("llmopt.args", []))


def _usage_error(exc: TyperException, args: list[str]) -> NoReturn:
    """Print a usage error on one line and exit 2 (``--help`` for no arguments passes)."""
    if type(exc).__name__ == "NoArgsIsHelpError" or getattr(exc, "exit_code", 2) != 2:
        raise exc
    message = " ".join(exc.format_message().split())
    param = getattr(exc, "param", None)
    opts = list(getattr(param, "opts", None) or [])
    if opts and message.startswith("Invalid value for "):
        message = message.split(": ", 1)[-1]
        shown = ", ".join(o for o in opts if o.startswith("--")) or opts[0]
        value = _option_value(args, opts)
        message = f"{shown}: " + (f"value {value!r}: " if value is not None else "") + message
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(2) from None


def _option_value(args: list[str], opts: list[str]) -> str | None:
    """The last value given to an option in ``args`` (``--opt value`` or ``--opt=value``)."""
    value = None
    for i, arg in enumerate(args):
        if arg in opts and i + 1 < len(args):
            value = args[i + 1]
        for opt in opts:
            if arg.startswith(opt + "="):
                value = arg[len(opt) + 1:]
    return value


__all__ = ["OneLineUsageErrors", "err"]
