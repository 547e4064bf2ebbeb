"""Collects segments and iterations while an engine runs and builds the schedule tables.

Appends are cheap (raw arrays or scalars, one append per prefill stage, batch or run of identical
decode rounds) and are expanded into columns once, when the tables are built; requests are
integer indices into the engine's request list until then."""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmopt.schedule import ITERATION_COLUMNS, SEGMENT_COLUMNS, Schedule

PHASES = ("prefill", "decode", "refill", "evict")
_PHASE_CODE = {p: k for k, p in enumerate(PHASES)}
_ITER_PHASES = ("prefill", "decode", "mixed")


def _expand(values: list, lengths: np.ndarray, dtype) -> np.ndarray:
    """Concatenate per-chunk values, each a scalar (repeated) or an array of its length."""
    scalar = np.fromiter((not isinstance(v, np.ndarray) or v.ndim == 0 for v in values),
                         dtype=bool, count=len(values))
    if scalar.all():
        return np.repeat(np.asarray(values, dtype=dtype), lengths)
    out = np.empty(int(lengths.sum()), dtype=dtype)
    flat = np.flatnonzero(scalar)
    out_scalar = np.repeat(np.asarray([values[k] for k in flat], dtype=dtype), lengths[flat])
    out[np.repeat(scalar, lengths)] = out_scalar
    arrays = [values[k] for k in np.flatnonzero(~scalar)]
    if arrays:
        out[~np.repeat(scalar, lengths)] = np.concatenate(arrays).astype(dtype, copy=False)
    return out


class Recorder:
    def __init__(self, instance_index: int) -> None:
        self.instance = instance_index
        self._seg: list[tuple] = []
        self._iter: list[tuple] = []

    def segments(self, requests: np.ndarray, clients: np.ndarray, phase: str, starts, ends,
                 tokens: np.ndarray) -> None:
        """Segments of ``requests`` (engine indices) in one phase; starts/ends scalar or array."""
        if len(requests):
            self._seg.append((np.array(requests, dtype=np.int64),
                              np.array(clients, dtype=np.int64), _PHASE_CODE[phase],
                              np.array(starts, dtype=float), np.array(ends, dtype=float),
                              np.array(tokens, dtype=np.int64)))

    def iterations(self, starts: np.ndarray, ends: np.ndarray, phase: str, batch_size,
                   prefill_tokens, decode_tokens, kv_tokens, evictions=0, running=0) -> None:
        self._iter.append((len(starts), starts, ends, _ITER_PHASES.index(phase), batch_size,
                           prefill_tokens, decode_tokens, kv_tokens, evictions, running))

    def segment_frame(self, ids: list[str]) -> pd.DataFrame:
        if not self._seg:
            return pd.DataFrame(columns=SEGMENT_COLUMNS)
        req, client, phase, start, end, tokens = zip(*self._seg, strict=True)
        lengths = np.array([len(r) for r in req])
        req = np.concatenate(req)
        client = np.concatenate(client)
        start = _expand(list(start), lengths, float)
        end = _expand(list(end), lengths, float)
        tokens = np.concatenate(tokens)
        phase = np.repeat(np.asarray(phase, dtype=np.int8), lengths)
        order = np.lexsort((start, client))
        return pd.DataFrame({
            "request": np.asarray(ids, dtype=object)[req[order]],
            "client": client[order],
            "instance": np.full(len(order), self.instance, dtype=np.int64),
            "phase": np.asarray(PHASES, dtype=object)[phase[order]],
            "start_ms": start[order],
            "end_ms": end[order],
            "tokens": tokens[order],
        })

    def iteration_frame(self) -> pd.DataFrame:
        if not self._iter:
            return pd.DataFrame(columns=ITERATION_COLUMNS)
        k, start, end, phase, bs, pt, dt, kv, ev, run = zip(*self._iter, strict=True)
        k = np.asarray(k)
        cols = {
            "start_ms": _expand(list(start), k, float), "end_ms": _expand(list(end), k, float),
            "phase": np.asarray(_ITER_PHASES, dtype=object)[np.repeat(np.asarray(phase), k)],
            "batch_size": _expand(list(bs), k, np.int64),
            "prefill_tokens": _expand(list(pt), k, np.int64),
            "decode_tokens": _expand(list(dt), k, np.int64),
            "kv_tokens": _expand(list(kv), k, np.int64),
            "evictions": _expand(list(ev), k, np.int64),
            "running": _expand(list(run), k, np.int64),
        }
        order = np.argsort(cols["start_ms"], kind="stable")
        frame = pd.DataFrame({c: v[order] for c, v in cols.items()})
        frame.insert(0, "instance", self.instance)
        return frame[ITERATION_COLUMNS]


def merge(schedules: list[Schedule], policy: str, clients: int) -> Schedule:
    """One schedule from per-instance schedules."""
    if len(schedules) == 1:
        only = schedules[0]
        return Schedule(policy, only.segments, only.iterations, only.requests, clients)
    return Schedule(
        policy=policy,
        segments=pd.concat([s.segments for s in schedules], ignore_index=True),
        iterations=pd.concat([s.iterations for s in schedules], ignore_index=True),
        requests=pd.concat([s.requests for s in schedules], ignore_index=True),
        clients=clients,
    )
