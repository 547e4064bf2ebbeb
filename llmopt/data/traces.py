"""Request traces, one registered reader per format (``TRACE_FORMATS``): the Azure LLM inference
trace raw or as published by Vidur, Vidur's length tables, Mooncake's JSON lines, BurstGPT's CSV and
llmopt's own JSON lines.

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

import contextlib
import json
import warnings
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmopt.data.ranges import MAX_TOKENS
from llmopt.errors import LlmoptWarning, TraceError

VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
MOONCAKE_HASH_BLOCK_TOKENS = 512  # the Mooncake traces' block (kvcache-ai/Mooncake, FAST25-release)
DEFAULT_HASH_BLOCK_TOKENS = 16  # JSON lines without hash_block_tokens: vLLM's block size
JSONL_KEYS = ("input_tokens", "output_tokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
                    "Log Type")
BURSTGPT_FILTERS = {"model": "Model", "log_type": "Log Type"}   # read_trace keyword -> column

CHUNK_ROWS = 100_000
"""Rows (CSV) or records (JSON lines) parsed at a time."""


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
    read: Callable[[Path, Selection], pd.DataFrame]
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
    frame = spec.read(path, Selection(start, limit, model, log_type)).iloc[start:]
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
    arrival = frame["arrival_ms"].to_numpy(dtype=float)
    if np.isnan(arrival).all():
        times: list[float | None] = [0.0 if timestamps_required else None] * len(frame)
    else:
        late = np.flatnonzero(np.diff(arrival) < 0)
        if late.size:
            row, before = frame.index[late[0] + 1], frame.index[late[0]]
            warnings.warn(f"{path}: row {row} arrives before row {before} (rows counted from "
                          f"0; timestamps out of order); the {len(frame)} selected requests "
                          "are sorted by arrival time, ids keep their file row", TraceWarning,
                          stacklevel=2)
            order = np.argsort(arrival, kind="stable")
            frame, arrival = frame.iloc[order], arrival[order]
        times = [float(t) for t in arrival - arrival[0]]
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
        return "burstgpt" if "Request tokens" in _csv_header(path) else "azure"
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = next((line for line in fh if line.strip()), "")
    try:
        keys = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"
    return "mooncake" if isinstance(keys, dict) and "input_length" in keys else "jsonl"


# --- reading in chunks --------------------------------------------------------------------------

def _collect(chunks: Generator[pd.DataFrame, None, None], need: int | None,
             pick: Callable[[pd.DataFrame], np.ndarray],
             convert: Callable[[pd.DataFrame], pd.DataFrame]) -> pd.DataFrame:
    """The first ``need`` requests (all if None) of raw ``chunks`` indexed by file row.

    ``pick`` marks the rows of a raw chunk that become selected requests, without checking values;
    the chunk is cut after the ``need``-th one, so that rows past it are never checked, whatever
    the chunk size. ``convert`` checks and converts the rows of the cut chunk that are requests.
    """
    parts = []
    got = 0
    with contextlib.closing(chunks):   # stop parsing the file as soon as enough are read
        for raw in chunks:
            if raw.empty:
                continue
            mask = np.asarray(pick(raw), dtype=bool)
            if need is not None:
                count = np.cumsum(mask)
                if got + count[-1] >= need:
                    cut = int(np.searchsorted(count, need - got)) + 1
                    raw, mask = raw.iloc[:cut], mask[:cut]
            part = convert(raw)
            if mask.any():
                parts.append(part.loc[raw.index[mask]])
                got += int(mask.sum())
            if need is not None and got >= need:
                break
    if not parts:
        return _frame(pd.RangeIndex(0), np.zeros(0, np.int64), np.zeros(0, np.int64), None)
    return pd.concat(parts)


def _frame(index: pd.Index, inp: np.ndarray, out: np.ndarray, arrival: np.ndarray | None,
           ids: Iterable[str] | None = None,
           hashes: tuple[list[tuple[int, ...]], list[int]] | None = None) -> pd.DataFrame:
    """The rows of a trace; ``hashes``: each row's prompt block hashes and block tokens."""
    columns: dict[str, Any] = {
        "id": list(ids) if ids is not None else [f"r{i}" for i in index],
        "input_tokens": inp,
        "output_tokens": out,
        "arrival_ms": np.full(len(index), np.nan) if arrival is None else arrival,
    }
    if hashes is not None:
        columns["hash_ids"], columns["hash_block_tokens"] = hashes
    return pd.DataFrame(columns, index=index)


def _csv_error(exc: Exception, path: Path) -> TraceError:
    return TraceError(f"cannot parse CSV: {exc}".splitlines()[0], file=path)


