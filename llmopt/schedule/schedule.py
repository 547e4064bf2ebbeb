"""Timed schedules: what ran where and when, and the metrics computed from it.

A :class:`Schedule` holds three tables (pandas DataFrames):

``segments``   one row per maximal run of consecutive iterations in which a request was in the
               batch with the same phase: ``request, client, instance, phase, start_ms, end_ms,
               tokens`` (phase: ``prefill``, ``decode``, ``refill``).
``iterations`` one row per iteration of each model instance: ``instance, start_ms, end_ms,
               phase`` (``prefill``, ``decode`` or ``mixed``), ``batch_size, prefill_tokens,
               decode_tokens, kv_tokens`` (KV in use at the end of the iteration),
               ``evictions`` (in the iteration) and ``running`` (requests holding KVs).
``requests``   one row per request: ``request, instance, client, input_tokens, output_tokens,
               arrival_ms, first_token_ms, finish_ms, evictions``.

Tables from the replay engines are compact: ``request`` and ``phase`` are pandas categoricals and
counts are 32-bit (a trace replay can have millions of segments); compare them with strings as
usual, and use ``.astype(str)`` before sorting by name.

Metrics follow the papers: makespan (total inference time), utilization = busy client-time /
(clients × makespan) with busy time the sum of segment durations (Pang et al. 2025, Figs 6–9),
output tokens per second, and TTFT (first output token − arrival), TPOT ((finish − first token)
/ (output tokens − 1)) and end-to-end latency (finish − arrival); ``metrics(instance)`` adds the
SLO attainment of the instance's targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from llmopt.data.instance import Instance
from llmopt.schedule.metrics import slo_metrics

SEGMENT_COLUMNS = ["request", "client", "instance", "phase", "start_ms", "end_ms", "tokens"]
ITERATION_COLUMNS = ["instance", "start_ms", "end_ms", "phase", "batch_size", "prefill_tokens",
                     "decode_tokens", "kv_tokens", "evictions", "running"]
REQUEST_COLUMNS = ["request", "instance", "client", "input_tokens", "output_tokens",
                   "arrival_ms", "first_token_ms", "finish_ms", "evictions"]


@dataclass
class Schedule:
    policy: str
    segments: pd.DataFrame
    iterations: pd.DataFrame
    requests: pd.DataFrame
    clients: int
    """Client slots over all model instances (J × instances): the utilization denominator."""

    @property
    def makespan_ms(self) -> float:
        return float(self.requests["finish_ms"].max()) if len(self.requests) else 0.0

    def metrics(self, instance: Instance | None = None) -> dict[str, float]:
        """Makespan, utilization, tokens/s, iteration counts and the latency percentiles (ms);
        given the ``instance`` it ran (its SLO targets), the SLO attainment metrics too
        (``llmopt.schedule.metrics.slo_metrics``), as in ``llmopt replay``'s table and the
        solution file's ``metrics``."""
        req = self.requests
        makespan = self.makespan_ms
        seg = self.segments
        busy = float((seg["end_ms"] - seg["start_ms"]).sum())
        its = self.iterations
        ttft = req["first_token_ms"] - req["arrival_ms"]
        e2e = req["finish_ms"] - req["arrival_ms"]
        multi = req["output_tokens"] > 1
        tpot = ((req["finish_ms"] - req["first_token_ms"])[multi]
                / (req["output_tokens"][multi] - 1))
        out: dict[str, float] = {
            "makespan_ms": makespan,
            "utilization": busy / (self.clients * makespan) if makespan > 0 else 0.0,
            "tokens_per_s": float(req["output_tokens"].sum()) / (makespan / 1000.0)
            if makespan > 0 else 0.0,
            "iterations": len(self.iterations),
            "evictions": int(req["evictions"].sum()),
            "running_mean": float(its["running"].mean()) if len(its) else 0.0,
            "batch_size_mean": float(its["batch_size"].mean()) if len(its) else 0.0,
            "kv_tokens_max": int(its["kv_tokens"].max()) if len(its) else 0,
        }
        for name, series in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            values = series.to_numpy(dtype=float)
            if len(values) == 0:
                values = np.zeros(1)
            out[f"{name}_mean_ms"] = float(values.mean())
            out[f"{name}_p50_ms"] = float(np.percentile(values, 50))
            out[f"{name}_p99_ms"] = float(np.percentile(values, 99))
        if instance is not None:
            out.update(slo_metrics(self, instance))
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}

    def segments_records(self) -> list[dict[str, Any]]:
        """Segments as a list of dicts (times rounded to the microsecond)."""
        seg = self.segments
        cols = [seg["request"].tolist(), seg["client"].astype(np.int64).tolist(),
                seg["instance"].astype(np.int64).tolist(), seg["phase"].tolist(),
                np.round(seg["start_ms"].to_numpy(dtype=float), 3).tolist(),
                np.round(seg["end_ms"].to_numpy(dtype=float), 3).tolist(),
                seg["tokens"].astype(np.int64).tolist()]
        return [dict(zip(SEGMENT_COLUMNS, row, strict=True)) for row in zip(*cols, strict=True)]

    def iterations_columns(self) -> dict[str, list[Any]]:
        """The iteration log as columns (lists), rounded to the microsecond."""
        it = self.iterations
        out: dict[str, list[Any]] = {}
        for col in ITERATION_COLUMNS:
            values = it[col].to_numpy()
            if col.endswith("_ms"):
                out[col] = np.round(values.astype(float), 3).tolist()
            elif col == "phase":
                out[col] = [str(v) for v in values]
            else:
                out[col] = values.astype(np.int64).tolist()
        return out

    @classmethod
    def from_solution(cls, solution: dict[str, Any]) -> Schedule:
        """Segments and iterations of a replay solution dict (requests derived from segments)."""
        seg = solution.get("segments")
        its = solution.get("iterations")
        seg = seg if isinstance(seg, pd.DataFrame) else pd.DataFrame(seg or [],
                                                                     columns=SEGMENT_COLUMNS)
        its = its if isinstance(its, pd.DataFrame) else pd.DataFrame(its or {},
                                                                     columns=ITERATION_COLUMNS)
        return cls(policy=str(solution.get("solver")), segments=seg, iterations=its,
                   requests=pd.DataFrame(columns=REQUEST_COLUMNS),
                   clients=int(solution.get("clients") or 0))
