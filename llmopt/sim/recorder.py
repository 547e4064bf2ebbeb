"""Collects segments and iterations while an engine runs and builds the schedule tables.

Appends are cheap (raw arrays or scalars, one append per prefill stage, batch or run of identical
decode rounds) and are expanded into columns once, when the tables are built; requests are
integer indices into the engine's request list until then."""

from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd

from llmopt.schedule import ITERATION_COLUMNS, SEGMENT_COLUMNS, Schedule

PHASES = ("prefill", "decode", "refill", "evict", "hit")
NO_HIT_PHASES = PHASES[:4]  # the categories of a schedule without a prefix cache
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


def _columns(rows: list[tuple], width: int) -> list[np.ndarray]:
    """The columns of equal-width numeric rows, as float64 arrays."""
    flat = np.fromiter(chain.from_iterable(rows), dtype=float, count=width * len(rows))
    return list(flat.reshape(len(rows), width).T)


class Recorder:
    def __init__(self, instance_index: int, hit_phase: bool = False) -> None:
        self.instance = instance_index
        self.hit_phase = hit_phase  # segments may be prefix-cache hits (a phase category)
        self._seg: list[tuple] = []
        self._iter: list[tuple] = []
        self._seg_rows: list[tuple] = []
        self._iter_rows: list[tuple] = []

    def segments(self, requests: np.ndarray, clients: np.ndarray, phase: str, starts, ends,
                 tokens: np.ndarray) -> None:
        """Segments of ``requests`` (engine indices) in one phase; starts/ends scalar or array.
        The arrays are kept, not copied: pass arrays the caller will not change."""
        if len(requests):
            self._seg.append((np.asarray(requests), np.asarray(clients), _PHASE_CODE[phase],
                              np.asarray(starts, dtype=float), np.asarray(ends, dtype=float),
                              np.asarray(tokens)))

    def segment(self, request: int, client: int, phase: str, start: float, end: float,
                tokens: int) -> None:
        """One segment, from scalars."""
        self._seg_rows.append((request, client, _PHASE_CODE[phase], start, end, tokens))

    def iteration(self, start: float, end: float, phase: str, batch_size: int,
                  prefill_tokens: int, decode_tokens: int, kv_tokens: int, evictions: int,
                  running: int) -> None:
        """One iteration, from scalars."""
        self._iter_rows.append((start, end, _ITER_PHASES.index(phase), batch_size,
                                prefill_tokens, decode_tokens, kv_tokens, evictions, running))

    def _flush_rows(self) -> None:
        """Scalar rows into one chunk of columns each (parsed as float64 in one pass: every
        value is a float or an integer well below 2^53, so the integers come back exact)."""
        if self._seg_rows:
            req, client, phase, start, end, tokens = _columns(self._seg_rows, 6)
            self._seg.append((req.astype(np.int64), client.astype(np.int64),
                              phase.astype(np.int8), start, end, tokens.astype(np.int64)))
            self._seg_rows = []
        if self._iter_rows:
            start, end, phase, *counts = _columns(self._iter_rows, 9)
            self._iter.append((len(start), start, end, phase.astype(np.int64),
                               *(c.astype(np.int64) for c in counts)))
            self._iter_rows = []

    def iterations(self, starts: np.ndarray, ends: np.ndarray, phase: str, batch_size,
                   prefill_tokens, decode_tokens, kv_tokens, evictions=0, running=0) -> None:
        self._iter.append((len(starts), starts, ends, _ITER_PHASES.index(phase), batch_size,
                           prefill_tokens, decode_tokens, kv_tokens, evictions, running))

    def segment_frame(self, ids: list[str]) -> pd.DataFrame:
        """The segments table, sorted by client and start. Requests and phases are
        categorical, counts 32-bit: a trace replay can have millions of segments, so the
        columns are filled chunk by chunk and the recorded chunks released as they go."""
        self._flush_rows()
        chunks = [list(ch) for ch in self._seg]  # (request, client, phase, start, end, tokens)
        self._seg = []
        lengths = [len(ch[0]) for ch in chunks]

        def column(k: int, dtype) -> np.ndarray:
            out = np.empty(sum(lengths), dtype=dtype)
            pos = 0
            for ch, n in zip(chunks, lengths, strict=True):
                out[pos:pos + n] = ch[k]
                ch[k] = None
                pos += n
            return out

        start, client = column(3, float), column(1, np.int32)
        order = np.lexsort((start, client))
        columns = {"client": client[order], "start_ms": start[order]}
        del start, client
        for name, k, dtype in (("end_ms", 4, float), ("tokens", 5, np.int32),
                               ("request", 0, np.int32), ("phase", 2, np.int8)):
            columns[name] = column(k, dtype)[order]
        return pd.DataFrame({
            "request": pd.Categorical.from_codes(columns.pop("request"),
                                                 categories=pd.Index(ids)),
            "client": columns.pop("client"),
            "instance": np.full(len(order), self.instance, dtype=np.int32),
            "phase": pd.Categorical.from_codes(columns.pop("phase"), categories=pd.Index(
                PHASES if self.hit_phase else NO_HIT_PHASES)),
            **columns,
        }, copy=False)[SEGMENT_COLUMNS]

    def iteration_frame(self) -> pd.DataFrame:
        """The iterations table, by start time (phase categorical, counts 32-bit but KVs)."""
        self._flush_rows()
        if not self._iter:
            return pd.DataFrame(columns=ITERATION_COLUMNS)
        lens, start, end, phase, bs, pt, dt, kv, ev, run = zip(*self._iter, strict=True)
        self._iter = []
        k = np.asarray(lens)
        starts = _expand(list(start), k, float)
        order = np.argsort(starts, kind="stable")
        cols = {"instance": np.full(len(order), self.instance, dtype=np.int32),
                "start_ms": starts[order], "end_ms": _expand(list(end), k, float)[order],
                "phase": pd.Categorical.from_codes(_expand(list(phase), k, np.int8)[order],
                                                   categories=pd.Index(_ITER_PHASES))}
        del starts
        for name, values, dtype in (("batch_size", bs, np.int32), ("prefill_tokens", pt, np.int32),
                                    ("decode_tokens", dt, np.int32), ("kv_tokens", kv, np.int64),
                                    ("evictions", ev, np.int32), ("running", run, np.int32)):
            cols[name] = _expand(list(values), k, dtype)[order]
        return pd.DataFrame(cols, copy=False)[ITERATION_COLUMNS]


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
