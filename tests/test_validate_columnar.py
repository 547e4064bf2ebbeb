"""Schedules read from their Parquet file are checked a column at a time (the fast path); the
verdict must be the one the value-by-value check gives on the same segments as JSON records, and
a tampered column must still be rejected with a reason."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmopt.data.instance import instance_from_mapping
from llmopt.policies.replay import replay_result
from llmopt.result import read_solution
from llmopt.validate import check_solution
from llmopt.validate.schedule import iterations_frame, segments_frame

INFERMAX = {"family": "infermax", "source": "round test coefficients", "bias_ms": 1.0,
            "per_token_ms": 0.1, "decode_kv_ms": 0.01, "prefill_attention_ms": 0.001,
            "per_prefill_request_ms": 0.05}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(instance, solution path) of a replay with evictions, written as JSON + Parquet."""
    inst = instance_from_mapping({
        "name": "columnar", "model": INFERMAX,
        "system": {"clients": 6, "kv_capacity": 40, "max_batch_tokens": 16},
        "requests": [{"id": f"r{k}", "input_tokens": 3 + (5 * k) % 11,
                      "output_tokens": 2 + (7 * k) % 13, "arrival_ms": float(k)}
                     for k in range(12)]})
    result, schedule = replay_result(inst, "vllm")
    assert schedule.metrics()["evictions"] > 0  # a schedule with every phase
    path = tmp_path_factory.mktemp("columnar") / "replay-vllm.json"
    result.write(path, inst)
    return inst, path


def test_columns_and_records_give_the_same_frames(written):
    inst, path = written
    sol = read_solution(path)
    assert isinstance(sol["segments"], pd.DataFrame)
    by_column = segments_frame(sol, inst)
    records = segments_frame({"segments": sol["segments"].to_dict("records")}, inst)
    assert isinstance(by_column, pd.DataFrame) and isinstance(records, pd.DataFrame)
    pd.testing.assert_frame_equal(by_column, records, check_dtype=False)
    its_by_column = iterations_frame(sol["iterations"])
    its_records = iterations_frame({c: sol["iterations"][c].tolist()
                                    for c in sol["iterations"]})
    assert isinstance(its_by_column, pd.DataFrame) and isinstance(its_records, pd.DataFrame)
    pd.testing.assert_frame_equal(its_by_column, its_records, check_dtype=False)
    assert check_solution(inst, sol).reasons == []


def _set(column, row, value):
    def edit(sol):
        frame = sol["segments"].copy()
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = value
        sol["segments"] = frame
    return edit


def _set_iteration(column, row, value):
    def edit(sol):
        frame = sol["iterations"].copy()
        frame[column] = frame[column].astype(object if isinstance(value, str) else float)
        frame.loc[row, column] = value
        sol["iterations"] = frame
    return edit


def _shift_one_segment(sol):
    frame = sol["segments"].copy()
    frame.loc[0, ["start_ms", "end_ms"]] += 0.5
    sol["segments"] = frame


TAMPERINGS = {
    "negative tokens": (_set("tokens", 2, -1), "tokens"),
    "NaN start": (_set("start_ms", 1, np.nan), "start_ms"),
    "infinite end": (_set("end_ms", 1, np.inf), "end_ms"),
    "unknown phase": (_set("phase", 0, "warmup"), "phase"),
    "integer request id": (_set("request", 0, 7), "request"),
    "fractional client": (_set("client", 0, 0.5), "client"),
    "client out of range": (_set("client", 0, 99), "client"),
    "unknown request": (_set("request", 0, "nobody"), "unknown request"),
    "segment moved": (_shift_one_segment, ""),
    "iteration end infinite": (_set_iteration("end_ms", 0, np.inf), "end_ms"),
    "fractional batch size": (_set_iteration("batch_size", 0, 1.5), "batch_size"),
    "unknown iteration phase": (_set_iteration("phase", 0, "warmup"), "phase"),
}


@pytest.mark.parametrize("name", TAMPERINGS)
def test_tampered_columns_are_rejected(written, name):
    inst, path = written
    edit, words = TAMPERINGS[name]
    sol = read_solution(path)
    edit(sol)
    reasons = check_solution(inst, sol).reasons
    assert reasons, name
    assert words in " ".join(reasons)
