"""Request traces: Azure LLM inference trace (raw or as published by Vidur) and JSON lines.

Accepted column sets
--------------------
``azure``/``vidur`` CSV
    ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens`` (Vidur's processed trace), or
    ``TIMESTAMP`` (date-time), ``ContextTokens``, ``GeneratedTokens`` (raw Azure Public Dataset).
``jsonl``
    one object a line: ``input_tokens``, ``output_tokens``, optionally ``id`` and ``arrival_ms``.

Arrivals are rebased so that the first selected request arrives at 0 ms.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmopt.errors import TraceError

VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_trace(path: Path, fmt: str = "auto", *, start: int = 0, limit: int | None = None
               ) -> list[dict[str, Any]]:
    """Rows ``{id, input_tokens, output_tokens, arrival_ms}`` of a trace file."""
    if not path.is_file():
        raise TraceError("trace file not found", file=path)
    if fmt == "auto":
        fmt = "jsonl" if path.suffix in (".jsonl", ".ndjson") else "azure"
    frame = _read_jsonl(path) if fmt == "jsonl" else _read_azure_csv(path)
    frame = frame.iloc[start: None if limit is None else start + limit]
    if frame.empty:
        raise TraceError("no requests selected (check start/limit)", file=path)
    return _rows(frame, path)


def _read_azure_csv(path: Path) -> pd.DataFrame:
    try:
        raw = pd.read_csv(path, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot parse CSV: {exc}".splitlines()[0], file=path) from exc
    cols = set(raw.columns)
    if set(VIDUR_COLUMNS) <= cols:
        arrival_ms = _numeric(raw["arrived_at"], path, "arrived_at") * 1000.0
        inp, out = raw["num_prefill_tokens"], raw["num_decode_tokens"]
        names = VIDUR_COLUMNS[1:]
    elif set(AZURE_COLUMNS) <= cols:
        try:
            stamps = pd.to_datetime(raw["TIMESTAMP"], format="mixed")
        except (ValueError, TypeError) as exc:
            raise TraceError(f"unparseable date-time: {exc}", file=path,
                             field="TIMESTAMP") from exc
        arrival_ms = (stamps - stamps.min()).dt.total_seconds() * 1000.0
        inp, out = raw["ContextTokens"], raw["GeneratedTokens"]
        names = AZURE_COLUMNS[1:]
    else:
        raise TraceError(
            "wrong columns: expected arrived_at,num_prefill_tokens,num_decode_tokens or "
            "TIMESTAMP,ContextTokens,GeneratedTokens",
            file=path, field="columns", value=list(raw.columns),
        )
    return pd.DataFrame({
        "id": [f"r{i}" for i in range(len(raw))],
        "input_tokens": _tokens(inp, path, names[0]),
        "output_tokens": _tokens(out, path, names[1]),
        "arrival_ms": arrival_ms.to_numpy(dtype=float),
    })


def _read_jsonl(path: Path) -> pd.DataFrame:
    records = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"invalid JSON: {exc.msg}", file=path,
                                 field=f"line {lineno}") from exc
            if not isinstance(obj, dict):
                raise TraceError("each line must be a JSON object", file=path,
                                 field=f"line {lineno}")
            records.append(obj)
    if not records:
        raise TraceError("trace is empty", file=path)
    frame = pd.DataFrame.from_records(records)
    for col in ("input_tokens", "output_tokens"):
        if col not in frame:
            raise TraceError(f"missing key {col!r}", file=path, field="columns",
                             value=list(frame.columns))
    ids = (frame["id"].astype(str) if "id" in frame
           else pd.Series([f"r{i}" for i in range(len(frame))]))
    arrival = (_numeric(frame["arrival_ms"], path, "arrival_ms") if "arrival_ms" in frame
               else pd.Series(np.zeros(len(frame))))
    return pd.DataFrame({
        "id": ids.to_numpy(),
        "input_tokens": _tokens(frame["input_tokens"], path, "input_tokens"),
        "output_tokens": _tokens(frame["output_tokens"], path, "output_tokens"),
        "arrival_ms": arrival.to_numpy(dtype=float),
    })


def _numeric(col: pd.Series, path: Path, name: str) -> pd.Series:
    values = pd.to_numeric(col, errors="coerce")
    bad = values.isna() | ~np.isfinite(values) | (values < 0)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise TraceError("must be a non-negative number", file=path, field=f"{name} (row {row})",
                         value=col.iloc[row], has_value=True)
    return values.astype(float)


def _tokens(col: pd.Series, path: Path, name: str) -> np.ndarray:
    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values < 1) | (values != np.round(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceError("must be a positive integer token count", file=path,
                         field=f"{name} (row {row})", value=col.iloc[row], has_value=True)
    return values.astype(np.int64)


def _rows(frame: pd.DataFrame, path: Path) -> list[dict[str, Any]]:
    arrival = frame["arrival_ms"].to_numpy(dtype=float)
    arrival = arrival - arrival.min()
    if len(set(frame["id"])) != len(frame):
        dup = frame["id"][frame["id"].duplicated()].iloc[0]
        raise TraceError("duplicate request id", file=path, field="id", value=dup)
    return [
        {"id": str(i), "input_tokens": int(a), "output_tokens": int(b), "arrival_ms": float(t)}
        for i, a, b, t in zip(frame["id"], frame["input_tokens"], frame["output_tokens"],
                              arrival, strict=True)
    ]
