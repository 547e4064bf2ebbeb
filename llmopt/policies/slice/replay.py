"""Slice-level replays as solution files (problem ``replay``, mode ``slices``): SCLS and its
Fig. 15 ladder (Cheng et al. 2024, sections 5.1 and 5.4) on the instance's model instances
(``system.instances``), for ``llmopt replay`` and ``llmopt compare``.

The file carries the metrics of :meth:`SliceReplay.metrics` (section 5's measures) and the slice
schedule itself, one record per padded static batch (one slice)::

    {"instance", "start_ms", "end_ms", "requests": [ids, in slot order], "padded_length" (L_i),
     "iterations" (L_o), "prompt_tokens", "generated", "pad_tokens", "invalid_tokens"
     (per request, in the order of "requests")}

``llmopt validate`` re-derives all of it from the instance and the profile's eqs 1–9
(:mod:`llmopt.validate.slices`). The objective is the makespan (the last finish, ms).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from llmopt.data.cost.scls import SclsProfile
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, SolutionFileError
from llmopt.policies.registry import check_family
from llmopt.policies.slice.schedulers import SCHEDULERS, replay_slices, scheduler
from llmopt.result import Result, ScheduleData
from llmopt.sim.slices import SliceReplay
from llmopt.version import __version__

MODE = "slices"

# the ladder table of ``llmopt compare`` (Fig. 15 and 17's measures): column → header
LADDER_COLUMNS = {
    "throughput_rps": "req/s",
    "response_mean_ms": "response (s)",
    "response_p95_ms": "resp. p95 (s)",
    "makespan_ms": "last end (s)",
    "completion_std_ms": "compl. std (s)",
    "batch_size_mean": "batch",
    "pad_tokens_per_request": "pad/req",
    "invalid_tokens_per_request": "invalid/req",
    "slices_per_request": "slices/req",
}


def is_slice_policy(policy: str) -> bool:
    """Whether ``policy`` is one of the slice-level schedulers (SLS, SO, PM, AB, LB, SCLS)."""
    return policy in SCHEDULERS


def slice_records(replay: SliceReplay) -> list[dict[str, Any]]:
    """One record per slice (padded static batch), in start order (see the module doc)."""
    bat, mem = replay.batches, replay.members
    ids = replay.requests["request"].tolist()
    grouped: dict[int, pd.DataFrame] = {}
    key: Any
    for key, g in mem.groupby("batch", sort=False):
        grouped[int(key)] = g.sort_values("slot")
    records = []
    row: Any  # pandas-stubs types each field of itertuples() as any scalar
    for row in bat.itertuples(index=False):
        g = grouped[int(row.batch)]
        records.append({
            "instance": int(row.instance),
            "start_ms": round(float(row.start_ms), 6),
            "end_ms": round(float(row.end_ms), 6),
            "requests": [ids[int(r)] for r in g["request"]],
            "padded_length": int(row.padded_length),
            "iterations": int(row.iterations),
            "prompt_tokens": [int(x) for x in g["prompt_tokens"]],
            "generated": [int(x) for x in g["generated"]],
            "pad_tokens": [int(x) for x in g["pad_tokens"]],
            "invalid_tokens": [int(x) for x in g["invalid_tokens"]],
        })
    return records


def slice_result(instance: Instance, policy: str) -> tuple[Result, SliceReplay]:
    """Replay ``instance`` under the slice-level scheduler ``policy`` on its
    ``system.instances`` model instances (defaults of section 5.1: S = 128, Γ = 6 s, λ = 0.5)
    and wrap it as a solution (problem ``replay``, mode ``slices``, solver = policy)."""
    check_family(instance, policy)
    t0 = time.perf_counter()
    replay = replay_slices(instance, policy, instances=instance.system.instances)
    runtime = time.perf_counter() - t0
    metrics = replay.metrics()
    sch = scheduler(policy)  # the parameters it ran with
    result = Result(
        problem="replay", solver=policy, status="feasible",
        objective=round(metrics["makespan_ms"], 3), bound=None, runtime_s=runtime,
        time_limit_s=None, solver_version=f"llmopt {__version__} replay",
        data=SliceReplayData(
            mode=MODE, metrics=metrics, instances=replay.workers,
            slice_length=replay.slice_length,
            scheduler={"dispatch": sch.dispatch, "batcher": sch.batcher,
                       "batch_size": sch.batch_size, "offloader": sch.offloader,
                       "interval": sch.interval, "gamma_ms": sch.gamma_ms, "lam": sch.lam},
            memory_rule=replay.profile.memory_rule, slices=slice_records(replay)),
    )
    return result, replay


@dataclass
class SliceReplayData(ScheduleData):
    """A slice-level replay's solution data (``Result.data``): besides the mode and metrics,
    the model instances, the slice length S, the scheduler's parameters, the memory rule and
    one record per slice served."""

    instances: int
    slice_length: int
    scheduler: dict[str, Any]
    memory_rule: str
    slices: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "instances": self.instances,
                "slice_length": self.slice_length, "scheduler": self.scheduler,
                "memory_rule": self.memory_rule, "metrics": self.metrics,
                "slices": self.slices}


def slice_frames(instance: Instance, sol: dict[str, Any]
                 ) -> tuple[pd.DataFrame, pd.DataFrame, list[float], int, str]:
    """The chart's parts (``report.slice_plot.plot_slice_frames``) from a slice-level solution
    file: per slice its batch row (prefill time by eq 3 at its size and padded length), per
    request in it its pad and invalid tokens, each instance's completion (the end of its last
    slice, 0 when it served none), the instances and the policy."""
    slices = sol.get("slices")
    workers = sol.get("instances")
    if not isinstance(slices, list) or not isinstance(workers, int) or workers < 1:
        raise SolutionFileError("a slice-level solution needs 'slices' and 'instances'",
                                field="slices")
    profile = instance.profile
    if not isinstance(profile, SclsProfile):
        raise InstanceError("slice-level schedules are timed by an scls profile",
                            file=instance.label(), field="model", value=profile.name)
    rows, members = [], []
    done = [0.0] * workers
    try:
        for k, rec in enumerate(slices):
            size = len(rec["requests"])
            rows.append({"batch": k, "instance": int(rec["instance"]),
                         "start_ms": float(rec["start_ms"]), "end_ms": float(rec["end_ms"]),
                         "prefill_ms": profile.prefill_ms(size, int(rec["padded_length"])),
                         "size": size, "padded_length": int(rec["padded_length"]),
                         "iterations": int(rec["iterations"])})
            members += [{"batch": k, "pad_tokens": int(p), "invalid_tokens": int(v)}
                        for p, v in zip(rec["pad_tokens"], rec["invalid_tokens"], strict=True)]
            w = int(rec["instance"])
            done[w] = max(done[w], float(rec["end_ms"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SolutionFileError(f"slice {len(rows)} is malformed ({exc!r})",
                                field=f"slices[{len(rows)}]") from None
    return (pd.DataFrame(rows, columns=["batch", "instance", "start_ms", "end_ms", "prefill_ms",
                                        "size", "padded_length", "iterations"]),
            pd.DataFrame(members, columns=["batch", "pad_tokens", "invalid_tokens"]),
            done, workers, str(sol.get("solver")))


def ladder_table(metrics: dict[str, dict[str, float]]) -> pd.DataFrame:
    """One row per replay: its section 5 metrics (``LADDER_COLUMNS``), by schedule name."""
    return pd.DataFrame([{"schedule": name, **{k: m[k] for k in LADDER_COLUMNS}}
                         for name, m in metrics.items()])


def ladder_markdown(table: pd.DataFrame, shares: dict[str, str] | None = None) -> str:
    """``ladder_table`` as markdown, times in seconds; ``shares``: more columns (header →
    table column) shown as percentages."""
    extra = shares or {}
    heads = ["schedule", *LADDER_COLUMNS.values(), *extra]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for row in table.to_dict("records"):
        cells = [str(row["schedule"])]
        for key in LADDER_COLUMNS:
            value = float(row[key])
            if math.isnan(value):
                cells.append("—")
                continue
            cells.append(f"{value / 1000:,.2f}" if key.endswith("_ms")
                         else f"{value:,.2f}" if key in ("throughput_rps", "slices_per_request")
                         else f"{value:,.1f}")
        cells += ["—" if pd.isna(row.get(key)) else f"{float(row[key]):.2%}"
                  for key in extra.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["LADDER_COLUMNS", "MODE", "is_slice_policy", "ladder_markdown", "ladder_table",
           "slice_frames", "slice_records", "slice_result"]
