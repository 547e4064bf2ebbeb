"""Sweep files: which cells to run, validated like instances.

A sweep file names one or more instances and the cells to run on them::

    name: azure-rate                  # optional; the file's stem by default
    instances: [../instances/toy/azure-sample.yaml]   # files (relative to this file) or
                                      # inline instance mappings (a generator: requests.generate)
    grid:                             # every combination of these values ...
      policy: [vllm, sarathi]
      rate_scale: [0.5, 1, 2]         # a list, or a range: {from: 1000, to: 1099} (step 1),
      seed: {from: 1, to: 5}          # {from, to, step}, {from, to, points, log: true}
    cells:                            # ... and/or these cells, each a mapping of parameters
      - {problem: binpacking, solver: auto, time_limit_s: 5}
    metrics: [makespan_ms, ttft_p99_ms]   # the metric columns kept (default: all)
    validate: true                    # check every cell's answer with the validator
    search: {parameter: rate_scale, low: 0.25, high: 16, metric: ttft_p99_ms, at_most: 2000}
                                      # (goodput_bound: false skips the SLO ceiling's rate
                                      # of a search for attainment ≥ a level)

A cell replays a ``policy`` or solves a ``problem``; the other parameters (:data:`PARAMETERS`)
change the instance (seed, request count, arrival rate, system) or the solve. With several
instances, ``instance`` (an instance's name) is a grid dimension of its own.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, create_model

from llmopt.data.instance import instance_from_mapping
from llmopt.data.ranges import (
    MAX_CLIENTS,
    MAX_INSTANCES,
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    MAX_TOKENS,
)
from llmopt.errors import LlmoptError, unknown_name
from llmopt.files import SAFE_NAME_RULE, is_safe_name, load_yaml_mapping, sha256_of, validated
from llmopt.policies.registry import POLICIES, ROUTERS, Engine, policy_names
from llmopt.problems.registry import PROBLEMS, problem_names
from llmopt.schedule.metrics import ATTAINMENT_METRICS
from llmopt.schedule.schedule import LATENCY_METRICS, PREFIX_METRICS
from llmopt.version import __version__

MAX_CELLS = 1_000_000
MAX_TIME_LIMIT_S = 7 * 24 * 3600.0
MAX_RATE_SCALE = 1e6


class SweepError(LlmoptError):
    """A sweep file has a missing, malformed or inconsistent field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


Positive = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)]


class CellParams(_Strict):
    """The parameters of one cell; every one optional (the instance's own value applies)."""

    instance: str | None = None
    # what the cell runs: a replay ...
    policy: str | None = None
    router: str | None = None
    # ... or a solve, with the problem's own options
    problem: str | None = None
    solver: str | None = None
    time_limit_s: Annotated[float, Field(ge=0, le=MAX_TIME_LIMIT_S)] | None = None
    formulation: str | None = None
    bins: Annotated[StrictInt, Field(ge=1, le=10_000)] | None = None
    time_model: str | None = None
    literal: StrictBool | None = None
    cuts: StrictBool | None = None
    workers: Annotated[StrictInt, Field(ge=1, le=64)] | None = None
    # the workload: generator seed, request count, Poisson rate, arrival-time scale
    seed: Annotated[StrictInt, Field(ge=0)] | None = None
    count: Annotated[StrictInt, Field(ge=1, le=MAX_REQUESTS)] | None = None
    rate_per_s: Annotated[float, Field(gt=0, le=MAX_RATE_PER_S)] | None = None
    rate_scale: Annotated[float, Field(gt=0, le=MAX_RATE_SCALE)] | None = None
    slo_scale: Annotated[float, Field(gt=0, le=MAX_RATE_SCALE)] | None = None
    # the serving system
    clients: Annotated[StrictInt, Field(ge=1, le=MAX_CLIENTS)] | None = None
    replicas: Annotated[StrictInt, Field(ge=1, le=MAX_INSTANCES)] | None = None
    kv_capacity: Positive | None = None
    max_batch_tokens: Positive | None = None
    max_prefill_tokens: Positive | None = None
    prefix_caching: StrictBool | None = None


