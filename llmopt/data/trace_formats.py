"""Request traces, one registered reader per format (``TRACE_FORMATS``): the Azure LLM
inference trace raw or as published by Vidur, Vidur's length tables, Mooncake's JSON lines,
BurstGPT's CSV and llmopt's own JSON lines. The readers, which parse with pandas, are in
:mod:`llmopt.data.traces` and load when a trace is read.

:func:`read_trace` gives rows ``{id, input_tokens, output_tokens, arrival_ms}``:

- Ids are ``r<row>``, ``row`` being the 0-based data row of the file (for JSON lines, the 0-based
  index among the non-blank lines), unless the format carries its own ids (``jsonl``'s ``id``).
  Ids keep their row whatever is dropped, filtered out or reordered.
- ``start`` and ``limit`` count requests in file order, after dropping failed requests
  (BurstGPT rows with ``Response tokens`` 0) and the rows that the filters (``model``,
  ``log_type``, BurstGPT only) leave out. The file is parsed ``CHUNK_ROWS`` rows at a time and
  reading stops after the last selected request: the rows after it are never checked, whatever
  the chunk size, so a selection from the head of a multi-GB file is fast. (A CSV line with the
  wrong number of fields may still be reported from the chunk holding the last selected request.)
- Every value read is checked (of a failed BurstGPT row, only its ``Response tokens``), rows that
  a filter leaves out included: a bad value is a :class:`~llmopt.errors.TraceError` naming the
  file, the column, the 0-based row of the file (the row of its id) and the value, or saying
  that the value is missing (an empty cell, a key a JSON line does not give). Token counts are
  integers >= 1 (negative ones are errors). A missing column is one error naming it and listing
  the expected columns. Errors in the syntax of a JSON line name its line in the file (from 1).
- Arrival times: if the selected requests' timestamps are not non-decreasing, they are sorted by
  arrival time (a stable sort, so equal times keep file order) and a :class:`TraceWarning` names the
  file and the first row out of order. Arrivals are then rebased so that the first request arrives
  at 0 ms.
- Formats without timestamps (a ``vidur`` length table without ``arrived_at``, ``jsonl`` without
  ``arrival_ms``) give ``arrival_ms`` 0.0 on every row, or ``None`` with
  ``timestamps_required=False``, so that the caller can generate arrivals instead.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmopt.errors import LlmoptWarning, TraceError
from llmopt.plugins import Registry, load

if TYPE_CHECKING:
    import pandas as pd

READERS = "llmopt.data.traces"


class TraceWarning(LlmoptWarning):
    """A trace was read, but not exactly as written (e.g. its requests were sorted by arrival)."""


@dataclass(frozen=True)
class Selection:
    """Which requests of a trace to read: ``limit`` requests (all if None) from the ``start``-th,
    in file order, among those matching the filters."""

    start: int = 0
    limit: int | None = None
    model: str | None = None
    log_type: str | None = None

    @property
    def need(self) -> int | None:
        """How many requests to read from the head of the file (None: all)."""
        return None if self.limit is None else self.start + self.limit


@dataclass(frozen=True)
class TraceFormat:
    name: str
    source: str
    columns: str
    # -> the first ``selection.need`` requests in file order, indexed by file row, columns id,
    # input_tokens, output_tokens, arrival_ms (NaN on every row when the file has no timestamps)
    read: str | Callable[[Path, Selection], pd.DataFrame]  # "module:function" or the function
    filters: tuple[str, ...] = ()   # the keyword filters of read_trace that apply


def read_trace(path: Path, fmt: str = "auto", *, start: int = 0, limit: int | None = None,
               model: str | None = None, log_type: str | None = None,
               timestamps_required: bool = True) -> list[dict[str, Any]]:
    """Rows ``{id, input_tokens, output_tokens, arrival_ms}`` of a trace file: ``limit`` requests
    (all if None) from the ``start``-th, sorted by arrival, the first arriving at 0 ms.

    ``model`` and ``log_type`` keep only the BurstGPT rows with that ``Model`` / ``Log Type``.
    Without timestamps in the file, ``arrival_ms`` is 0.0 on every row, or None when
    ``timestamps_required`` is False (the caller then generates arrivals).
    """
    if not path.is_file():
        raise TraceError("trace file not found", file=path)
    if start < 0:
        raise TraceError("must be at least 0", file=path, field="start", value=start)
    if limit is not None and limit < 1:
        raise TraceError("must be at least 1", file=path, field="limit", value=limit)
    if fmt == "auto":
        fmt = _guess_format(path)
    if fmt not in TRACE_FORMATS:
        raise TraceError(f"unknown trace format (one of: auto, {', '.join(TRACE_FORMATS)})",
                         file=path, field="format", value=fmt)
    spec = TRACE_FORMATS[fmt]
    filters = {"model": model, "log_type": log_type}
    for name, value in filters.items():
        if value is not None and name not in spec.filters:
            having = [f.name for f in TRACE_FORMATS.values() if name in f.filters]
            raise TraceError(f"only the {', '.join(having)} format can filter by it (this trace "
                             f"is read as {fmt!r})", file=path, field=name, value=value)
    frame = load(spec.read)(path, Selection(start, limit, model, log_type)).iloc[start:]
    if frame.empty:
        used = [name for name, value in filters.items() if value is not None]
        if start > 0:
            used.insert(0, "start")
        dropped = " (failed requests, Response tokens 0, are dropped)" if fmt == "burstgpt" \
            else ""
        raise TraceError(f"no requests selected (check {', '.join(used)})" if used
                         else f"the trace has no requests{dropped}", file=path)
    if len(set(frame["id"])) != len(frame):
        dup = frame["id"][frame["id"].duplicated()].iloc[0]
        raise TraceError("duplicate request id", file=path, field="id", value=dup)
    arrival = frame["arrival_ms"].astype(float).reset_index(drop=True)
    if arrival.isna().all():
        times: list[float | None] = [0.0 if timestamps_required else None] * len(frame)
    else:
        late = (arrival.diff() < 0).to_numpy().nonzero()[0]
        if late.size:
            row, before = frame.index[late[0]], frame.index[late[0] - 1]
            warnings.warn(f"{path}: row {row} arrives before row {before} (rows counted from "
                          f"0; timestamps out of order); the {len(frame)} selected requests "
                          "are sorted by arrival time, ids keep their file row", TraceWarning,
                          stacklevel=2)
            order = arrival.sort_values(kind="stable").index
            frame, arrival = frame.iloc[order], arrival.iloc[order]
        times = [float(t) for t in arrival - arrival.iloc[0]]
    rows = [
        {"id": str(i), "input_tokens": int(a), "output_tokens": int(b), "arrival_ms": t}
        for i, a, b, t in zip(frame["id"], frame["input_tokens"], frame["output_tokens"],
                              times, strict=True)
    ]
    if "hash_ids" in frame:
        for row, ids, size in zip(rows, frame["hash_ids"], frame["hash_block_tokens"],
                                  strict=True):
            row["hash_ids"], row["hash_block_tokens"] = ids, int(size)
    return rows


def _guess_format(path: Path) -> str:
    if path.suffix not in (".jsonl", ".ndjson"):
        return "burstgpt" if "Request tokens" in load(f"{READERS}:csv_header")(path) \
            else "azure"
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = next((line for line in fh if line.strip()), "")
    try:
        keys = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"
    return "mooncake" if isinstance(keys, dict) and "input_length" in keys else "jsonl"


TRACE_FORMATS: Registry[TraceFormat] = Registry("llmopt.trace_formats", TraceFormat, [
        TraceFormat("azure", "Azure LLM inference trace 2023 (Azure Public Dataset), raw or as "
                    "processed by Vidur", "TIMESTAMP, ContextTokens, GeneratedTokens; or "
                    "arrived_at (s), num_prefill_tokens, num_decode_tokens", f"{READERS}:read_csv"),
        TraceFormat("vidur", "Vidur's processed traces and length tables (e.g. arXiv "
                    "summarization)", "[arrived_at (s),] num_prefill_tokens, num_decode_tokens "
                    "(all arrive at 0 ms without arrived_at)", f"{READERS}:read_csv"),
        TraceFormat("mooncake", "Mooncake FAST'25 traces (kvcache-ai/Mooncake), with their "
                    "prefix hash ids (512-token blocks)", "JSON lines: timestamp (ms), "
                    "input_length, output_length, optionally hash_ids",
                    f"{READERS}:read_mooncake"),
        TraceFormat("jsonl", "llmopt's own", "JSON lines: input_tokens, output_tokens, "
                    "optionally id, arrival_ms, hash_ids and hash_block_tokens (default 16)",
                    f"{READERS}:read_jsonl"),
        TraceFormat("burstgpt", "BurstGPT (HPMLL/BurstGPT), ChatGPT and GPT-4 usage in Azure "
                    "OpenAI; failed requests (Response tokens 0) are dropped; filters: model, "
                    "log_type", "Timestamp (s), Model, Request tokens, Response tokens, Log Type "
                    "(Total tokens is not read)", f"{READERS}:read_burstgpt",
                    filters=("model", "log_type")),
])


__all__ = ["TRACE_FORMATS", "Selection", "TraceFormat", "TraceWarning", "read_trace"]
