"""``llmopt list``: what llmopt knows, from its registries (problems, policies, routers, cost
profiles, bundled example instances)."""

from __future__ import annotations

import sys
from importlib.resources import files
from typing import Annotated

import typer
from rich.table import Table

from llmopt.cli.common import command, out
from llmopt.data.cost import available_profiles
from llmopt.data.traces import TRACE_FORMATS
from llmopt.errors import OptionError
from llmopt.policies.registry import POLICIES, ROUTERS
from llmopt.problems.registry import FAMILIES, PROBLEMS

WHAT = ("problems", "policies", "routers", "traces", "profiles", "examples")


@command
def list_(
    what: Annotated[str | None, typer.Argument(
        help=f"One of: {', '.join(WHAT)} (default: all).", show_default=False)] = None,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Problems, policies, routers and trace formats as the markdown of "
        "the docs.")
    ] = False,
) -> None:
    """List the problems, policies, routers, trace formats, cost profiles and example
    instances llmopt knows, with the paper and section each implements."""
    if what is not None and what not in WHAT:
        raise OptionError(f"must be one of {', '.join(WHAT)}", field="WHAT", value=what)
    if markdown:
        sys.stdout.write(registry_markdown())
        return
    for table in tables(what):
        out.print(table)


def registry_markdown() -> str:
    """The registries as markdown tables (the docs carry this text)."""
    lines = ["| problem | profile family | paper | equations | solvers | what |",
             "|---|---|---|---|---|---|"]
    lines += [f"| `{p.name}` | {p.family} | {p.paper} | {p.equations} | "
              f"{', '.join(p.solvers)} | {p.summary} |" for p in PROBLEMS.values()]
    lines += ["", "| policy | profile family | paper | where | what |", "|---|---|---|---|---|"]
    lines += [f"| `{p.name}` | {p.family} | {p.paper} | {p.where} | {p.summary} |"
              for p in POLICIES.values()]
    lines += ["", "| router | what |", "|---|---|"]
    lines += [f"| `{r.name}` | {r.summary} |" for r in ROUTERS.values()]
    lines += ["", "| trace format | source | columns |", "|---|---|---|"]
    lines += [f"| `{t.name}` | {t.source} | {t.columns} |" for t in TRACE_FORMATS.values()]
    return "\n".join(lines) + "\n"


def tables(what: str | None = None) -> list[Table]:
    chosen = [what] if what else list(WHAT)
    made = []
    for name in chosen:
        table = Table(title=name, title_justify="left", show_edge=False, header_style="bold")
        if name == "problems":
            for col in ("problem", "profile family", "paper", "equations", "solvers", "what"):
                table.add_column(col)
            for p in PROBLEMS.values():
                table.add_row(p.name, p.family, p.paper, p.equations, ", ".join(p.solvers),
                              p.summary)
        elif name == "policies":
            for col in ("policy", "profile family", "paper", "where", "what"):
                table.add_column(col)
            for pol in POLICIES.values():
                table.add_row(pol.name, pol.family, pol.paper, pol.where, pol.summary)
        elif name == "routers":
            for col in ("router", "what"):
                table.add_column(col)
            for r in ROUTERS.values():
                table.add_row(r.name, r.summary)
        elif name == "traces":
            for col in ("trace format", "source", "columns"):
                table.add_column(col)
            for t in TRACE_FORMATS.values():
                table.add_row(t.name, t.source, t.columns)
        elif name == "profiles":
            for col in ("profile", "bounds of its family", "exact problem"):
                table.add_column(col)
            for profile in available_profiles():
                table.add_row(profile, "", "")
            for family in FAMILIES.values():
                table.add_row(f"(family {family.family})", family.summary, family.exact)
        else:
            table.add_column("example instance (package data)")
            folder = files("llmopt.data") / "examples"
            for path in sorted(folder.iterdir(), key=lambda p: p.name):
                if path.name.endswith(".yaml"):
                    table.add_row(str(path))
        made.append(table)
    return made
