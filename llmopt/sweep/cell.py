"""The cell function: one replay or one solve of one instance variant, the same in every engine.

:func:`run_cell` never raises for a user's mistake or a bug inside the cell: it returns a row
with ``cell_status`` ``failed`` and the error's type and first line, so that one bad cell does
not stop a sweep. Every answer is written as a solution file to a temporary folder and checked
by the independent validator (``llmopt validate``'s code) unless the sweep says ``validate:
false``.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path
from typing import Any

from llmopt.data.instance import Instance, System, instance_from_mapping
from llmopt.data.slo import SLO_FIELDS
from llmopt.errors import LlmoptError
from llmopt.policies.replay import replay_policy
from llmopt.problems.api import bounds as family_bounds
from llmopt.problems.api import solve
from llmopt.problems.base import gap_bounds
from llmopt.problems.registry import FAMILIES
from llmopt.result import Result, read_solution
from llmopt.sweep.spec import SOLVE_OPTIONS, Cell
from llmopt.validate import check_solution

SYSTEM_PARAMETERS = {"clients": "clients", "replicas": "instances", "kv_capacity": "kv_capacity",
                     "max_batch_tokens": "max_batch_tokens",
                     "max_prefill_tokens": "max_prefill_tokens",
                     "prefix_caching": "prefix_caching"}
BOUND_TIME_LIMIT_S = 1.0  # for the bin packing inside the bounds; its proven bound is used
_BASES: dict[str, Instance] = {}  # per process: the instances as their files define them
_BOUNDS: dict[str, float | None] = {}  # per process: best replay bound by instance hash


def run_cell(cell: Cell) -> dict[str, Any]:
    """The row of ``cell``: its status, its metrics, whether the validator accepted its answer,
    and its runtime in seconds."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"key": cell.key}
    try:
        inst = build_instance(cell)
        row["instance_sha256"] = inst.sha256
        row["requests"] = inst.num_requests
        result = _replay(inst, cell, row) if cell.kind == "replay" else _solve(inst, cell, row)
        if cell.validate:
            row["valid"], row["invalid_reason"] = _validated(inst, result)
        row["cell_status"] = "ok"
    except Exception as exc:  # the cell's failure is its row: the sweep goes on
        row["cell_status"] = "failed"
        row["error"] = one_line(exc)
    row["runtime_s"] = round(time.perf_counter() - t0, 4)
    return row


def one_line(exc: BaseException) -> str:
    kind = "error" if isinstance(exc, LlmoptError) else f"internal error {type(exc).__name__}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{kind}: {text[:300]}"


def build_instance(cell: Cell) -> Instance:
    """The instance of ``cell``: its source with the cell's workload and system parameters."""
    src, p = cell.source, cell.params
    file = Path(src.file) if src.file else None
    if any(name in p for name in ("seed", "count", "rate_per_s")):
        inst = instance_from_mapping(_generator_mapping(src.mapping, p), file=file,
                                     base_dir=Path(src.base_dir))
    else:
        inst = _BASES.get(src.sha256) or instance_from_mapping(copy.deepcopy(src.mapping),
                                                               file=file,
                                                               base_dir=Path(src.base_dir))
        if inst.sha256 != src.sha256:
            raise LlmoptError(f"instance {src.name} changed since the sweep was read (its "
                              f"content hash is now {inst.sha256[:12]}…, was "
                              f"{src.sha256[:12]}…)", file=file)
        _BASES[src.sha256] = inst
    changes = {target: p[name] for name, target in SYSTEM_PARAMETERS.items() if name in p}
    if changes:
        system = System.model_validate({**inst.system.model_dump(), **changes})
        inst = Instance(inst.name, inst.profile, system, inst.requests, inst.solve, inst.path,
                        inst.description)
    if "rate_scale" in p:
        scale = float(p["rate_scale"])
        inst = inst.with_requests(tuple(r.model_copy(update={"arrival_ms": r.arrival_ms / scale})
                                        for r in inst.requests))
    if "slo_scale" in p:
        inst = _slos_scaled(inst, float(p["slo_scale"]))
    return inst


