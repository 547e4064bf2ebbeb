"""A sweep's output folder: what ran, cell by cell, and the tidy tables built from it.

::

    OUT/sweep.json          which sweep file this folder holds (its content hash)
    OUT/cells/<key>.json    one finished cell: its parameters and its row (written atomically
                            as it finishes, so an interrupted sweep keeps every finished cell)
    OUT/results.parquet     one row per cell: parameters, metrics, validity, runtime
    OUT/results.csv         the same table as CSV
    OUT/search.parquet/csv  the bisection search's answer per group (when the sweep searches),
                            with the goodput bound of a rate search for attainment
    OUT/ceiling.parquet/csv the SLO ceiling's curve: its share per workload and rate probed
    OUT/ceilings/<key>.json one goodput bound per workload (``llmopt.sweep.goodput``)
    OUT/plot.png            the default plot
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from llmopt.errors import InputFileError, OptionError
from llmopt.files import load_json_mapping, write_atomic
from llmopt.sweep.spec import INTEGER_PARAMETERS, Cell, Sweep
from llmopt.version import __version__

MANIFEST = "sweep.json"
ROW_COLUMNS = ("cell_status", "valid", "invalid_reason", "error", "requests", "runtime_s",
               "instance_sha256", "key")

INTEGER_COLUMNS = INTEGER_PARAMETERS | {"iterations", "evictions", "kv_tokens_max", "requests"}


class Store:
    def __init__(self, folder: Path, sweep: Sweep) -> None:
        self.folder = folder
        self.sweep = sweep
        self.cells = folder / "cells"

    @classmethod
    def check(cls, folder: Path, sweep: Sweep) -> Store:
        """The store of ``sweep`` in ``folder``; refused when the folder holds anything else
        (another sweep file, or files that are not a sweep's). Nothing is written."""
        manifest = folder / MANIFEST
        if manifest.exists():
            held = load_json_mapping(manifest, "sweep manifest")
            if held.get("sweep_sha256") != sweep.sha256:
                raise OptionError(f"holds a sweep of a different file ({held.get('file')}, "
                                  f"{str(held.get('sweep_sha256'))[:12]}…); choose another "
                                  "folder", field="--out", value=str(folder))
        elif folder.is_dir() and any(folder.iterdir()):
            raise OptionError("is not empty and holds no sweep; choose another folder",
                              field="--out", value=str(folder))
        elif folder.exists() and not folder.is_dir():
            raise OptionError("is not a folder", field="--out", value=str(folder))
        return cls(folder, sweep)

    def open(self) -> None:
        self.cells.mkdir(parents=True, exist_ok=True)
        manifest = self.folder / MANIFEST
        if not manifest.exists():
            write_atomic(manifest, json.dumps({
                "sweep": self.sweep.name, "file": str(self.sweep.file),
                "sweep_sha256": self.sweep.sha256, "llmopt_version": __version__},
                indent=1) + "\n")

    def finished(self) -> dict[str, dict[str, Any]]:
        """Every finished cell of this folder, by key (files being written are skipped)."""
        found: dict[str, dict[str, Any]] = {}
        if not self.cells.is_dir():
            return found
        for path in self.cells.glob("*.json"):
            try:
                record = load_json_mapping(path, "cell record")
            except InputFileError:
                continue  # a half-written record of a killed run: the cell runs again
            if isinstance(record.get("row"), dict):
                found[path.stem] = record
        return found

    def save(self, cell: Cell, row: dict[str, Any], probe: bool = False) -> dict[str, Any]:
        record = {"params": cell.params, "probe": probe, "row": _json_safe(row)}
        write_atomic(self.cells / f"{cell.key}.json",
                     json.dumps(record, allow_nan=False) + "\n")
        return record

    def table(self, records: list[dict[str, Any]]) -> pd.DataFrame:
        """One row per cell: the sweep's parameter columns, its metrics, then the cell's
        status, validity, runtime and key. A metric no cell has is left out; the cell's own
        columns (``ROW_COLUMNS``) are always there, empty when nothing failed or nothing was
        checked, so that code reading them need not test for them."""
        sweep = self.sweep
        rows = []
        for record in records:
            params, row = record["params"], record["row"]
            rows.append({**{c: params.get(c) for c in sweep.columns},
                         "probe": bool(record.get("probe")),
                         **{m: row.get(m) for m in sweep.metrics},
                         **{c: row.get(c) for c in ROW_COLUMNS}})
        columns = [*sweep.columns, "probe", *sweep.metrics, *ROW_COLUMNS]
        frame = pd.DataFrame(rows, columns=columns)
        keep = [c for c in columns if c in sweep.columns or c in ROW_COLUMNS
                or (c == "probe" and sweep.search is not None)
                or (c != "probe" and frame[c].notna().any())]
        frame = frame[keep]
        for column in frame.columns:
            if column in INTEGER_COLUMNS and frame[column].notna().any():
                frame[column] = frame[column].astype("Int64")
        return frame

    def write_table(self, frame: pd.DataFrame, stem: str) -> list[Path]:
        parquet, csv = self.folder / f"{stem}.parquet", self.folder / f"{stem}.csv"
        write_atomic(parquet, _parquet_bytes(frame))
        write_atomic(csv, frame.to_csv(index=False))
        return [parquet, csv]


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    data = frame.to_parquet(index=False)
    assert data is not None
    return data


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()}
