"""``llmopt list``: what llmopt knows, from its registries (problems, policies, routers, cost
profiles, bundled example instances)."""

from __future__ import annotations

import sys
from importlib.resources import files
from typing import Annotated

import typer
from rich.table import Table

from llmopt.cli.common import command, print_table
from llmopt.data.cost import available_profiles, load_profile
from llmopt.data.trace_formats import TRACE_FORMATS
from llmopt.errors import LlmoptError, OptionError
from llmopt.policies.registry import POLICIES, ROUTERS
from llmopt.problems.registry import FAMILIES, PROBLEMS

WHAT = ("problems", "policies", "routers", "traces", "profiles", "examples")


@command
def list_(
    what: Annotated[str | None, typer.Argument(
        help=f"One of: {', '.join(WHAT)} (default: all).", show_default=False)] = None,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="As markdown tables (without WHAT: problems, policies, routers and "
        "trace formats, the text of the docs).")
    ] = False,
) -> None:
    """List the problems, policies, routers, trace formats, cost profiles and example
    instances llmopt knows, with the paper and section each implements."""
    if what is not None and what not in WHAT:
        raise OptionError(f"must be one of {', '.join(WHAT)}", field="WHAT", value=what)
    if markdown:
        sys.stdout.write(registry_markdown(what))
        return
    for table in tables(what):
        print_table(table)


def rows(what: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of one listing (``what`` in WHAT)."""
    if what == "problems":
        return (["problem", "profile family", "paper", "equations", "solvers", "what"],
                [[f"`{p.name}`", p.family, p.paper, p.equations, ", ".join(p.solvers),
                  p.summary] for p in PROBLEMS.values()])
    if what == "policies":
        return (["policy", "profile family", "paper", "where", "what"],
                [[f"`{p.name}`", p.family, p.paper, p.where, p.summary]
                 for p in POLICIES.values()])
    if what == "routers":
        return ["router", "what"], [[f"`{r.name}`", r.summary] for r in ROUTERS.values()]
    if what == "traces":
        return (["trace format", "source", "columns"],
                [[f"`{t.name}`", t.source, t.columns] for t in TRACE_FORMATS.values()])
    if what == "profiles":
        found = []
        for name in available_profiles():
            try:
                family = load_profile(name).family
            except LlmoptError as exc:  # one bad file in a models folder spoils no listing
                found.append([f"`{name}`", "—", f"cannot be read: {exc}", "—"])
                continue
            info = FAMILIES.get(family)
            problems = ", ".join(p.name for p in PROBLEMS.values() if p.family == family)
            found.append([f"`{name}`", family, info.summary if info else "—", problems or "—"])
        return ["profile", "family", "bounds of its family (llmopt bound)", "problems"], found
    folder = files("llmopt.data") / "examples"
    return (["example instance (package data)"],
            [[str(path)] for path in sorted(folder.iterdir(), key=lambda p: p.name)
             if path.name.endswith(".yaml")])


def registry_markdown(what: str | None = None) -> str:
    """One listing as a markdown table; without ``what``, the registries' four (the docs
    carry this text)."""
    chosen = [what] if what else ["problems", "policies", "routers", "traces"]
    lines: list[str] = []
    for name in chosen:
        header, body = rows(name)
        if lines:
            lines.append("")
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def tables(what: str | None = None) -> list[Table]:
    made = []
    for name in [what] if what else list(WHAT):
        table = Table(title=name, title_justify="left", show_edge=False, header_style="bold")
        header, body = rows(name)
        for col in header:
            table.add_column(col)
        for row in body:
            table.add_row(*(cell.strip("`") for cell in row))
        made.append(table)
    return made
