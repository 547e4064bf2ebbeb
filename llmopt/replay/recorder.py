"""Collects segments and iterations while an engine runs and builds the schedule tables.

Everything is appended in numpy chunks (one append per prefill stage or per run of identical
decode rounds), with requests as integer indices into the instance, so that recording stays a
small part of a replay's cost."""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmopt.schedule import ITERATION_COLUMNS, SEGMENT_COLUMNS, Schedule

PHASES = ("prefill", "decode", "refill")
_PHASE_CODE = {p: k for k, p in enumerate(PHASES)}
_ITER_PHASES = ("prefill", "decode", "mixed")


class Recorder:
    def __init__(self, instance_index: int) -> None:
        self.instance = instance_index
        self._seg: list[tuple[np.ndarray, ...]] = []
        self._iter: list[tuple[np.ndarray, ...]] = []

    def segments(self, requests: np.ndarray, clients: np.ndarray, phase: str,
                 starts: np.ndarray | float, ends: np.ndarray | float, tokens: np.ndarray
                 ) -> None:
        """Segments of ``requests`` (instance indices) in one phase."""
        k = len(requests)
        if k == 0:
            return
        self._seg.append((
            np.asarray(requests, dtype=np.int64), np.asarray(clients, dtype=np.int64),
            np.full(k, _PHASE_CODE[phase], dtype=np.int8),
            np.broadcast_to(np.asarray(starts, dtype=float), (k,)).copy(),
            np.broadcast_to(np.asarray(ends, dtype=float), (k,)).copy(),
            np.asarray(tokens, dtype=np.int64).copy(),
        ))

    def iterations(self, starts: np.ndarray, ends: np.ndarray, phase: str, batch_size,
                   prefill_tokens, decode_tokens, kv_tokens, evictions=0) -> None:
        k = len(starts)

        def col(x) -> np.ndarray:
            return np.broadcast_to(np.asarray(x, dtype=np.int64), (k,))

        self._iter.append((
            np.asarray(starts, dtype=float), np.asarray(ends, dtype=float),
            np.full(k, _ITER_PHASES.index(phase), dtype=np.int8), col(batch_size),
            col(prefill_tokens), col(decode_tokens), col(kv_tokens), col(evictions),
        ))

    def segment_frame(self, ids: list[str]) -> pd.DataFrame:
        if not self._seg:
            return pd.DataFrame(columns=SEGMENT_COLUMNS)
        req, client, phase, start, end, tokens = (np.concatenate(c) for c in zip(*self._seg,
                                                                                   strict=True))
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
        start, end, phase, bs, pt, dt, kv, ev = (np.concatenate(c) for c in zip(*self._iter,
                                                                                strict=True))
        order = np.argsort(start, kind="stable")
        return pd.DataFrame({
            "instance": np.full(len(order), self.instance, dtype=np.int64),
            "start_ms": start[order], "end_ms": end[order],
            "phase": np.asarray(_ITER_PHASES, dtype=object)[phase[order]],
            "batch_size": bs[order], "prefill_tokens": pt[order], "decode_tokens": dt[order],
            "kv_tokens": kv[order], "evictions": ev[order],
        })


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
