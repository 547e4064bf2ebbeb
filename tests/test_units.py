"""One display rule for times (llmopt.report.units): ms below 10 s, else s."""

from __future__ import annotations

from llmopt.report.units import fmt_time, time_column, time_unit


def test_a_column_is_in_ms_below_ten_seconds_and_in_s_from_there():
    assert time_unit(9_999.9) == ("ms", 1.0)
    assert time_unit(10_000.0) == ("s", 1000.0)
    assert time_column("TTFT p50", [4.321, 9_999.0]) == ("TTFT p50 (ms)", ["4.32", "9,999.00"])
    assert time_column("total", [250.0, 12_345.0]) == ("total (s)", ["0.25", "12.35"])
    assert time_column("E2E", [None, float("nan")]) == ("E2E (ms)", ["—", "—"])
    assert fmt_time(1_500.0, ("s", 1000.0)) == "1.50"
