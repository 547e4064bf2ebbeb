"""Bisection for the largest value of a parameter at which a metric stays on the right side of
a threshold (goodput: the largest arrival rate with attainment ≥ 0.9), per combination of the
other parameters.

Each round runs one probe per open group through the sweep's engine, so the groups' probes run
in parallel; probes are cells like any other (stored, resumable, in the results table). The
search assumes the metric is monotone in the parameter: it reports the bracket it found, the
largest value that met the target and the smallest that did not, with the metric at both. When
the two ends contradict that (``low`` misses the target and ``high`` meets it) the group is not
bisected and its note says so: a bracket upside down has no goodput in it. Integer parameters are
bisected to adjacent integers; positive float ranges at the geometric midpoint (rates span
orders of magnitude), for ``steps`` rounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from llmopt.sweep.spec import INTEGER_PARAMETERS, Cell, SearchSpec, Sweep, probe_value

RunRound = Callable[[list[Cell]], dict[str, dict[str, Any]]]


@dataclass
class _Group:
    params: dict[str, Any]
    ok: float | None = None          # the largest value known to meet the target
    failing: float | None = None     # the smallest value known to miss it
    ok_metric: float | None = None
    failing_metric: float | None = None
    probes: int = 0
    note: str = ""
    open: bool = True
    pending: list[float] = field(default_factory=list)


def meets(spec: SearchSpec, row: dict[str, Any]) -> bool:
    value = row.get(spec.metric)
    if row.get("cell_status") != "ok" or not isinstance(value, int | float) or (
            isinstance(value, float) and math.isnan(value)):
        return False
    return value >= spec.at_least if spec.at_least is not None else (
        value <= spec.at_most if spec.at_most is not None else False)


def bisect(sweep: Sweep, run_round: RunRound) -> pd.DataFrame:
    """Run the sweep's search; one row per group with the bracket found."""
    spec = sweep.search
    assert spec is not None
    groups = [_Group(dict(p), pending=[probe_value(spec.parameter, spec.low),
                                       probe_value(spec.parameter, spec.high)])
              for p in sweep.search_groups]
    for _ in range(spec.steps + 1):
        active = [g for g in groups if g.open and g.pending]
        if not active:
            break
        probes = {id(g): [sweep.cell({**g.params, spec.parameter: v}) for v in g.pending]
                  for g in active}
        rows = run_round([c for cs in probes.values() for c in cs])
        for g in active:
            _update(spec, g, probes[id(g)], rows)
    return _table(sweep, spec, groups)


def _update(spec: SearchSpec, g: _Group, probes: list[Cell],
            rows: dict[str, dict[str, Any]]) -> None:
    g.pending = []
    for cell in probes:
        row = rows[cell.key]
        value = cell.params[spec.parameter]
        g.probes += 1
        if row.get("cell_status") != "ok":
            g.open, g.note = False, f"probe at {value:g} failed: {row.get('error')}"
            return
        if meets(spec, row):
            if g.ok is None or value > g.ok:
                g.ok, g.ok_metric = value, row.get(spec.metric)
        elif g.failing is None or value < g.failing:
            g.failing, g.failing_metric = value, row.get(spec.metric)
    if g.ok is None:
        g.open, g.note = False, "misses the target at the low end"
    elif g.failing is None:
        g.open, g.note = False, "meets the target at the high end"
    elif g.failing < g.ok:
        g.open, g.note = False, (f"not monotone: misses the target at {g.failing:g}, meets it "
                                 f"at {g.ok:g}; not bisected")
    else:
        middle = _midpoint(spec.parameter, g.ok, g.failing)
        if middle is None:
            g.open = False
        else:
            g.pending = [middle]


def _midpoint(parameter: str, ok: float, failing: float) -> float | None:
    if parameter in INTEGER_PARAMETERS:
        if abs(failing - ok) <= 1:
            return None
        return probe_value(parameter, (ok + failing) // 2)
    middle = math.sqrt(ok * failing) if ok > 0 and failing > 0 else (ok + failing) / 2
    return probe_value(parameter, middle)


@dataclass(frozen=True)
class Target:
    """What a search's groups must hold: ``metric`` ``op`` (``>=`` or ``<=``) ``value``."""

    metric: str
    op: str
    value: float

    @classmethod
    def of(cls, spec: SearchSpec) -> Target:
        if spec.at_least is not None:
            return cls(spec.metric, ">=", spec.at_least)
        assert spec.at_most is not None
        return cls(spec.metric, "<=", spec.at_most)

    @classmethod
    def parse(cls, text: str) -> Target | None:
        """The target of a search table's ``target`` column (None: not one)."""
        found = re.fullmatch(r"(\w+) (>=|<=) (\S+)", text.strip())
        if found is None:
            return None
        try:
            return cls(found[1], found[2], float(found[3]))
        except ValueError:
            return None

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def _table(sweep: Sweep, spec: SearchSpec, groups: list[_Group]) -> pd.DataFrame:
    name = spec.parameter
    target = str(Target.of(spec))
    rows = []
    for g in groups:
        rows.append({**{c: g.params.get(c) for c in sweep.columns if c != name},
                     f"largest_{name}": g.ok, f"{spec.metric}_at_largest": g.ok_metric,
                     f"first_failing_{name}": g.failing,
                     f"{spec.metric}_at_first_failing": g.failing_metric, "target": target,
                     "probes": g.probes, "note": g.note or "bisected"})
    return pd.DataFrame(rows)
