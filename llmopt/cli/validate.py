"""``llmopt validate``: check a solution against its instance with code independent of the
solvers (``llmopt.validate``)."""

from __future__ import annotations

from typing import NoReturn

import typer

from llmopt.cli.common import InstanceArg, SolutionArg, command, out
from llmopt.data.instance import load_instance
from llmopt.errors import SolutionFileError
from llmopt.result import read_solution
from llmopt.validate import check_solution


@command
def validate(instance: InstanceArg, solution: SolutionArg) -> None:
    """Check a solution against its instance with code independent of the solvers. Exit 0
    when valid (with notes on what was not independently checked), 1 with the reasons (a
    JSON object that is no solution file, e.g. without its contract keys or with a schedule
    file changed since, included); 2 when a file cannot be read at all."""
    inst = load_instance(instance)
    try:
        sol = read_solution(solution)
    except SolutionFileError as exc:
        _invalid(solution, [str(exc)])
    verdict = check_solution(inst, sol)
    if verdict.reasons:
        _invalid(solution, verdict.reasons)
    objective = sol.get("objective")
    shown = f"objective {objective:,.1f} ms" if isinstance(objective, int | float) \
        else "no objective"
    out.print(f"[bold green]valid[/]: {solution} ({sol['problem']}, {sol['status']}, "
              f"{shown})", soft_wrap=True)
    for note in verdict.notes:
        out.print(f"note: {note}", soft_wrap=True)


def _invalid(solution: object, reasons: list[str]) -> NoReturn:
    out.print(f"[bold red]invalid[/]: {solution}", soft_wrap=True)
    for r in reasons:
        out.print(f"  - {r}", soft_wrap=True)
    raise typer.Exit(1)
