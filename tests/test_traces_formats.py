"""Trace readers: BurstGPT (failed rows, filters, detection), reading in chunks (same rows, errors
naming the file row, nothing read past the selection), arrivals out of order, missing columns and
traces without timestamps."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from llmopt.data import traces
from llmopt.data.traces import TRACE_FORMATS, TraceWarning, read_trace
from llmopt.errors import TraceError

SHARED_DATA = Path(__file__).parents[1].parent / "shared" / "data"

BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURST_ROWS = [  # (s, model, request, response, log type); response 0 = failed
    (5.0, "ChatGPT", 10, 20, "Conversation log"),
    (6.0, "GPT-4", 11, 0, "API log"),
    (7.5, "GPT-4", 12, 22, "API log"),
    (8.0, "ChatGPT", 13, 23, "API log"),
    (9.0, "ChatGPT", 14, 0, "Conversation log"),
    (9.5, "GPT-4", 15, 25, "Conversation log"),
    (11.0, "ChatGPT", 16, 26, "Conversation log"),
]


BURST_TWICE = [*BURST_ROWS, *((t + 20, *rest) for t, *rest in BURST_ROWS)]


def burst_csv(rows=BURST_ROWS) -> str:
    return BURST_HEAD + "".join(f"{t},{m},{q},{r},{q + r},{log}\n" for t, m, q, r, log in rows)


@pytest.fixture
def write(tmp_path):
    def make(name: str, text: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path
    return make


def summary(rows):
    return [(r["id"], r["input_tokens"], r["output_tokens"], r["arrival_ms"]) for r in rows]


# --- BurstGPT -----------------------------------------------------------------------------------

def test_burstgpt_drops_failed_rows_and_keeps_file_row_ids(write):
    rows = read_trace(write("b.csv", burst_csv()), "burstgpt")
    assert summary(rows) == [
        ("r0", 10, 20, 0.0), ("r2", 12, 22, 2500.0), ("r3", 13, 23, 3000.0),
        ("r5", 15, 25, 4500.0), ("r6", 16, 26, 6000.0),
    ]


def test_burstgpt_start_and_limit_count_requests_not_file_rows(write):
    rows = read_trace(write("b.csv", burst_csv()), "burstgpt", start=1, limit=2)
    assert [r["id"] for r in rows] == ["r2", "r3"]
    assert [r["arrival_ms"] for r in rows] == [0.0, 500.0]  # rebased to the first selected


def test_burstgpt_filters(write):
    path = write("b.csv", burst_csv())
    gpt4 = read_trace(path, "burstgpt", model="GPT-4")
    assert [r["id"] for r in gpt4] == ["r2", "r5"]
    api = read_trace(path, "burstgpt", log_type="API log")
    assert [r["id"] for r in api] == ["r2", "r3"]
    both = read_trace(path, "burstgpt", model="ChatGPT", log_type="Conversation log")
    assert [r["id"] for r in both] == ["r0", "r6"]
    assert [r["arrival_ms"] for r in both] == [0.0, 6000.0]
    assert [r["id"] for r in read_trace(path, model="ChatGPT", start=1, limit=1)] == ["r3"]


def test_burstgpt_filter_value_matching_no_row_lists_the_values_present(write):
    path = write("b.csv", burst_csv())
    with pytest.raises(TraceError) as err:
        read_trace(path, "burstgpt", model="gpt4")
    assert err.value.field == "model" and err.value.value == "gpt4"
    assert "b.csv" in str(err.value) and "'ChatGPT', 'GPT-4'" in str(err.value)
    with pytest.raises(TraceError, match=r"log_type: value 'Batch': .*'API log', "
                                         r"'Conversation log'"):
        read_trace(path, "burstgpt", log_type="Batch")


def test_burstgpt_filters_present_but_selecting_nothing(write):
    path = write("b.csv", burst_csv())
    with pytest.raises(TraceError, match=r"no requests selected \(check start, model, "
                                         r"log_type\)"):
        read_trace(path, "burstgpt", model="ChatGPT", log_type="API log", start=1)
    # both values are in the file, never on the same row
    apart = [(1.0, "GPT-4", 3, 4, "API log"), (2.0, "ChatGPT", 3, 4, "Conversation log")]
    with pytest.raises(TraceError, match="no requests selected"):
        read_trace(write("c.csv", burst_csv(apart)), model="GPT-4", log_type="Conversation log")
    # a value present only on failed rows selects nothing but is not "unknown"
    only_failed = [(1.0, "GPT-4", 3, 0, "API log"), (2.0, "ChatGPT", 3, 4, "API log")]
    with pytest.raises(TraceError, match="no requests selected"):
        read_trace(write("f.csv", burst_csv(only_failed)), "burstgpt", model="GPT-4")


@pytest.mark.parametrize("fmt,name,text", [
    ("azure", "a.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n"),
    ("vidur", "v.csv", "num_prefill_tokens,num_decode_tokens\n5,6\n"),
    ("jsonl", "j.jsonl", '{"input_tokens": 5, "output_tokens": 6}\n'),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 6}\n'),
])
@pytest.mark.parametrize("field", ["model", "log_type"])
def test_filters_on_other_formats_are_errors_naming_the_field(write, fmt, name, text, field):
    path = write(name, text)
    with pytest.raises(TraceError) as err:
        read_trace(path, fmt, **{field: "GPT-4"})
    assert err.value.field == field and "burstgpt" in str(err.value)
    with pytest.raises(TraceError, match=field):
        read_trace(path, **{field: "GPT-4"})  # auto-detected as the same format


def test_burstgpt_is_detected_by_its_columns(write):
    path = write("trace.csv", burst_csv())
    assert read_trace(path) == read_trace(path, "burstgpt")
    assert read_trace(path, model="GPT-4") == read_trace(path, "burstgpt", model="GPT-4")
    azure = write("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:15:46.0,374,44\n")
    assert read_trace(azure) == read_trace(azure, "azure")


def test_burstgpt_bad_values_name_file_column_row_and_value(write):
    rows = [*BURST_ROWS[:3], (9.0, "GPT-4", -4, 7, "API log")]
    with pytest.raises(TraceError,
                       match=r"b\.csv: Request tokens \(row 3, counted from 0\): value -4"):
        read_trace(write("b.csv", burst_csv(rows)), "burstgpt")
    rows = [*BURST_ROWS[:3], (9.0, "GPT-4", 4, -7, "API log")]
    with pytest.raises(TraceError, match=r"Response tokens \(row 3, counted from 0\): value -7"):
        read_trace(write("c.csv", burst_csv(rows)), "burstgpt")
    text = burst_csv().replace("\n8.0,", "\nlater,")
    with pytest.raises(TraceError, match=r"Timestamp \(row 3, counted from 0\): value 'later'"):
        read_trace(write("d.csv", text), "burstgpt")


def test_burstgpt_in_the_registry():
    fmt = TRACE_FORMATS["burstgpt"]
    assert "HPMLL/BurstGPT" in fmt.source and "Response tokens 0" in fmt.source
    for column in ("Timestamp", "Model", "Request tokens", "Response tokens", "Log Type"):
        assert column in fmt.columns
    assert fmt.filters == ("model", "log_type")
    assert all(f.filters == () for f in TRACE_FORMATS.values() if f.name != "burstgpt")


# --- reading in chunks --------------------------------------------------------------------------

def vidur_text(n=11):
    return "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{0.5 * i},{10 + i},{20 + i}\n" for i in range(n))


def azure_text(n=11):
    return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:{15 + i}:46.5,{10 + i},{20 + i}\n" for i in range(n))


def jsonl_text(n=11):
    return "".join(json.dumps({"id": f"q{i}", "input_tokens": 10 + i, "output_tokens": 2,
                               "arrival_ms": 100.0 * i}) + ("\n\n" if i == 4 else "\n")
                   for i in range(n))


def mooncake_text(n=11):
    return "".join(json.dumps({"timestamp": 3000 + 250 * i, "input_length": 600 + i,
                               "output_length": 40 + i, "hash_ids": [i]}) + "\n"
                   for i in range(n))


CHUNKED_CASES = {
    "vidur": ("v.csv", vidur_text(), "vidur", {}),
    "lengths": ("l.csv", "num_prefill_tokens,num_decode_tokens\n"
                + "".join(f"{5 + i},{6 + i}\n" for i in range(9)), "vidur", {}),
    "azure": ("a.csv", azure_text(), "azure", {}),
    "jsonl": ("j.jsonl", jsonl_text(), "jsonl", {}),
    "mooncake": ("m.jsonl", mooncake_text(), "mooncake", {}),
    "burstgpt": ("b.csv", burst_csv(BURST_TWICE), "burstgpt", {}),
    "burstgpt_filtered": ("b.csv", burst_csv(BURST_TWICE), "burstgpt",
                          {"model": "ChatGPT", "log_type": "Conversation log"}),
}


@pytest.mark.parametrize("case", sorted(CHUNKED_CASES))
def test_chunked_reading_gives_the_same_rows(write, monkeypatch, case):
    name, text, fmt, filters = CHUNKED_CASES[case]
    path = write(name, text)
    selections = [(0, None), (0, 1), (0, 3), (2, 2), (1, 4), (3, None), (2, 100)]
    expected = {sel: read_trace(path, fmt, start=sel[0], limit=sel[1], **filters)
                for sel in selections}
    assert len(expected[(0, None)]) >= 4
    for chunk in (1, 2, 3, 5):
        monkeypatch.setattr(traces, "CHUNK_ROWS", chunk)
        for start, limit in selections:
            got = read_trace(path, fmt, start=start, limit=limit, **filters)
            assert got == expected[(start, limit)], (chunk, start, limit)
            full = expected[(0, None)][start: None if limit is None else start + limit]
            assert [r["id"] for r in got] == [r["id"] for r in full]


@pytest.mark.parametrize("chunk", [1, 2, 3, 1000])
@pytest.mark.parametrize("name,text,fragment", [
    ("v.csv", vidur_text().replace("\n3.0,16,", "\n3.0,16.5,"),
     r"num_prefill_tokens \(row 6, counted from 0\): value 16.5"),
    ("v.csv", vidur_text().replace("\n4.5,", "\n-4.5,"),
     r"arrived_at \(row 9, counted from 0\): value -4.5"),
    ("a.csv", azure_text().replace("18:22:46.5", "yesterday"),
     r"TIMESTAMP \(row 7, counted from 0\): value '2023-11-16 yesterday'"),
    ("j.jsonl", jsonl_text().replace('"input_tokens": 17', '"input_tokens": -17'),
     r"input_tokens \(row 7, counted from 0\): value -17"),
    ("j.jsonl", jsonl_text().replace(', "arrival_ms": 800.0', ""),
     r"arrival_ms \(row 8, counted from 0\): missing on this row"),
    ("m.jsonl", mooncake_text().replace('"output_length": 48', '"output_length": "many"'),
     r"output_length \(row 8, counted from 0\): value 'many'"),
    ("b.csv", burst_csv(BURST_TWICE).replace("\n9.5,GPT-4,15,25", "\n9.5,GPT-4,x,25"),
     r"Request tokens \(row 5, counted from 0\): value 'x'"),
    ("b.csv", burst_csv([*BURST_ROWS, (12.0, "GPT-4", 3, -1, "API log")]),
     r"Response tokens \(row 7, counted from 0\): value -1"),
])
def test_bad_row_in_a_later_chunk_names_its_file_row(write, monkeypatch, chunk, name, text,
                                                    fragment):
    monkeypatch.setattr(traces, "CHUNK_ROWS", chunk)
    path = write(name, text)
    with pytest.raises(TraceError, match=fragment) as err:
        read_trace(path)
    assert str(err.value).startswith(str(path))


@pytest.mark.parametrize("chunk", [1, 2, 3, 1000])
def test_rows_after_the_selection_are_not_checked(write, monkeypatch, chunk):
    monkeypatch.setattr(traces, "CHUNK_ROWS", chunk)
    csv = write("v.csv", vidur_text(4) + "9,seven,3\n")
    assert len(read_trace(csv, limit=4)) == 4
    with pytest.raises(TraceError, match=r"row 4"):
        read_trace(csv, limit=5)
    jsonl = write("j.jsonl", jsonl_text(4) + "{oops\n")
    assert [r["id"] for r in read_trace(jsonl, start=1, limit=3)] == ["q1", "q2", "q3"]
    with pytest.raises(TraceError, match="line 5: invalid JSON"):
        read_trace(jsonl)
    burst = write("b.csv", burst_csv([*BURST_ROWS[:3], (9.0, "GPT-4", -1, 5, "API log")]))
    assert [r["id"] for r in read_trace(burst, model="GPT-4", limit=1)] == ["r2"]
    with pytest.raises(TraceError, match=r"Request tokens \(row 3, counted from 0\)"):
        read_trace(burst, model="GPT-4", limit=2)


# --- arrivals -----------------------------------------------------------------------------------

def test_timestamps_out_of_order_are_sorted_with_a_warning(write):
    path = write("o.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                          "1,1,1\n3,2,2\n2,3,3\n2,4,4\n0.5,5,5\n")
    with pytest.warns(TraceWarning, match=r"o\.csv: row 2 arrives before row 1") as caught:
        rows = read_trace(path)
    assert len(caught) == 1 and issubclass(TraceWarning, UserWarning)
    assert summary(rows) == [("r4", 5, 5, 0.0), ("r0", 1, 1, 500.0), ("r2", 3, 3, 1500.0),
                             ("r3", 4, 4, 1500.0), ("r1", 2, 2, 2500.0)]  # stable for ties


def test_order_is_checked_on_the_selected_requests_only(write):
    path = write("o.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                          "5,1,1\n1,2,2\n2,3,3\n3,4,4\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = read_trace(path, start=1)
    assert [r["id"] for r in rows] == ["r1", "r2", "r3"]


def test_burstgpt_and_jsonl_out_of_order_warn_with_the_file_row(write):
    rows = [(5.0, "ChatGPT", 1, 2, "API log"), (1.0, "ChatGPT", 3, 0, "API log"),
            (4.0, "GPT-4", 3, 4, "API log")]
    with pytest.warns(TraceWarning, match=r"b\.csv: row 2 arrives before row 0"):
        got = read_trace(write("b.csv", burst_csv(rows)))
    assert [(r["id"], r["arrival_ms"]) for r in got] == [("r2", 0.0), ("r0", 1000.0)]
    lines = [{"input_tokens": 1, "output_tokens": 1, "arrival_ms": t} for t in (0, 30, 20)]
    with pytest.warns(TraceWarning, match=r"j\.jsonl: row 2 arrives before row 1"):
        got = read_trace(write("j.jsonl", "".join(json.dumps(x) + "\n" for x in lines)))
    assert [r["id"] for r in got] == ["r0", "r2", "r1"]


def test_traces_without_timestamps(write):
    lengths = write("l.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                             "3772,54,3826,69.8\n2015,156,2171,12.9\n")
    assert [r["arrival_ms"] for r in read_trace(lengths, "vidur")] == [0.0, 0.0]
    assert [r["arrival_ms"] for r in read_trace(lengths, timestamps_required=False)] == \
        [None, None]
    jsonl = write("j.jsonl", '{"input_tokens": 3, "output_tokens": 2}\n'
                             '{"input_tokens": 4, "output_tokens": 2}\n')
    assert [r["arrival_ms"] for r in read_trace(jsonl)] == [0.0, 0.0]
    assert [r["arrival_ms"] for r in read_trace(jsonl, timestamps_required=False)] == \
        [None, None]
    timed = write("t.csv", vidur_text(3))
    assert [r["arrival_ms"] for r in read_trace(timed, timestamps_required=False)] == \
        [0.0, 500.0, 1000.0]


# --- columns and arguments ----------------------------------------------------------------------

@pytest.mark.parametrize("fmt,name,text,expected", [
    ("burstgpt", "b.csv", "Timestamp,Model,Request tokens,Total tokens\n1,GPT-4,3,5\n",
     ["Response tokens", "Timestamp, Model, Request tokens, Response tokens, Total tokens, "
      "Log Type"]),
    ("azure", "a.csv", "time,prompt,answer\n0,1,2\n",
     ["num_prefill_tokens,num_decode_tokens", "TIMESTAMP,ContextTokens,GeneratedTokens"]),
    ("vidur", "v.csv", "arrived_at,num_prefill_tokens\n0,1\n", ["num_decode_tokens"]),
    ("jsonl", "j.jsonl", '{"input_tokens": 5}\n', ["output_tokens", "input_tokens"]),
    ("mooncake", "m.jsonl", '{"input_length": 5}\n',
     ["timestamp", "input_length, output_length"]),
])
def test_missing_column_is_one_error_listing_the_expected_columns(write, fmt, name, text,
                                                                 expected):
    with pytest.raises(TraceError) as err:
        read_trace(write(name, text), fmt)
    assert err.value.field == "columns" and "wrong columns" in str(err.value)
    assert str(err.value).startswith(str(err.value.file)) and name in str(err.value)
    for fragment in expected:
        assert fragment in str(err.value)


def test_filter_column_missing_only_matters_when_filtering(write):
    path = write("b.csv", "Timestamp,Request tokens,Response tokens\n1,3,4\n2,5,0\n")
    assert [r["id"] for r in read_trace(path)] == ["r0"]
    with pytest.raises(TraceError, match="missing Log Type"):
        read_trace(path, log_type="API log")


def test_empty_traces_missing_values_and_columns_are_named(write):
    """What is wrong is said, not guessed: no rows at all (start and limit unset), a value
    missing (an empty cell, a key a line does not give), the column missing."""
    header_only = write("h.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n")
    with pytest.raises(TraceError, match=r"h\.csv: the trace has no requests$"):
        read_trace(header_only)
    failed = write("f.csv", burst_csv([(1.0, "GPT-4", 3, 0, "API log")]))
    with pytest.raises(TraceError, match=r"no requests \(failed requests, Response tokens 0"):
        read_trace(failed)
    blank = write("b.csv", vidur_text(3).replace("\n1.0,12,22", "\n1.0,,22"))
    with pytest.raises(TraceError, match=r"num_prefill_tokens \(row 2, counted from 0\): "
                                         r"missing"):
        read_trace(blank)
    lines = write("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
                             '{"timestamp": 1, "input_length": 5}\n')
    with pytest.raises(TraceError, match=r"output_length \(row 1, counted from 0\): missing"):
        read_trace(lines)
    for text, missing in (("arrived_at,num_prefill_tokens\n0,5\n", "num_decode_tokens"),
                          ("TIMESTAMP,GeneratedTokens\n2023-11-16 18:15:46,5\n",
                           "ContextTokens")):
        with pytest.raises(TraceError, match=f"wrong columns: missing {missing};"):
            read_trace(write("c.csv", text))


def test_start_and_limit_are_checked(write):
    path = write("v.csv", vidur_text(3))
    with pytest.raises(TraceError, match="start"):
        read_trace(path, start=-1)
    with pytest.raises(TraceError, match="limit"):
        read_trace(path, limit=0)
    with pytest.raises(TraceError, match="no requests selected"):
        read_trace(path, start=3)


def test_not_utf8_jsonl_names_the_line(write):
    path = write("j.jsonl", b'{"input_tokens": 5, "output_tokens": 6}\n\xff\xfe\n')
    with pytest.raises(TraceError, match="line 2: not UTF-8"):
        read_trace(path)


# --- shared data (skipped on a fresh clone) -----------------------------------------------------

@pytest.mark.parametrize("name", ["azure2023_conv_vidur.csv", "mooncake_conversation.jsonl",
                                  "arxiv_summarization_lengths_vidur.csv"])
def test_shared_traces_chunked_as_whole(monkeypatch, name):
    path = SHARED_DATA / "traces" / name
    if not path.exists():
        pytest.skip("../shared/data is not beside the project")
    whole = read_trace(path, start=40, limit=200)
    monkeypatch.setattr(traces, "CHUNK_ROWS", 64)
    assert read_trace(path, start=40, limit=200) == whole
    assert [r["id"] for r in whole] == [f"r{i}" for i in range(40, 240)]
    if name.startswith("arxiv"):
        assert {r["arrival_ms"] for r in read_trace(path, limit=5, timestamps_required=False)} \
            == {None}


def test_the_cli_says_once_and_on_one_line_that_a_trace_was_sorted(tmp_path, cli):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                    "0,5,6\n2,5,6\n1,5,6\n")
    (tmp_path / "i.yaml").write_text("name: t\nmodel: infermax-llama2-7b-a100\n"
                                     "system: {clients: 4}\nrequests: {trace: t.csv}\n")
    result = cli("replay", tmp_path / "i.yaml", "--policy", "vllm,sarathi", "--no-plot",
                 "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if "out of order" in line]
    assert len(said) == 1 and said[0].startswith("warning: ") and "t.csv: row 2" in said[0]
    assert "TraceWarning" not in result.output and ".py:" not in result.output
