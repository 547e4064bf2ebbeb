"""Timed schedules: what ran where and when, and the metrics computed from it.

A :class:`Schedule` holds three tables (pandas DataFrames):

``segments``   one row per maximal run of consecutive iterations in which a request was in the
               batch with the same phase: ``request, client, instance, phase, start_ms, end_ms,
               tokens`` (phase: ``prefill``, ``decode``, ``refill``; zero-length markers:
               ``evict`` (tokens: the KVs freed) and, with a prefix cache, ``hit`` at the start
               of a request's first chunk (tokens: the prompt tokens found cached)).
``iterations`` one row per iteration of each model instance: ``instance, start_ms, end_ms,
               phase`` (``prefill``, ``decode`` or ``mixed``), ``batch_size, prefill_tokens,
               decode_tokens, kv_tokens`` (KV in use at the end of the iteration),
               ``evictions`` (in the iteration) and ``running`` (requests holding KVs).
``requests``   one row per request: ``request, instance, client, input_tokens, output_tokens,
               arrival_ms, first_token_ms, finish_ms, evictions``; with a prefix cache also
               ``cached_tokens`` (found cached at its first admission) and
               ``refill_cached_tokens`` (found cached when readmitted after evictions).

Tables from the replay engines are compact: ``request`` and ``phase`` are pandas categoricals and
counts are 32-bit (a trace replay can have millions of segments); compare them with strings as
usual, and use ``.astype(str)`` before sorting by name.

Metrics follow the papers: makespan (total inference time), utilization = busy client-time /
(clients × makespan) with busy time the sum of segment durations (Pang et al. 2025, Figs 6–9),
output tokens per second, requests per second (requests / makespan), and TTFT (first output
token − arrival), TPOT ((finish − first token) / (output tokens − 1)) and end-to-end latency
(finish − arrival), each with its mean and percentiles 50, 90, 95 and 99. Beside them:

- queueing delay: arrival → the start of the request's first segment (its first scheduling),
  apart from the service that follows;
- inter-token latency (ITL): every gap between two consecutive output tokens of a request,
  pooled over the requests (a request of n output tokens has n − 1 gaps, which sum to its
  E2E − TTFT). A token is emitted at the first token time, then at the end of each decode
  iteration of the request after it, and, in schedules where a completed prefill emits the first
  token (continuous batching), at the end of each completed refill (the recompute of an evicted
  request emits its next token as a prefill does). Where the first token comes from the first
  decode iteration (the stage model of Pang et al., the bilinear and SCLS families), a refill
  emits none. (In the schedule of a slice-level replay, ``SliceReplay.to_schedule``, a request
  finishes with its padded batch, after its last token: there the gaps sum to less.)

With a prefix cache (``prefix_block``, the cache's block, > 0): the prompt tokens found cached at
the requests' first admissions over all prompt tokens (``prefix_hit_rate_tokens``), the blocks
found over the full prompt blocks (``prefix_hit_rate_blocks``) and every token a hit spared,
refills included (``prefill_tokens_saved``).

``metrics(instance)`` adds the SLO attainment of the instance's targets (and the run's
goodput).
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
PERCENTILES = (50, 90, 95, 99)
TIME_EPS_MS = 1e-6
#: the metrics added beside the first ones (p50/p99 of TTFT, TPOT, E2E): a solution file written
#: before them lacks them
LATENCY_METRICS = (
    *(f"{name}_p{q}_ms" for name in ("ttft", "tpot", "e2e") for q in (90, 95)),
    "requests_per_s",
    *(f"{name}_{stat}_ms" for name in ("queue", "itl")
      for stat in ("mean", *(f"p{q}" for q in PERCENTILES))))


def distribution(name: str, values: np.ndarray) -> dict[str, float]:
    """``<name>_mean_ms`` and ``<name>_p<q>_ms`` for q in PERCENTILES (0 for no values)."""
    if len(values) == 0:
        values = np.zeros(1)
    out = {f"{name}_mean_ms": float(values.mean())}
    for q, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"{name}_p{q}_ms"] = float(v)
    return out


MARKERS = ("evict", "hit")  # zero-length segments: an eviction, a prefix-cache hit
PREFIX_METRICS = ("prefix_hit_rate_tokens", "prefix_hit_rate_blocks", "prefill_tokens_saved")


def prefix_metrics(requests: pd.DataFrame, block: int) -> dict[str, float]:
    """The prefix cache's metrics (see the module doc) from the requests table."""
    cached = requests["cached_tokens"].to_numpy(dtype=np.int64)
    prompts = requests["input_tokens"].to_numpy(dtype=np.int64)
    blocks = int((prompts // block).sum())
    return {
        "prefix_hit_rate_tokens": float(cached.sum() / prompts.sum()) if prompts.sum() else 0.0,
        "prefix_hit_rate_blocks": float((cached // block).sum() / blocks) if blocks else 0.0,
        "prefill_tokens_saved": int(cached.sum()
                                    + requests["refill_cached_tokens"].to_numpy().sum()),
    }


@dataclass
class Schedule:
    policy: str
    segments: pd.DataFrame
    iterations: pd.DataFrame
    requests: pd.DataFrame
    clients: int
    """Client slots over all model instances (J × instances): the utilization denominator."""
    prefix_block: int = 0
    """The prefix cache's block (tokens); 0: no prefix cache."""

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
            out.update(distribution(name, series.to_numpy(dtype=float)))
        out["requests_per_s"] = (len(req) / (makespan / 1000.0) if makespan > 0 else 0.0)
        out.update(distribution("queue", self.queueing_delays().to_numpy(dtype=float)))
        out.update(distribution("itl", self._gaps()[1]))
        if self.prefix_block:
            out.update(prefix_metrics(req, self.prefix_block))
        if instance is not None:
            out.update(slo_metrics(self, instance))
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}

    def queueing_delays(self) -> pd.Series:
        """Per request (index): the start of its first segment − its arrival (ms)."""
        seg = self.segments[~self.segments["phase"].isin(MARKERS)]
        first = seg.groupby(seg["request"].astype(str), observed=True)["start_ms"].min()
        req = self.requests.set_index(self.requests["request"].astype(str))
        return (first.reindex(req.index) - req["arrival_ms"]).astype(float)

    def _request_codes(self, requests: pd.Series) -> np.ndarray:
        """Each value of ``requests`` as its row in the requests table (-1: not there)."""
        names = pd.Index(self.requests["request"].astype(str))
        if isinstance(requests.dtype, pd.CategoricalDtype):
            by_category = names.get_indexer(pd.Index(requests.cat.categories.astype(str)))
            codes = requests.cat.codes.to_numpy()
            return np.where(codes >= 0, by_category[codes], -1)
        return names.get_indexer(pd.Index(requests.astype(str)))

    def _token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(request row, time) of every output token after the first, sorted by request row
        then time (see the module doc for when a token is emitted)."""
        seg = self.segments
        first_token = self.requests["first_token_ms"].to_numpy(dtype=float)
        decode = (seg["phase"] == "decode").to_numpy()
        dec_rows = self._request_codes(seg["request"])[decode]
        dec = seg[decode]
        its = self.iterations
        rows_parts, time_parts = [], []
        for inst in np.unique(dec["instance"].to_numpy()):
            mine = its[(its["instance"] == inst).to_numpy()].sort_values("start_ms",
                                                                          kind="stable")
            starts = mine["start_ms"].to_numpy(dtype=float)
            ends = mine["end_ms"].to_numpy(dtype=float)
            here = (dec["instance"] == inst).to_numpy()
            first = np.searchsorted(starts, dec["start_ms"].to_numpy(dtype=float)[here]
                                    - TIME_EPS_MS)
            counts = dec["tokens"].to_numpy(dtype=np.int64)[here]
            keep = counts > 0
            first, counts, owners = first[keep], counts[keep], dec_rows[here][keep]
            if not len(counts):
                continue
            # iteration index of every token: consecutive within a segment, jumping at the next
            step = np.ones(int(counts.sum()), dtype=np.int64)
            heads = np.cumsum(counts) - counts
            step[heads] = np.diff(first, prepend=first[0] + 1) - np.concatenate(
                ([0], counts[:-1] - 1))
            step[0] = first[0]
            index = np.minimum(np.cumsum(step), len(ends) - 1)
            rows_parts.append(np.repeat(owners, counts))
            time_parts.append(ends[index])
        rows = np.concatenate(rows_parts) if rows_parts else np.zeros(0, dtype=np.int64)
        times = np.concatenate(time_parts) if time_parts else np.zeros(0)
        # a refill emits a token where a completed prefill emits the first one, i.e. unless
        # the first token is the end of the request's first decode iteration
        first_decode = np.full(len(first_token), np.inf)
        np.minimum.at(first_decode, rows, times)
        refill_rows, refill_times = self._completed_refills()
        emits = first_decode[refill_rows] > first_token[refill_rows] + TIME_EPS_MS
        rows = np.concatenate([rows, refill_rows[emits]])
        times = np.concatenate([times, refill_times[emits]])
        later = times > first_token[rows] + TIME_EPS_MS
        rows, times = rows[later], times[later]
        order = np.lexsort((times, rows))
        return rows[order], times[order]

    def token_times(self) -> pd.DataFrame:
        """``request, time_ms``: the output tokens after the first of every request, in time
        order per request (see the module doc for when a token is emitted)."""
        rows, times = self._token_arrays()
        names = self.requests["request"].astype(str).to_numpy()
        return pd.DataFrame({"request": names[rows], "time_ms": times})

    def _completed_refills(self) -> tuple[np.ndarray, np.ndarray]:
        """(request row, end) of each completed refill. A request evicted with k KVs (the most
        it held at any eviction so far: a refill cut short by another eviction held fewer) is
        refilled by recomputing them and its pending token, k + 1 tokens in one or more
        chunks; a refill cut short completes nothing."""
        seg = self.segments
        involved = seg["phase"].isin(["evict", "refill", "hit"]).to_numpy()
        if not involved.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        seg = seg[involved].assign(row=self._request_codes(seg["request"][involved]),
                                   refill=(seg["phase"][involved] == "refill").to_numpy())
        # an eviction marker comes before the refill that starts when it is made
        seg = seg.sort_values(["row", "start_ms", "refill"], kind="stable")
        evict = (seg["phase"] == "evict").to_numpy()
        life = pd.Series(evict.astype(int), index=seg.index).groupby(seg["row"]).cumsum()
        evicted = seg["tokens"].where(evict).astype(float)
        freed = evicted.groupby(seg["row"]).cummax().groupby(seg["row"]).ffill()
        refills = seg[~evict].assign(life=life, freed=freed)
        runs = refills.groupby(["row", "life"], sort=False).agg(
            tokens=("tokens", "sum"), freed=("freed", "first"), time_ms=("end_ms", "max"))
        done = runs[runs["tokens"] >= runs["freed"] + 1].reset_index()
        return done["row"].to_numpy(dtype=np.int64), done["time_ms"].to_numpy(dtype=float)

    def _gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """(request row, gap in ms) of every gap between consecutive output tokens."""
        rows, times = self._token_arrays()
        before = np.empty_like(times)
        if len(times):
            before[1:] = times[:-1]
            starts = np.ones(len(rows), dtype=bool)
            starts[1:] = rows[1:] != rows[:-1]
            first_token = self.requests["first_token_ms"].to_numpy(dtype=float)
            before[starts] = first_token[rows[starts]]
        return rows, times - before

    def inter_token_latencies(self) -> pd.DataFrame:
        """``request, itl_ms``: every gap between consecutive output tokens of a request (the
        first gap from its first token), in time order per request."""
        rows, gaps = self._gaps()
        names = self.requests["request"].astype(str).to_numpy()
        return pd.DataFrame({"request": names[rows], "itl_ms": gaps})

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