_CSV_ERRORS = (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError)


def _csv_header(path: Path) -> list[str]:
    try:
        return [str(c) for c in pd.read_csv(path, skipinitialspace=True, nrows=0).columns]
    except _CSV_ERRORS as exc:
        raise _csv_error(exc, path) from exc


def _csv_chunks(path: Path, nrows: int | None = None) -> Generator[pd.DataFrame, None, None]:
    """The data rows of a CSV file, ``CHUNK_ROWS`` at a time, indexed by their 0-based row."""
    offset = 0
    try:
        with pd.read_csv(path, skipinitialspace=True, chunksize=CHUNK_ROWS,
                         nrows=nrows) as reader:
            for chunk in reader:
                chunk.index = pd.RangeIndex(offset, offset + len(chunk))
                offset += len(chunk)
                yield chunk
    except _CSV_ERRORS as exc:
        raise _csv_error(exc, path) from exc


def _jsonl_chunks(path: Path, need: int | None) -> Generator[pd.DataFrame, None, None]:
    """The records of a JSON-lines file, ``CHUNK_ROWS`` at a time and no more than ``need``,
    indexed by their 0-based index among the non-blank lines."""
    batch: list[dict[str, Any]] = []
    offset = 0
    with path.open("rb") as fh:
        for lineno, data in enumerate(fh, 1):
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceError(f"not UTF-8 text ({exc.reason})", file=path,
                                 field=f"line {lineno}") from exc
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
            batch.append(obj)
            if len(batch) >= CHUNK_ROWS or (need is not None and offset + len(batch) >= need):
                yield pd.DataFrame(batch, index=pd.RangeIndex(offset, offset + len(batch)))
                offset += len(batch)
                batch = []
                if need is not None and offset >= need:
                    return
    if batch:
        yield pd.DataFrame(batch, index=pd.RangeIndex(offset, offset + len(batch)))
    elif offset == 0:
        raise TraceError("trace is empty", file=path)


def _all_rows(raw: pd.DataFrame) -> np.ndarray:
    return np.ones(len(raw), dtype=bool)


def _missing_columns(path: Path, present: Iterable[str], required: Iterable[str],
                     expected: str) -> None:
    present = list(present)
    missing = [c for c in required if c not in present]
    if missing:
        raise TraceError(f"wrong columns: missing {', '.join(missing)}; expected {expected}",
                         file=path, field="columns", value=present)


# --- the formats --------------------------------------------------------------------------------

def _read_csv(path: Path, sel: Selection) -> pd.DataFrame:
    """Vidur's columns (with or without ``arrived_at``) or the raw Azure ones."""
    header = _csv_header(path)
    azure = not set(VIDUR_COLUMNS[1:]) <= set(header)
    if azure and not set(AZURE_COLUMNS) <= set(header):
        closest = AZURE_COLUMNS if set(AZURE_COLUMNS) & set(header) else VIDUR_COLUMNS[1:]
        missing = ", ".join(c for c in closest if c not in header)
        raise TraceError(
            f"wrong columns: missing {missing}; expected [arrived_at,]num_prefill_tokens,"
            "num_decode_tokens or TIMESTAMP,ContextTokens,GeneratedTokens",
            file=path, field="columns", value=header,
        )
    timed = azure or "arrived_at" in header
    names = AZURE_COLUMNS[1:] if azure else VIDUR_COLUMNS[1:]
    origin: list[pd.Timestamp] = []   # the first date-time of the file (raw Azure)

    def convert(raw: pd.DataFrame) -> pd.DataFrame:
        if azure:
            arrival: np.ndarray | None = _datetime_ms(raw["TIMESTAMP"], path, origin)
        elif timed:
            arrival = (_numeric(raw["arrived_at"], path, "arrived_at") * 1000.0).to_numpy()
        else:
            arrival = None
        return _frame(raw.index, _tokens(raw[names[0]], path, names[0]),
                      _tokens(raw[names[1]], path, names[1]), arrival)

    # every row is a request: the parser itself stops after the last selected one
    return _collect(_csv_chunks(path, nrows=sel.need), sel.need, _all_rows, convert)


def _datetime_ms(col: pd.Series, path: Path, origin: list[pd.Timestamp]) -> np.ndarray:
    """Milliseconds after the file's first date-time (``origin``, set on the first call)."""
    try:
        stamps = pd.to_datetime(col, format="mixed", errors="coerce")
        bad = stamps.isna().to_numpy()
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise _bad_value(col, pos, path, str(col.name), "unparseable date-time")
        if not origin:
            origin.append(stamps.iloc[0])
        return ((stamps - origin[0]).dt.total_seconds() * 1000.0).to_numpy(dtype=float)
    except (ValueError, TypeError) as exc:   # e.g. time zones mixed with naive date-times
        raise TraceError(f"unparseable date-time: {exc}".splitlines()[0], file=path,
                         field=str(col.name)) from exc


