"""The trace readers of the formats registered in :mod:`llmopt.data.trace_formats` (which
documents what :func:`read_trace` gives): each parses its file with pandas, in chunks, and checks
every value it reads."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmopt.data.ranges import MAX_TOKENS
from llmopt.data.trace_formats import TRACE_FORMATS, Selection, TraceWarning, read_trace
from llmopt.errors import TraceError

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


def csv_header(path: Path) -> list[str]:
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

def read_csv(path: Path, sel: Selection) -> pd.DataFrame:
    """Vidur's columns (with or without ``arrived_at``) or the raw Azure ones."""
    header = csv_header(path)
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


def read_burstgpt(path: Path, sel: Selection) -> pd.DataFrame:
    """BurstGPT: failed requests (``Response tokens`` 0) dropped, optional Model/Log Type filters.
    """
    wanted = {column: getattr(sel, field) for field, column in BURSTGPT_FILTERS.items()
              if getattr(sel, field) is not None}
    _missing_columns(path, csv_header(path),
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


def read_jsonl(path: Path, sel: Selection) -> pd.DataFrame:
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


def read_mooncake(path: Path, sel: Selection) -> pd.DataFrame:
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


__all__ = ["CHUNK_ROWS", "TRACE_FORMATS", "Selection", "TraceWarning", "csv_header",
           "read_burstgpt", "read_csv", "read_jsonl", "read_mooncake", "read_trace"]
