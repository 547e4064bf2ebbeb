"""Request traces, one registered reader per format (``TRACE_FORMATS``): the Azure LLM inference
trace raw or as published by Vidur, Vidur's length tables, Mooncake's JSON lines, and llmopt's own
JSON lines. Arrivals are rebased so that the first selected request arrives at 0 ms.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmopt.data.ranges import MAX_TOKENS
from llmopt.errors import TraceError

VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


@dataclass(frozen=True)
class TraceFormat:
    name: str
    source: str
    columns: str
    read: Callable[[Path], pd.DataFrame]   # -> columns id, input_tokens, output_tokens, arrival_ms


def read_trace(path: Path, fmt: str = "auto", *, start: int = 0, limit: int | None = None
               ) -> list[dict[str, Any]]:
    """Rows ``{id, input_tokens, output_tokens, arrival_ms}`` of a trace file."""
    if not path.is_file():
        raise TraceError("trace file not found", file=path)
    if fmt == "auto":
        fmt = _guess_format(path)
    if fmt not in TRACE_FORMATS:
        raise TraceError(f"unknown trace format (one of: auto, {', '.join(TRACE_FORMATS)})",
                         file=path, field="format", value=fmt)
    frame = TRACE_FORMATS[fmt].read(path)
    frame = frame.iloc[start: None if limit is None else start + limit]
    if frame.empty:
        raise TraceError("no requests selected (check start/limit)", file=path)
    return _rows(frame, path)


def _guess_format(path: Path) -> str:
    if path.suffix not in (".jsonl", ".ndjson"):
        return "azure"
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = next((line for line in fh if line.strip()), "")
    try:
        keys = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"
    return "mooncake" if isinstance(keys, dict) and "input_length" in keys else "jsonl"


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        raw = pd.read_csv(path, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot parse CSV: {exc}".splitlines()[0], file=path) from exc
    cols = set(raw.columns)
    if set(VIDUR_COLUMNS[1:]) <= cols:
        arrival_ms = (_numeric(raw["arrived_at"], path, "arrived_at") * 1000.0
                      if "arrived_at" in cols else pd.Series(np.zeros(len(raw))))
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
            "wrong columns: expected [arrived_at,]num_prefill_tokens,num_decode_tokens or "
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
    frame = _read_jsonl_records(path)
    _require(frame, ("input_tokens", "output_tokens"), path)
    ids = (frame["id"].astype(str) if "id" in frame
           else pd.Series([f"r{i}" for i in range(len(frame))]))
    if "arrival_ms" in frame and frame["arrival_ms"].isna().any():
        row = int(np.flatnonzero(frame["arrival_ms"].isna().to_numpy())[0])
        raise TraceError("missing on this row: give arrival_ms on every row or on none",
                         file=path, field=f"arrival_ms (row {row})")
    arrival = (_numeric(frame["arrival_ms"], path, "arrival_ms") if "arrival_ms" in frame
               else pd.Series(np.zeros(len(frame))))
    return pd.DataFrame({
        "id": ids.to_numpy(),
        "input_tokens": _tokens(frame["input_tokens"], path, "input_tokens"),
        "output_tokens": _tokens(frame["output_tokens"], path, "output_tokens"),
        "arrival_ms": arrival.to_numpy(dtype=float),
    })


def _read_jsonl_records(path: Path) -> pd.DataFrame:
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
    return pd.DataFrame.from_records(records)


def _require(frame: pd.DataFrame, keys: tuple[str, ...], path: Path) -> None:
    for col in keys:
        if col not in frame:
            raise TraceError(f"missing key {col!r}", file=path, field="columns",
                             value=list(frame.columns))


def _read_mooncake(path: Path) -> pd.DataFrame:
    frame = _read_jsonl_records(path)
    _require(frame, MOONCAKE_KEYS, path)
    return pd.DataFrame({
        "id": [f"r{i}" for i in range(len(frame))],
        "input_tokens": _tokens(frame["input_length"], path, "input_length"),
        "output_tokens": _tokens(frame["output_length"], path, "output_length"),
        "arrival_ms": _numeric(frame["timestamp"], path, "timestamp").to_numpy(dtype=float),
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
    bad = (~np.isfinite(values) | (values < 1) | (values > MAX_TOKENS)
           | (values != np.round(values)))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceError(f"must be an integer token count in [1, {MAX_TOKENS:_}]", file=path,
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


TRACE_FORMATS: dict[str, TraceFormat] = {
    f.name: f for f in [
        TraceFormat("azure", "Azure LLM inference trace 2023 (Azure Public Dataset), raw or as "
                    "processed by Vidur", "TIMESTAMP, ContextTokens, GeneratedTokens; or "
                    "arrived_at (s), num_prefill_tokens, num_decode_tokens", _read_csv),
        TraceFormat("vidur", "Vidur's processed traces and length tables (e.g. arXiv "
                    "summarization)", "[arrived_at (s),] num_prefill_tokens, num_decode_tokens "
                    "(all arrive at 0 ms without arrived_at)", _read_csv),
        TraceFormat("mooncake", "Mooncake FAST'25 traces (kvcache-ai/Mooncake); prefix hash ids "
                    "are not read", "JSON lines: timestamp (ms), input_length, output_length",
                    _read_mooncake),
        TraceFormat("jsonl", "llmopt's own", "JSON lines: input_tokens, output_tokens, "
                    "optionally id and arrival_ms", _read_jsonl),
    ]
}
