"""Results of a solve and the solution JSON contract.

Solution JSON (a public contract; these keys are kept)::

    {"llmopt_version", "instance", "instance_sha256", "problem", "solver", "solver_version",
     "status", "objective", "bound", "gap", "runtime_s", "time_limit_s", "units",
     ...problem-specific keys (binpacking: "assignment", "loads", "lower_bound": {"name",
     "tokens"}: the bound behind "bound", recomputed by llmopt.validate.pcmax_bounds;
     problems with a schedule: "metrics" and "schedule": {file, sha256, segments,
     iterations}, the name of the Parquet file with the segments and the iteration log)}

The problem-specific keys come from ``Result.data``, a :class:`SolutionData`: each family's
class (``binpacking.PackingData``, ``partition.BatchingData``, ``slo_priority.solve.
PriorityPlan``, ``csp.CspPlan``, ``pd_competition.CompetitionPlan``, ``replay.ReplayData``,
``slice.replay.SliceReplayData``) names them once, in its ``to_json``.

Status vocabulary: ``optimal`` (proven: objective == bound within tolerance), ``feasible``
(incumbent, bound may be weaker), ``infeasible``, ``time_limit_no_solution``, ``error``;
``llmopt.problems.outcome`` decides it for the exact solvers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmopt.errors import InternalError, SolutionFileError
from llmopt.files import load_json_mapping, sidecar_name, write_atomic
from llmopt.plugins import load
from llmopt.version import __version__

if TYPE_CHECKING:
    from llmopt.schedule import Schedule

# the schedule's Parquet tables (pyarrow), loaded when a schedule is written or read
SCHEDULE_IO = "llmopt.schedule.io"

STATUSES = ("optimal", "feasible", "infeasible", "time_limit_no_solution", "error")
CONTRACT_KEYS = (
    "llmopt_version", "instance", "instance_sha256", "problem", "solver", "solver_version",
    "status", "objective", "bound", "gap", "runtime_s", "time_limit_s", "units",
)


class Mode(StrEnum):
    """A schedule's ``mode`` in its solution file: how its batches were formed (the validator
    checks each by its own rules)."""

    CONTINUOUS = "continuous"          # iteration-level batches (InferMax's cost model, …)
    PD_COMPETITION = "pd_competition"  # prefill stages and decode rounds (Pang et al.)
    SLICES = "slices"                  # padded static batches served a slice at a time (SCLS)


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """(objective − bound) / |objective|, 0 when both are 0; None without both."""
    if objective is None or bound is None:
        return None
    if objective == 0:
        return 0.0 if bound >= 0 else math.inf
    return max(objective - bound, 0.0) / abs(objective)


class SolutionData(Protocol):
    """The problem-specific part of a solution (``Result.data``): typed fields, written as the
    solution file's problem-specific keys by :meth:`to_json` (those keys are a public
    contract: a family's class names them once)."""

    def to_json(self) -> dict[str, Any]:
        """The keys and values written into the solution file, in their order."""
        ...


@dataclass
class Fields:
    """Problem data without a class of its own (a plugin's problem, which may pass a plain
    dict as ``Result.data``; :class:`Result` wraps it in this)."""

    values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass
class ScheduleData:
    """What every solution with a timed schedule carries: its ``mode`` (a :class:`Mode`
    value: how its batches were formed) and the schedule's ``metrics`` (ms, and SLO shares
    when the instance has SLOs). Families with a schedule extend it."""

    mode: str
    metrics: dict[str, float]


@dataclass
class Result:
    """Outcome of solving one problem on one instance. Times in ms unless named otherwise."""

    problem: str
    solver: str
    status: str
    objective: float | None
    bound: float | None
    runtime_s: float
    time_limit_s: float | None
    solver_version: str
    data: SolutionData = field(default_factory=Fields)
    proof: str | None = None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    schedule: Schedule | None = None  # the timed schedule, for problems that produce one

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status == "optimal" and not self.proof:
            raise ValueError("status optimal without a proof (llmopt.problems.outcome.decide "
                             "gives a status and its proof)")
        if isinstance(self.data, Mapping):  # a plugin's untyped data
            self.data = Fields(dict(self.data))

    @property
    def metrics(self) -> dict[str, float] | None:
        """The schedule's metrics, for a result with a schedule (None otherwise)."""
        if isinstance(self.data, ScheduleData):
            return self.data.metrics
        if isinstance(self.data, Fields):
            found: dict[str, float] | None = self.data.values.get("metrics")
            return found
        return None

    def schedule_metrics(self) -> dict[str, float]:
        """:attr:`metrics` of a result that has a schedule (a replay, a plan): a bug without."""
        found = self.metrics
        if found is None:
            raise InternalError(f"{self.problem} ({self.solver}) has no schedule metrics")
        return found

    @property
    def gap(self) -> float | None:
        return relative_gap(self.objective, self.bound)

    def to_dict(self, instance: Any, *, inline_schedule: bool = True) -> dict[str, Any]:
        """The solution as a JSON-able dict; the schedule's tables inline (``segments``: a
        list of records, ``iterations``: columns) unless ``inline_schedule`` is false."""
        out: dict[str, Any] = {
            "llmopt_version": __version__,
            "instance": instance.name,
            "instance_sha256": instance.sha256,
            "problem": self.problem,
            "solver": self.solver,
            "solver_version": self.solver_version,
            "status": self.status,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "runtime_s": round(self.runtime_s, 4),
            "time_limit_s": self.time_limit_s,
            "units": "ms",
        }
        if self.proof:
            out["proof"] = self.proof
        if self.interrupted:
            out["interrupted"] = True
        if self.notes:
            out["notes"] = list(self.notes)
        out.update(self.data.to_json())
        if self.schedule is not None and inline_schedule:
            out["segments"] = self.schedule.segments_records()
            out["iterations"] = self.schedule.iterations_columns()
        return out

    def write(self, path: Path, instance: Any) -> Path:
        """Write the solution JSON atomically; a schedule's tables go to a Parquet file beside
        it (``<name>.schedule.parquet``), which the JSON names with its SHA-256."""
        data = self.to_dict(instance, inline_schedule=False)
        if self.schedule is not None:
            sidecar = path.parent / sidecar_name(path)
            digest = load(f"{SCHEDULE_IO}:write_tables")(sidecar, self.schedule.segments,
                                                          self.schedule.iterations)
            data["schedule"] = {"file": sidecar.name, "sha256": digest, "format": "parquet",
                                "segments": len(self.schedule.segments),
                                "iterations": len(self.schedule.iterations)}
        write_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
        return path


def read_solution(path: str | Path) -> dict[str, Any]:
    """Read a solution JSON and check that the contract keys are present."""
    path = Path(path)
    data = load_json_mapping(path, "solution file")
    missing = [k for k in CONTRACT_KEYS if k not in data]
    if missing:
        raise SolutionFileError(f"missing required keys: {', '.join(missing)}", file=path)
    ref = data.get("schedule")
    if ref is not None:
        if not (isinstance(ref, dict) and isinstance(ref.get("file"), str)
                and isinstance(ref.get("sha256"), str)):
            raise SolutionFileError("must be {file, sha256, ...}", file=path, field="schedule")
        sidecar = path.parent / ref["file"]
        if Path(ref["file"]).name != ref["file"]:
            raise SolutionFileError("must name a file beside the solution", file=path,
                                    field="schedule.file", value=ref["file"])
        data["segments"], data["iterations"] = load(f"{SCHEDULE_IO}:read_tables")(
            sidecar, ref["sha256"])
    return data
