"""The goodput bound of a sweep's rate search (issue 32, item 3): beside each group's goodput
(the largest rate at which a policy keeps ``attainment ≥ level``), the rate from which no
schedule keeps it, by the proven ceiling on SLO attainment of the instance's profile family
(``FamilyInfo.goodput_ceiling``: ``llmopt.problems.slo_ceiling.goodput`` for InferMax).

It applies to a search over ``rate_per_s`` or ``rate_scale`` for ``attainment`` ``at_least`` a
level, on replays of a family with a ceiling (``search.goodput_bound: false`` leaves it out).
The ceiling's instances are built as the cells build theirs (``cell.build_instance`` with the
group's parameters and the rate), so they are the same arrival draws, and the ceiling checks
that every rate's arrivals are the first's scaled (the soundness of its bisection). The
policy and the router are not part of the workload: the ceiling covers any router, and one
ceiling serves every group of the same workload, once for the policies respecting the KV
memory M and once without the KV rule for a policy ignoring it (``hypothetical``).

Per group, in the search table:

``goodput_bound``        the lowest rate probed at which the ceiling forbids the level: no
                         schedule keeps it there or at any higher rate (empty when the ceiling
                         allows it up to ``high``; ``low`` when it forbids it even there);
``ceiling_allows_at``    the highest rate probed at which the ceiling allows it (within 1 % of
                         ``goodput_bound``): the true threshold of the ceiling lies between;
``goodput_bound_note``   how it was found, or why there is none.

The ceiling's curve (``ceiling.parquet``): per workload and rate probed, the ceiling's share
there (``ceiling_share``: the least of its bounds at that rate, a valid ceiling at that rate
whatever the others) and the share of the bounds that cannot grow with the rate, which the
bisection uses (``monotone_share``). ``sweep plot`` draws ``ceiling_share`` beside the
policies' attainment. Each workload's answer is stored in ``OUT/ceilings/<key>.json``: a
re-run reuses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from llmopt.data.instance import Instance
from llmopt.errors import InputFileError, LlmoptError
from llmopt.files import load_json_mapping, sha256_of, write_atomic
from llmopt.plugins import load
from llmopt.policies.registry import POLICIES
from llmopt.problems.registry import FAMILIES
from llmopt.sweep.cell import build_instance
from llmopt.sweep.spec import Sweep, probe_value
from llmopt.version import __version__

RATE_PARAMETERS = ("rate_per_s", "rate_scale")
GRID_POINTS = 8          # rates spaced geometrically over [low, high], probed before bisecting
PROBE_TIME_S = 30.0      # for the ceiling at one rate
CEILINGS = "ceilings"    # the folder of the stored answers
COLUMNS = ("goodput_bound", "ceiling_allows_at", "goodput_bound_note")
CURVE_COLUMNS = ("workload", "memory", "parameter", "rate", "ceiling_share", "monotone_share",
                 "met_max", "requests", "method")


def applies(sweep: Sweep) -> bool:
    """Whether the sweep's search asks for a goodput bound (see the module doc)."""
    spec = sweep.search
    return (spec is not None and spec.goodput_bound and spec.parameter in RATE_PARAMETERS
            and spec.metric == "attainment" and spec.at_least is not None)


@dataclass(frozen=True)
class _Workload:
    params: dict[str, Any]   # the group's parameters without the policy and the router
    memory: bool             # False: the ceiling without the KV rule (a policy ignoring M)
    key: str

    @property
    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return shown + ("" if self.memory else ", KV memory unlimited")