def _slos_scaled(inst: Instance, scale: float) -> Instance:
    if not inst.has_slos:
        raise LlmoptError("slo_scale needs an instance with SLO targets (an slo section)",
                          file=inst.path, field="slo_scale", value=scale)
    return inst.with_requests(tuple(
        r.model_copy(update={f: None if getattr(r, f) is None else getattr(r, f) * scale
                             for f in SLO_FIELDS})
        for r in inst.requests))


def _generator_mapping(mapping: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(mapping)
    requests = doc["requests"]
    if "generate" in requests:
        gen = requests["generate"]
        for name in ("seed", "count"):
            if name in p:
                gen[name] = p[name]
        if "rate_per_s" in p:
            gen["arrival"] = _at_rate(gen.get("arrival"), p["rate_per_s"])
        return doc
    if "count" in p:
        requests["limit"] = p["count"]
    if "rate_per_s" in p:  # the trace's lengths, generated arrivals in place of its timestamps
        requests["arrival"] = _at_rate(requests.get("arrival"), p["rate_per_s"])
    return doc


def _at_rate(arrival: dict[str, Any] | None, rate_per_s: float) -> dict[str, Any]:
    """An arrival process at ``rate_per_s``: a Gamma process keeps its cv, an offline one (or
    none) becomes Poisson."""
    arrival = dict(arrival or {})
    if arrival.get("process", "offline") == "offline":
        arrival["process"] = "poisson"
    return {**arrival, "rate_per_s": rate_per_s}


def _replay(inst: Instance, cell: Cell, row: dict[str, Any]) -> Result:
    result = replay_policy(inst, cell.params["policy"], router=cell.params.get("router")).result
    metrics = result.schedule_metrics()
    row.update(metrics)
    bound = best_replay_bound(inst)
    row["bound_ms"] = bound
    makespan = metrics["makespan_ms"]
    row["gap_to_bound"] = (makespan - bound) / makespan if bound and makespan > 0 else None
    return result


def _solve(inst: Instance, cell: Cell, row: dict[str, Any]) -> Result:
    p = cell.params
    options = {name: p[name] for name in SOLVE_OPTIONS if name in p}
    result = solve(inst, p["problem"], p.get("solver"), p.get("time_limit_s"), **options)
    row.update(status=result.status, objective=result.objective, bound=result.bound,
               gap=result.gap, solve_runtime_s=round(result.runtime_s, 4))
    if result.schedule is not None:
        row["replay_makespan_ms"] = result.schedule.makespan_ms
    return result


def best_replay_bound(inst: Instance) -> float | None:
    """The best closed-form lower bound (ms) valid under the replays' time model, or None when
    the instance's family has none. The bin packing inside the Pang bounds gets
    ``BOUND_TIME_LIMIT_S``: its proven bound is used whether or not it closes."""
    if inst.sha256 in _BOUNDS:
        return _BOUNDS[inst.sha256]
    family = FAMILIES.get(inst.profile.family)
    best = None
    if family is not None and family.bounds:
        found = family_bounds(inst, BOUND_TIME_LIMIT_S, solver_bounds=False)
        valid = [b.value_ms for b in gap_bounds(found, family.replay_time_model, inst)]
        best = max(valid) if valid else None
    _BOUNDS[inst.sha256] = best
    return best


def _validated(inst: Instance, result: Result) -> tuple[bool, str | None]:
    """The validator's verdict on ``result`` as ``llmopt validate`` would give it: written as a
    solution file (Parquet schedule beside it) and read back."""
    with tempfile.TemporaryDirectory(prefix="llmopt-cell-") as tmp:
        path = result.write(Path(tmp) / "cell.json", inst)
        verdict = check_solution(inst, read_solution(path))
    return verdict.valid, (verdict.reasons[0][:300] if verdict.reasons else None)