PARAMETERS: dict[str, str] = {
    "instance": "the name of one of the sweep's instances",
    "policy": "replay this policy (`llmopt list policies`)",
    "router": "the router of a multi-replica replay",
    "problem": "solve this problem (`llmopt list problems`)",
    "solver": "the problem's solver",
    "time_limit_s": "the solve's time limit (s)",
    "formulation": "pd-competition: original | compact",
    "bins": "pd-competition: bins K; infermax-csp: batches N",
    "time_model": "pd-competition: stage | replay",
    "literal": "pd-competition original: eq 13 as printed",
    "cuts": "pd-competition original: symmetry cuts and valid inequalities",
    "workers": "infermax-csp: CP-SAT threads",
    "seed": "the seed of a generated workload (requests.generate.seed)",
    "count": "requests: a generator's count, or the rows read from a trace",
    "rate_per_s": "arrival rate (requests/s) of a generated workload, or of arrivals generated "
                  "for a trace in place of its timestamps (Poisson, or the Gamma cv given)",
    "rate_scale": "arrival rate × this: every arrival time divided by it",
    "slo_scale": "every SLO target (TTFT, TPOT, E2E) × this: below 1 tighter",
    "clients": "client slots per replica (system.clients)",
    "replicas": "model instances (system.instances)",
    "kv_capacity": "KV capacity in tokens (system.kv_capacity)",
    "max_batch_tokens": "token budget of one iteration (system.max_batch_tokens)",
    "max_prefill_tokens": "prefill budget of one iteration (system.max_prefill_tokens)",
    "prefix_caching": "automatic prefix caching on or off (system.prefix_caching)",
}
SOLVE_OPTIONS = ("formulation", "bins", "time_model", "literal", "cuts", "workers")
NUMERIC_PARAMETERS = ("time_limit_s", "seed", "count", "rate_per_s", "rate_scale", "slo_scale",
                      "clients",
                      "replicas", "kv_capacity", "max_batch_tokens", "max_prefill_tokens", "bins")
INTEGER_PARAMETERS = frozenset(name for name in NUMERIC_PARAMETERS
                               if name not in ("time_limit_s", "rate_per_s", "rate_scale",
                                               "slo_scale"))

Grid = create_model(  # type: ignore[call-overload]
    "Grid", __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
    **{name: (list[info.annotation] | None,  # type: ignore[name-defined]
              Field(default=None, min_length=1))
       for name, info in CellParams.model_fields.items()},
)

REPLAY_METRICS = (
    "makespan_ms", "utilization", "tokens_per_s", "iterations", "evictions", "running_mean",
    "batch_size_mean", "kv_tokens_max", "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms",
    "tpot_mean_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_mean_ms", "e2e_p50_ms", "e2e_p99_ms",
    *LATENCY_METRICS, "bound_ms", "gap_to_bound", *ATTAINMENT_METRICS,
    # the slice-level replays' (Cheng et al. 2024, section 5)
    "throughput_rps", "response_mean_ms", "response_p95_ms", "completion_std_ms", "busy_std_ms",
    "pad_tokens_per_request", "invalid_tokens_per_request", "slices_per_request")
SOLVE_METRICS = ("status", "objective", "bound", "gap", "solve_runtime_s", "replay_makespan_ms")
METRICS = REPLAY_METRICS + tuple(m for m in SOLVE_METRICS if m not in REPLAY_METRICS)
#: kept only when the sweep file lists them (replays with system.prefix_caching)
OPTIONAL_METRICS = PREFIX_METRICS
METRICS += OPTIONAL_METRICS
#: metrics that are shares in [0, 1] (attainment 0.9 is 90 %)
SHARE_METRICS = ("utilization", "gap_to_bound", "gap", "prefix_hit_rate_tokens",
                 "prefix_hit_rate_blocks",
                 *(m for m in ATTAINMENT_METRICS if m.startswith("attainment")))