def goodput_bounds(sweep: Sweep, folder: Path,
                   stage: Callable[[str], None] = lambda _: None
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per search group (in ``sweep.search_groups``' order) the columns of the module doc,
    and the ceiling's curve; ``stage`` is told of each workload computed."""
    assert sweep.search is not None
    spec = sweep.search
    answers: dict[str, dict[str, Any]] = {}
    rows = []
    for group in sweep.search_groups:
        workload, why = _workload(sweep, group)
        if workload is None:
            rows.append({"goodput_bound": None, "ceiling_allows_at": None,
                         "goodput_bound_note": why})
            continue
        if workload.key not in answers:
            answers[workload.key] = _stored(folder, workload) or _computed(
                sweep, workload, folder, stage)
        rows.append(_columns(answers[workload.key], spec.low, spec.high))
    curve = [{"workload": a["label"], "memory": a["memory"], "parameter": spec.parameter,
              **point}
             for a in answers.values() for point in sorted(a.get("curve", []),
                                                           key=lambda p: p["rate"])]
    return (pd.DataFrame(rows, columns=list(COLUMNS)),
            pd.DataFrame(curve, columns=list(CURVE_COLUMNS)))


def _workload(sweep: Sweep, group: dict[str, Any]) -> tuple[_Workload | None, str]:
    spec = sweep.search
    assert spec is not None
    policy = group.get("policy")
    if policy is None:
        return None, "a solve's search: no ceiling"
    source = sweep.sources[group["instance"]]
    family = FAMILIES.get(source.family)
    if family is None or not family.goodput_ceiling:
        having = ", ".join(n for n, f in FAMILIES.items() if f.goodput_ceiling) or "none"
        return None, (f"no proven SLO ceiling for profile family {source.family} (llmopt "
                      f"has one for: {having})")
    params = {k: v for k, v in group.items() if k not in ("policy", "router")}
    memory = not POLICIES[policy].hypothetical
    key = sha256_of({"instance_sha256": source.sha256, "params": params, "memory": memory,
                     "level": spec.at_least, "low": spec.low, "high": spec.high,
                     "parameter": spec.parameter, "grid": GRID_POINTS,
                     "llmopt": __version__})[:32]
    return _Workload(params, memory, key), ""


def _stored(folder: Path, workload: _Workload) -> dict[str, Any] | None:
    path = folder / CEILINGS / f"{workload.key}.json"
    if not path.is_file():
        return None
    try:
        return load_json_mapping(path, "goodput ceiling record")
    except InputFileError:
        return None  # a half-written record of a killed run: computed again


def _computed(sweep: Sweep, workload: _Workload, folder: Path,
              stage: Callable[[str], None]) -> dict[str, Any]:
    spec = sweep.search
    assert spec is not None and spec.at_least is not None
    stage(f"goodput bound: the SLO ceiling of {workload.label}")
    source = sweep.sources[workload.params["instance"]]

    def make_instance(rate: float) -> Instance:
        return build_instance(sweep.cell({**workload.params,
                                          spec.parameter: probe_value(spec.parameter, rate)}))

    record: dict[str, Any] = {"label": workload.label, "memory": workload.memory}
    try:
        found = load(FAMILIES[source.family].goodput_ceiling)(
            make_instance, spec.at_least, spec.low, spec.high, time_limit_s=PROBE_TIME_S,
            memory=workload.memory, grid=GRID_POINTS)
    except LlmoptError as exc:
        record["error"] = " ".join(str(exc).split())[:300]
        return record
    monotone = {rate: met for rate, met, _ in found.probes}
    record.update(rate=found.rate, forbidden_at=found.forbidden_at, scaled=found.scaled,
                  runtime_s=round(found.runtime_s, 3), curve=[
                      {"rate": rate, "ceiling_share": met / n if n else 1.0,
                       "monotone_share": monotone[rate] / n if n else 1.0, "met_max": met,
                       "requests": n, "method": method}
                      for (rate, met, method), (_, _, n) in zip(found.ceilings, found.probes,
                                                                strict=True)])
    write_atomic(folder / CEILINGS / f"{workload.key}.json",
                 json.dumps(record, allow_nan=False) + "\n")
    return record


def _columns(answer: dict[str, Any], low: float, high: float) -> dict[str, Any]:
    if "error" in answer:
        return {"goodput_bound": None, "ceiling_allows_at": None,
                "goodput_bound_note": f"no ceiling: {answer['error']}"}
    rate, forbidden = answer["rate"], answer["forbidden_at"]
    memory = "" if answer["memory"] else " without the KV rule"
    if not answer["scaled"]:
        return {"goodput_bound": None, "ceiling_allows_at": None, "goodput_bound_note":
                "the arrivals at different rates are not the same draws scaled: the "
                "bisection over rates is not sound (ceiling.parquet holds each rate's ceiling)"}
    if forbidden is None:
        note = f"the ceiling{memory} allows the level up to high ({high:g})"
    elif rate is None:
        note = f"the ceiling{memory} forbids the level even at low ({low:g})"
    else:
        note = f"bisected{', the ceiling' + memory if memory else ''}"
    return {"goodput_bound": forbidden, "ceiling_allows_at": rate, "goodput_bound_note": note}


def curve_path(folder: Path) -> Path:
    return folder / "ceiling.parquet"


def read_curve(folder: Path) -> pd.DataFrame | None:
    """The ceiling's curve a sweep folder holds, if any."""
    path = curve_path(folder)
    return pd.read_parquet(path) if path.is_file() else None


__all__ = ["COLUMNS", "applies", "goodput_bounds", "read_curve"]