def _read_burstgpt(path: Path, sel: Selection) -> pd.DataFrame:
    """BurstGPT: failed requests (``Response tokens`` 0) dropped, optional Model/Log Type filters.
    """
    wanted = {column: getattr(sel, field) for field, column in BURSTGPT_FILTERS.items()
              if getattr(sel, field) is not None}
    _missing_columns(path, _csv_header(path),
                     ["Timestamp", "Request tokens", "Response tokens", *wanted],
                     ", ".join(BURSTGPT_COLUMNS) + " (Total tokens is not read)")
    seen: dict[str, set[str]] = {column: set() for column in wanted}

    def answered(raw: pd.DataFrame) -> np.ndarray:
        return (pd.to_numeric(raw["Response tokens"], errors="coerce") != 0).to_numpy()

    def pick(raw: pd.DataFrame) -> np.ndarray:
        mask = answered(raw)   # a value that is not a number counts, so that convert reports it
        for column, value in wanted.items():
            labels = raw[column].astype(object).where(raw[column].notna(), "").astype(str)
            seen[column].update(labels.unique())
            mask = mask & (labels == value).to_numpy()
        return mask

    def convert(raw: pd.DataFrame) -> pd.DataFrame:
        rows = raw[answered(raw)]
        return _frame(rows.index, _tokens(rows["Request tokens"], path, "Request tokens"),
                      _tokens(rows["Response tokens"], path, "Response tokens"),
                      (_numeric(rows["Timestamp"], path, "Timestamp") * 1000.0).to_numpy())

    frame = _collect(_csv_chunks(path), sel.need, pick, convert)
    if frame.empty:   # then the whole file was read: say which filter value is nowhere in it
        for field, column in BURSTGPT_FILTERS.items():
            if column in wanted and wanted[column] not in seen[column]:
                values = sorted(seen[column])
                shown = ", ".join(repr(v) for v in values[:10]) or "none"
                more = f" and {len(values) - 10} more" if len(values) > 10 else ""
                raise TraceError(f"no row has this {column} (values present: {shown}{more})",
                                 file=path, field=field, value=wanted[column])
    return frame


class _Optional:
    """A JSON-lines key given on every record or on none; the first record decides which."""

    def __init__(self, key: str, path: Path) -> None:
        self.key, self.path = key, path
        self.given: bool | None = None

    def values(self, raw: pd.DataFrame) -> pd.Series | None:
        col = raw[self.key] if self.key in raw else pd.Series(None, index=raw.index,
                                                               dtype=object)
        present = col.notna().to_numpy()
        if self.given is None:
            self.given = bool(present[0])
        odd = np.flatnonzero(present != self.given)
        if odd.size:
            row = raw.index[odd[0]]
            reason = ("missing on this row" if self.given
                      else "given on this row but not on row 0")
            raise TraceError(f"{reason}: give {self.key} on every row or on none",
                             file=self.path, field=_row_field(self.key, row))
        return col if self.given else None


def _required(raw: pd.DataFrame, keys: tuple[str, ...], path: Path) -> pd.DataFrame:
    """``raw`` with every key of ``keys`` a column: missing from the first chunk is an error;
    missing from a later chunk only makes the rows' values NaN, reported by their row."""
    if raw.index[0] == 0:
        _missing_columns(path, raw.columns, keys, ", ".join(keys))
    return raw.reindex(columns=[*raw.columns, *(k for k in keys if k not in raw)])


def _read_jsonl(path: Path, sel: Selection) -> pd.DataFrame:
    ids, arrivals = _Optional("id", path), _Optional("arrival_ms", path)
    hashes, sizes = _Optional("hash_ids", path), _Optional("hash_block_tokens", path)

    def convert(raw: pd.DataFrame) -> pd.DataFrame:
        raw = _required(raw, JSONL_KEYS, path)
        id_col, arrival_col = ids.values(raw), arrivals.values(raw)
        hash_col, size_col = hashes.values(raw), sizes.values(raw)
        if size_col is not None and hash_col is None:
            raise TraceError("given without hash_ids", file=path,
                             field=_row_field("hash_block_tokens", raw.index[0]))
        return _frame(
            raw.index,
            _tokens(raw["input_tokens"], path, "input_tokens"),
            _tokens(raw["output_tokens"], path, "output_tokens"),
            None if arrival_col is None
            else _numeric(arrival_col, path, "arrival_ms").to_numpy(),
            None if id_col is None else [str(i) for i in id_col],
            None if hash_col is None else (
                _hash_ids(hash_col, path),
                [DEFAULT_HASH_BLOCK_TOKENS] * len(raw) if size_col is None
                else _tokens(size_col, path, "hash_block_tokens").tolist()),
        )

    return _collect(_jsonl_chunks(path, sel.need), sel.need, _all_rows, convert)


