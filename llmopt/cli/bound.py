"""``llmopt bound``: the lower bounds of an instance's family, with their parts and validity."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from llmopt.cli.common import (
    InstanceArg,
    TimeLimitOpt,
    VerboseOpt,
    check_number,
    command,
    fmt_ms,
    out,
    print_table,
)
from llmopt.cli.common import progress as console_progress
from llmopt.data.instance import load_instance
from llmopt.problems.api import bounds as family_bounds
from llmopt.problems.base import Bound
from llmopt.progress import SILENT


@command
def bound(
    instance: InstanceArg,
    time_limit: TimeLimitOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    solver_bounds: Annotated[bool, typer.Option(
        "--solvers/--no-solvers", help="Also the bounds solvers prove on small instances (LP "
        "relaxation of eqs 1–25 and CP-SAT on the compact PD model; the InferMax CSP).")] = True,
    verbose: VerboseOpt = False,
) -> None:
    """Lower bounds on the total inference time, each with the time model it holds under."""
    check_number(time_limit, "--time-limit")
    inst = load_instance(instance)
    progress = SILENT if as_json else console_progress(verbose)
    found = family_bounds(inst, time_limit, progress, solver_bounds)
    progress.done()
    if as_json:
        payload = {"instance": inst.name, "instance_sha256": inst.sha256, "units": "ms",
                   "bounds": [b.to_dict() for b in found]}
        sys.stdout.write(json.dumps(payload, indent=1, allow_nan=False) + "\n")
        return
    print_table(_table(inst.name, found, inst.system.prefix_caching))
    for line in _explanations(found):
        out.print(line)


def _table(name: str, found: list[Bound], prefix_caching: bool = False) -> Table:
    """The bounds; with a prefix cache, a bound that does not hold with one is marked and the
    best is taken among the others."""
    with_parts = any("t_p" in b.parts for b in found)
    table = Table(title=f"Lower bounds on total inference time for {name}", show_edge=False,
                  header_style="bold", title_justify="left")
    columns = [("bound", "left"), ("ms", "right")]
    if with_parts:
        columns += [("t_p", "right"), ("t_d", "right")]
    for col, justify in [*columns, ("valid under", "left")]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for b in found:
        parts = [fmt_ms(b.parts.get("t_p")), fmt_ms(b.parts.get("t_d"))] if with_parts else []
        valid = b.valid_under
        if prefix_caching and not b.holds_with_prefix_cache:
            valid += " (not with a prefix cache)"
        table.add_row(b.name, fmt_ms(b.value_ms), *parts, valid)
    usable = [b for b in found if b.holds_with_prefix_cache or not prefix_caching]
    for model in dict.fromkeys(b.time_model for b in usable):
        best = max((b for b in usable if b.time_model == model), key=lambda b: b.value_ms)
        label = f"best ({model} model{', prefix cache' if prefix_caching else ''})"
        table.add_row(label, fmt_ms(best.value_ms),
                      *([""] * (len(columns) - 2)), f"= {best.name}", style="bold")
    return table


def _explanations(found: list[Bound]) -> list[str]:
    lines = []
    d = found[0].detail
    if "largest_level_ms" in d:
        lines.append(f"t_p (eq 31) = T^p_L {d['largest_level_ms']:,.2f} ms × "
                     f"ceil({d['total_input_tokens']:,} / {d['largest_level_tokens']:,}) = "
                     f"{d['prefill_stages']} stages; t_d = {d['t_d_source']} (eqs 26–30) at "
                     f"t_round {d['t_round_ms']} ms")
    else:
        lines += [f"{b.name}: {b.why}" for b in found]
    return lines
