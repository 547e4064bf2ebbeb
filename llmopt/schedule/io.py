"""A schedule's tables in one Parquet file beside the solution JSON (pyarrow).

The file holds the segments and the iteration log as one table: ``table`` says which
(``segment`` or ``iteration``) and each row fills its own columns (the others are null).
Requests and phases are dictionary-encoded and the file is zstd-compressed, so a replay of the
one-hour Azure trace (hundreds of thousands of rows) takes a few MB where JSON took 105 MB.
The solution JSON names the file and its SHA-256; reading checks both.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from llmopt.errors import SolutionFileError
from llmopt.files import sidecar_name, write_atomic
from llmopt.schedule.schedule import ITERATION_COLUMNS, SEGMENT_COLUMNS

__all__ = ["read_tables", "sidecar_name", "write_tables"]

_SEGMENT_INTS = ("client", "instance", "tokens")
_ITERATION_INTS = ("instance", "batch_size", "prefill_tokens", "decode_tokens", "kv_tokens",
                   "evictions", "running")


def write_tables(path: Path, segments: pd.DataFrame, iterations: pd.DataFrame) -> str:
    """Write both tables into ``path`` atomically; the file's SHA-256. The columns go to
    Arrow without an intermediate frame (numeric columns without copies, categoricals as
    dictionaries), so that a trace replay's millions of rows cost little memory."""
    seg = _arrow(segments, SEGMENT_COLUMNS, "segment")
    its = _arrow(iterations, ITERATION_COLUMNS, "iteration")
    table = pa.concat_tables([seg, its], promote_options="default")
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    data = buffer.getvalue()
    write_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


def _arrow(frame: pd.DataFrame, columns: list[str], kind: str) -> pa.Table:
    arrays = {"table": pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(len(frame), dtype=np.int8)), pa.array([kind]))}
    for col in columns:
        values = frame[col]
        if isinstance(values.dtype, pd.CategoricalDtype):
            arrays[col] = pa.DictionaryArray.from_arrays(
                pa.array(values.cat.codes.to_numpy()),
                pa.array(values.cat.categories.astype(str)))
        elif col in ("request", "phase"):
            arrays[col] = pa.array(values.astype(str)).dictionary_encode()
        elif col.endswith("_ms"):
            arrays[col] = pa.array(values.to_numpy(dtype=np.float64))
        else:
            arrays[col] = pa.array(values.to_numpy(dtype=np.int64))
    return pa.table(arrays)


def read_tables(path: Path, sha256: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Segments and iterations from ``path``, checked against ``sha256`` when given."""
    if not path.is_file():
        raise SolutionFileError("the schedule file it names is missing", file=path)
    data = path.read_bytes()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise SolutionFileError("the schedule file's SHA-256 differs from the one the solution "
                                "names: it was changed or belongs to another solution", file=path)
    try:
        frame = pq.read_table(io.BytesIO(data)).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SolutionFileError(f"cannot read the schedule file: {exc}", file=path) from exc
    if "table" not in frame:
        raise SolutionFileError("not a schedule file (no 'table' column)", file=path)
    kind = frame.pop("table").astype(str)
    seg = frame.loc[kind == "segment", [c for c in SEGMENT_COLUMNS if c in frame]]
    its = frame.loc[kind == "iteration", [c for c in ITERATION_COLUMNS if c in frame]]
    seg = seg.reset_index(drop=True)
    its = its.reset_index(drop=True)
    for part, cols in ((seg, _SEGMENT_INTS), (its, _ITERATION_INTS)):
        for col in cols:
            if col in part and not part[col].isna().any():
                part[col] = part[col].astype("int64")
    for frame_, col in ((seg, "request"), (seg, "phase"), (its, "phase")):
        if col in frame_:
            frame_[col] = frame_[col].astype(str)
    return seg, its