class SearchSpec(_Strict):
    """Bisection for the largest ``parameter`` in [low, high] at which ``metric`` stays
    ≥ ``at_least`` (or ≤ ``at_most``), per combination of the other parameters."""

    parameter: str
    low: Annotated[float, Field(ge=0)]
    high: Annotated[float, Field(gt=0)]
    metric: str
    at_least: float | None = None
    at_most: float | None = None
    steps: Annotated[StrictInt, Field(ge=1, le=40)] = 6
    #: searching rate_per_s or rate_scale for attainment ≥ a level: also the rate from which
    #: the proven SLO ceiling forbids the level (``llmopt.sweep.goodput``)
    goodput_bound: StrictBool = True


class _SweepDoc(_Strict):
    name: str | None = None
    description: str | None = None
    instances: Annotated[list[str | dict[str, Any]], Field(min_length=1)]
    grid: dict[str, Any] | None = None
    cells: list[Any] | None = None
    metrics: list[str] | None = None
    validate_: Annotated[StrictBool, Field(alias="validate")] = True
    search: SearchSpec | None = None


@dataclass(frozen=True)
class InstanceSource:
    """An instance as the workers rebuild it: its YAML mapping, the folder its paths are
    relative to, and the content hash of the instance it defines (checked on the worker)."""

    name: str
    mapping: dict[str, Any]
    base_dir: str
    file: str | None
    sha256: str
    generated: bool
    traced: bool
    family: str       # its cost profile's family: the problems that run on it
    policy_family: str  # the family whose policies run on it (CostProfile.policy_family)
    has_slos: bool


@dataclass(frozen=True)
class Cell:
    """One unit of work: a replay or a solve of one instance variant. ``key`` is the content
    hash of the instance, the parameters and the llmopt version."""

    params: dict[str, Any]
    source: InstanceSource
    key: str
    validate: bool = True

    @property
    def kind(self) -> Literal["replay", "solve"]:
        return "solve" if self.params.get("problem") else "replay"