def _read_mooncake(path: Path, sel: Selection) -> pd.DataFrame:
    hashes = _Optional("hash_ids", path)

    def convert(raw: pd.DataFrame) -> pd.DataFrame:
        raw = _required(raw, MOONCAKE_KEYS, path)
        hash_col = hashes.values(raw)
        return _frame(raw.index, _tokens(raw["input_length"], path, "input_length"),
                      _tokens(raw["output_length"], path, "output_length"),
                      _numeric(raw["timestamp"], path, "timestamp").to_numpy(),
                      hashes=None if hash_col is None else (
                          _hash_ids(hash_col, path),
                          [MOONCAKE_HASH_BLOCK_TOKENS] * len(raw)))

    return _collect(_jsonl_chunks(path, sel.need), sel.need, _all_rows, convert)


# --- values -------------------------------------------------------------------------------------

def _row_field(name: str, row: object) -> str:
    return f"{name} (row {row}, counted from 0)"


def _bad_value(col: pd.Series, pos: int, path: Path, name: str, rule: str) -> TraceError:
    """The error for ``col``'s value at position ``pos``: "missing" for an empty CSV cell or a
    key a JSON line does not give, else the value and the ``rule`` it breaks."""
    value = col.iloc[pos]
    field = _row_field(name, col.index[pos])
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return TraceError("missing (an empty cell, NA or NaN, or a key this line does not give)",
                          file=path, field=field)
    return TraceError(rule, file=path, field=field, value=value, has_value=True)


def _numeric(col: pd.Series, path: Path, name: str) -> pd.Series:
    values = pd.to_numeric(col, errors="coerce")
    bad = values.isna() | ~np.isfinite(values) | (values < 0)
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        raise _bad_value(col, pos, path, name, "must be a non-negative number")
    return values.astype(float)


def _hash_ids(col: pd.Series, path: Path) -> list[tuple[int, ...]]:
    """Each row's ``hash_ids``: a non-empty list of non-negative integers."""
    out = []
    for pos, value in enumerate(col):
        if (not isinstance(value, list) or not value
                or not all(type(x) is int and x >= 0 for x in value)):
            raise _bad_value(col, pos, path, "hash_ids",
                             "must be a non-empty list of non-negative integers")
        out.append(tuple(value))
    return out


def _tokens(col: pd.Series, path: Path, name: str) -> np.ndarray:
    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    bad = (~np.isfinite(values) | (values < 1) | (values > MAX_TOKENS)
           | (values != np.round(values)))
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise _bad_value(col, pos, path, name,
                         f"must be an integer token count in [1, {MAX_TOKENS:_}]")
    return values.astype(np.int64)


TRACE_FORMATS: dict[str, TraceFormat] = {
    f.name: f for f in [
        TraceFormat("azure", "Azure LLM inference trace 2023 (Azure Public Dataset), raw or as "
                    "processed by Vidur", "TIMESTAMP, ContextTokens, GeneratedTokens; or "
                    "arrived_at (s), num_prefill_tokens, num_decode_tokens", _read_csv),
        TraceFormat("vidur", "Vidur's processed traces and length tables (e.g. arXiv "
                    "summarization)", "[arrived_at (s),] num_prefill_tokens, num_decode_tokens "
                    "(all arrive at 0 ms without arrived_at)", _read_csv),
        TraceFormat("mooncake", "Mooncake FAST'25 traces (kvcache-ai/Mooncake), with their "
                    "prefix hash ids (512-token blocks)", "JSON lines: timestamp (ms), "
                    "input_length, output_length, optionally hash_ids", _read_mooncake),
        TraceFormat("jsonl", "llmopt's own", "JSON lines: input_tokens, output_tokens, "
                    "optionally id, arrival_ms, hash_ids and hash_block_tokens (default 16)",
                    _read_jsonl),
        TraceFormat("burstgpt", "BurstGPT (HPMLL/BurstGPT), ChatGPT and GPT-4 usage in Azure "
                    "OpenAI; failed requests (Response tokens 0) are dropped; filters: model, "
                    "log_type", "Timestamp (s), Model, Request tokens, Response tokens, Log Type "
                    "(Total tokens is not read)", _read_burstgpt,
                    filters=("model", "log_type")),
    ]
}
