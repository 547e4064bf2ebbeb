"""How times are shown, one rule for every table and chart: llmopt stores milliseconds; a column
(or a chart's time axis) whose largest time is under 10 s shows ms, otherwise s, with two
decimals. ``llmopt replay`` and ``llmopt compare`` thus show one instance's times alike."""

from __future__ import annotations

import math
from collections.abc import Iterable

SECONDS_FROM_MS = 10_000.0


def time_unit(max_ms: float) -> tuple[str, float]:
    """The unit of times whose largest is ``max_ms``: ``("ms", 1.0)`` or ``("s", 1000.0)``."""
    return ("s", 1000.0) if max_ms >= SECONDS_FROM_MS else ("ms", 1.0)


def fmt_time(ms: float | None, unit: tuple[str, float]) -> str:
    """``ms`` in ``unit`` with two decimals; "—" for a missing time."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "—"
    return f"{ms / unit[1]:,.2f}"


def time_column(name: str, values_ms: Iterable[float | None]) -> tuple[str, list[str]]:
    """A table column of times: its header with the unit (``"TTFT p50 (ms)"``) and its cells."""
    values = list(values_ms)
    largest = max((v for v in values if v is not None and not math.isnan(v)), default=0.0)
    unit = time_unit(largest)
    return f"{name} ({unit[0]})", [fmt_time(v, unit) for v in values]