@dataclass
class Sweep:
    name: str
    file: Path
    sha256: str
    sources: dict[str, InstanceSource]
    cells: list[Cell]
    columns: list[str]                 # the parameters that vary or were given, in order
    metrics: list[str]
    validate: bool
    search: SearchSpec | None = None
    search_groups: list[dict[str, Any]] = field(default_factory=list)

    def cell(self, params: dict[str, Any]) -> Cell:
        """The cell of ``params`` (one with its key computed), e.g. a search probe."""
        return make_cell(params, self.sources[params["instance"]], self.validate)


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every cell, and every search probe, is checked before any
    runs (unknown policy, problem, solver or parameter, a policy or problem of another profile
    family, a parameter the instance cannot vary, an out-of-range value, an empty grid: one
    error naming the field)."""
    path = Path(path)
    data = load_yaml_mapping(path, "sweep file")
    doc: _SweepDoc = validated(_SweepDoc, data, file=path, error=SweepError)
    name = doc.name or path.stem
    if not is_safe_name(name):
        raise SweepError(SAFE_NAME_RULE, file=path, field="name", value=name)
    sources = _sources(doc, path)
    raw = _cell_params(doc, path)
    # a cell naming no instance runs on each of them, in place (instance: the last grid axis)
    raw = [(where, {**params, "instance": name}) if "instance" not in params else (where, params)
           for where, params in raw
           for name in (sources if "instance" not in params else [params["instance"]])]
    for where, params in raw:
        _check_cell(params, sources, path, where)
    metrics = _check_metrics(doc, path)
    search_groups: list[dict[str, Any]] = []
    if doc.search is not None:
        _check_search(doc.search, raw, sources, path)
        search_groups = [p for _, p in raw]
        raw = []
    cells = [make_cell(p, sources[p["instance"]], doc.validate_) for _, p in raw]
    if len({c.key for c in cells}) != len(cells):
        dup = next(c for i, c in enumerate(cells) if c.key in {d.key for d in cells[:i]})
        raise SweepError("the same cell twice", file=path, field="cells", value=dup.params)
    given = [p for _, p in raw] + search_groups
    columns = [name for name in PARAMETERS if any(name in p for p in given)]
    if doc.search is not None and doc.search.parameter not in columns:
        columns.append(doc.search.parameter)
    return Sweep(name=name, file=path, sha256=sha256_of(data), sources=sources, cells=cells,
                 columns=columns, metrics=metrics, validate=doc.validate_, search=doc.search,
                 search_groups=search_groups)


def make_cell(params: dict[str, Any], source: InstanceSource, validate: bool = True) -> Cell:
    clean = {k: params[k] for k in PARAMETERS if params.get(k) is not None}
    keyed = {k: v for k, v in clean.items() if k != "instance"}
    key = sha256_of({"instance_sha256": source.sha256, "params": keyed, "validate": validate,
                     "llmopt": __version__})[:32]
    return Cell(params=clean, source=source, key=key, validate=validate)


def _sources(doc: _SweepDoc, path: Path) -> dict[str, InstanceSource]:
    sources: dict[str, InstanceSource] = {}
    for i, entry in enumerate(doc.instances):
        where = f"instances[{i}]"
        if isinstance(entry, str):
            file = (path.parent / entry).resolve()
            try:
                mapping = load_yaml_mapping(file, "instance file")
                inst = instance_from_mapping(mapping, file=file)
            except LlmoptError as exc:
                raise SweepError(f"instance {entry}: {exc}", file=path, field=where) from None
            base_dir, shown = file.parent, str(file)
        else:
            mapping, base_dir, shown = entry, path.parent.resolve(), None
            try:
                inst = instance_from_mapping(mapping, base_dir=base_dir)
            except LlmoptError as exc:
                raise SweepError(str(exc), file=path, field=where) from None
        if inst.name in sources:
            raise SweepError("two instances with the same name; give each a name", file=path,
                             field=f"{where}.name", value=inst.name)
        requests = mapping.get("requests")
        sources[inst.name] = InstanceSource(
            name=inst.name, mapping=mapping, base_dir=str(base_dir), file=shown,
            sha256=inst.sha256, generated=isinstance(requests, dict) and "generate" in requests,
            traced=isinstance(requests, dict) and "trace" in requests,
            family=inst.profile.family, policy_family=inst.profile.policy_family,
            has_slos=inst.has_slos)
    return sources


def _cell_params(doc: _SweepDoc, path: Path) -> list[tuple[str, dict[str, Any]]]:
    raw: list[tuple[str, dict[str, Any]]] = []
    if doc.grid is not None:
        if not doc.grid:
            raise SweepError("empty: give at least one parameter and its values", file=path,
                             field="grid")
        expanded = {k: expand_range(v, path, f"grid.{k}") for k, v in doc.grid.items()}
        grid = validated(Grid, expanded, file=path, prefix="grid", error=SweepError)
        axes = {k: v for k, v in grid.model_dump().items() if v is not None}
        count = math.prod(len(v) for v in axes.values())
        if count > MAX_CELLS:
            raise SweepError(f"{count:,} cells, more than {MAX_CELLS:,}", file=path,
                             field="grid")
        raw += [("grid", dict(zip(axes, combo, strict=True)))
                for combo in itertools.product(*axes.values())]
    for i, item in enumerate(doc.cells or []):
        where = f"cells[{i}]"
        if not isinstance(item, dict):
            raise SweepError("each cell must be a mapping of parameters", file=path,
                             field=where, value=item)
        cell = validated(CellParams, item, file=path, prefix=where, error=SweepError)
        raw.append((where, cell.model_dump(exclude_none=True)))
    if not raw:
        raise SweepError("no cells: give a grid or a list of cells", file=path,
                         field="cells" if doc.cells is not None else "grid")
    return raw


class _Range(_Strict):
    from_: Annotated[float, Field(alias="from")]
    to: float
    step: Annotated[float, Field(gt=0)] | None = None
    points: Annotated[StrictInt, Field(ge=2, le=MAX_CELLS)] | None = None
    log: StrictBool = False


def expand_range(value: Any, path: Path, where: str) -> Any:
    """A grid axis given as a range mapping, as the list of its values (``to`` included;
    integers when ``from``, ``to`` and ``step`` are); anything else as it is."""
    if not isinstance(value, dict):
        return value
    r: _Range = validated(_Range, value, file=path, prefix=where, error=SweepError)
    lo, hi = r.from_, r.to
    if hi < lo or (r.step is not None and r.points is not None) or (r.log and r.points is None):
        raise SweepError("a range is {from, to} with to >= from and at most one of step (1 "
                         "by default) or points (log: true needs points)", file=path,
                         field=where, value=value)
    if r.points is not None:
        if r.log and lo <= 0:
            raise SweepError("a log range needs from > 0", file=path, field=f"{where}.from",
                             value=lo)
        grid = (np.geomspace(lo, hi, r.points) if r.log else np.linspace(lo, hi, r.points))
        return [float(f"{v:.6g}") for v in grid]
    step = r.step or 1.0
    count = math.floor((hi - lo) / step + 1e-9) + 1
    if count > MAX_CELLS:
        raise SweepError(f"{count:,} values, more than {MAX_CELLS:,}", file=path, field=where,
                         value=value)
    values = [lo + i * step for i in range(count)]
    if all(float(v).is_integer() for v in (lo, step)):
        return [int(v) for v in values]
    return [float(f"{v:.12g}") for v in values]


def _check_cell(params: dict[str, Any], sources: dict[str, InstanceSource], path: Path,
                where: str, searched: str | None = None) -> None:
    """Refuse a cell that cannot run; ``searched``: the search's parameter, set in ``params``
    to a probe's value (its mistakes name ``search.parameter``)."""
    def fail(name: str, reason: str) -> NoReturn:
        if name == searched:
            raise SweepError(reason, file=path, field="search.parameter", value=name)
        raise SweepError(reason, file=path, field=f"{where}.{name}", value=params.get(name))

    if params["instance"] not in sources:
        fail("instance", unknown_name("instance", params["instance"], sources))
    policy, problem = params.get("policy"), params.get("problem")
    if (policy is None) == (problem is None):
        raise SweepError("each cell needs exactly one of policy (a replay) and problem (a "
                         "solve)", file=path, field=where, value=params)
    if policy is not None:
        if policy not in POLICIES:
            fail("policy", unknown_name("policy", policy, POLICIES))
        if policy == "plan":
            fail("policy", "replays a solution file (llmopt replay --plan), which a sweep "
                 "cannot give; solve the problem in a cell (problem: ...) instead")
        if params.get("router") is not None and params["router"] not in ROUTERS:
            fail("router", unknown_name("router", params["router"], ROUTERS))
        if params.get("router") is not None and POLICIES[policy].engine is Engine.SLICE:
            fail("router", f"{policy} is a slice-level scheduler: it dispatches by its own "
                 "rule, no router applies")
        for name in ("solver", "time_limit_s", *SOLVE_OPTIONS):
            if name in params:
                fail(name, "applies to solves (problem), not to replays (policy)")
    else:
        if problem not in PROBLEMS:
            fail("problem", unknown_name("problem", problem, PROBLEMS))
        info = PROBLEMS[str(problem)]
        if params.get("solver") is not None and params["solver"] not in info.solvers:
            fail("solver", unknown_name(f"solver for {problem}", params["solver"], info.solvers))
        for name in SOLVE_OPTIONS:
            if name in params and name not in info.options:
                fail(name, f"not an option of problem {problem}")
        if "router" in params:
            fail("router", "applies to replays (policy), not to solves (problem)")
    source = sources[params["instance"]]
    if policy is not None and POLICIES[policy].family not in ("any", source.policy_family):
        fail("policy", f"runs on profiles of family {POLICIES[policy].family}; instance "
             f"{source.name}'s model is of family {source.family} (its policies: "
             f"{', '.join(p for p in policy_names(source.policy_family) if p != 'plan')})")
    if problem is not None and PROBLEMS[problem].family != source.family:
        fail("problem", f"needs a profile of family {PROBLEMS[problem].family}; instance "
             f"{source.name}'s model is of family {source.family} (its problems: "
             f"{', '.join(problem_names(source.family)) or 'none'})")
    if "seed" in params and not source.generated:
        fail("seed", f"instance {source.name} is not generated (requests.generate)")
    for name in ("rate_per_s", "count"):
        if name in params and not (source.generated or source.traced):
            fail(name, f"instance {source.name} lists its requests; {name} applies to "
                 "generated and trace workloads")
    if "slo_scale" in params and not source.has_slos:
        fail("slo_scale", f"instance {source.name} has no SLO targets (an slo section) to "
             "scale")


def _check_metrics(doc: _SweepDoc, path: Path) -> list[str]:
    if doc.metrics is None:
        return [m for m in METRICS if m not in OPTIONAL_METRICS]
    if not doc.metrics:
        raise SweepError("empty: list metrics, or leave the field out for all", file=path,
                         field="metrics")
    for i, name in enumerate(doc.metrics):
        if name not in METRICS:
            raise SweepError(unknown_name("metric", name, METRICS), file=path,
                             field=f"metrics[{i}]", value=name)
    return list(dict.fromkeys(doc.metrics))


def _check_search(search: SearchSpec, raw: list[tuple[str, dict[str, Any]]],
                  sources: dict[str, InstanceSource], path: Path) -> None:
    if search.parameter not in NUMERIC_PARAMETERS:
        raise SweepError(f"not a numeric parameter (one of: {', '.join(NUMERIC_PARAMETERS)})",
                         file=path, field="search.parameter", value=search.parameter)
    if search.high <= search.low:
        raise SweepError(f"must be above low ({search.low:g})", file=path, field="search.high",
                         value=search.high)
    if search.metric not in METRICS or search.metric == "status":
        raise SweepError(unknown_name("metric", search.metric,
                                      (m for m in METRICS if m != "status")), file=path,
                         field="search.metric", value=search.metric)
    if (search.at_least is None) == (search.at_most is None):
        raise SweepError("give exactly one of at_least and at_most", file=path, field="search")
    threshold = "at_least" if search.at_least is not None else "at_most"
    value = getattr(search, threshold)
    if search.metric in SHARE_METRICS and not 0 <= value <= 1:
        raise SweepError(f"{search.metric} is a share in [0, 1] (90 % is 0.9)", file=path,
                         field=f"search.{threshold}", value=value)
    for where, params in raw:
        if search.parameter in params:
            raise SweepError("is the searched parameter; remove it from the grid and cells",
                             file=path, field=f"{where}.{search.parameter}",
                             value=params[search.parameter])
    for bound_name in ("low", "high"):
        value = getattr(search, bound_name)
        try:
            probe_value(search.parameter, value)
        except LlmoptError as exc:
            why = str(exc).rsplit(": ", 1)[-1]   # the range's own words, e.g. greater than 0
            raise SweepError(f"out of the range of {search.parameter} ({why})", file=path,
                             field=f"search.{bound_name}", value=value) from None
    for where, params in raw:  # every probe as a cell of its own, as a grid axis would be
        probe = {**params, search.parameter: probe_value(search.parameter, search.low)}
        _check_cell(probe, sources, path, where, searched=search.parameter)
        _check_search_metric(search, probe, sources[params["instance"]], path)


def _check_search_metric(search: SearchSpec, params: dict[str, Any], source: InstanceSource,
                         path: Path) -> None:
    """The searched metric is one the group's cells give: a solve's or a replay's, and an
    attainment only on an instance with SLO targets."""
    kind = "solve" if params.get("problem") else "replay"
    given = SOLVE_METRICS if kind == "solve" else REPLAY_METRICS + OPTIONAL_METRICS
    if search.metric not in given:
        raise SweepError(f"not a metric of a {kind} ({kind} cells give: {', '.join(given)})",
                         file=path, field="search.metric", value=search.metric)
    if search.metric in ATTAINMENT_METRICS and not source.has_slos:
        raise SweepError(f"instance {source.name} has no SLO targets (an slo section); "
                         f"{search.metric} is measured against them", file=path,
                         field="search.metric", value=search.metric)


def probe_value(parameter: str, value: float) -> float | int:
    """``value`` as a value of ``parameter`` (integers rounded), checked against its range."""
    shown: float | int = round(value) if parameter in INTEGER_PARAMETERS else float(value)
    validated(CellParams, {parameter: shown}, file=None, error=SweepError)
    return shown
