"""KV-memory accounting of PD competition, shared by the models, the plan timer and the replay.

Memory rule (llmopt's addition to eqs 1–25 of Pang et al. 2025, which bound memory only through
the number of clients J): a request in flight *reserves* its whole KV footprint, N^p_i + N^d_i
tokens, from the start of its prefill stage until its last decode round ends, and the reserved
total never exceeds the capacity M. Nothing is ever preempted in PD competition, so this is the
rule an online scheduler must follow to be sure a started request can finish; the exact models
impose it, the engine admits by it, and ``llmopt validate`` checks it (with code of its own).

Positions are points of one axis (decode rounds of a plan, or milliseconds of a schedule); a
request occupies the half-open interval [start, end), so one that ends at p has released its
KVs before one that starts at p reserves them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np


def footprint(input_tokens: np.ndarray | int, output_tokens: np.ndarray | int):
    """KV tokens a request reserves while in flight: its prompt and its whole output."""
    return input_tokens + output_tokens


def reserved_peak(starts: Sequence[float] | np.ndarray, ends: Sequence[float] | np.ndarray,
                  sizes: Sequence[int] | np.ndarray) -> tuple[int, float]:
    """(largest reserved total, first position where it is reached) over intervals
    [start, end) each reserving ``size``; (0, 0.0) without intervals."""
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    w = np.asarray(sizes, dtype=np.int64)
    if not len(w):
        return 0, 0.0
    positions = np.concatenate([e, s])
    deltas = np.concatenate([-w, w])
    # releases before reservations at the same position (half-open intervals)
    order = np.lexsort((np.concatenate([np.zeros(len(e)), np.ones(len(s))]), positions))
    totals = np.cumsum(deltas[order])
    k = int(np.argmax(totals))
    return int(totals[k]), float(positions[order][k])


class ReservationLedger:
    """Requests placed on an axis in non-decreasing start order, with the KVs they reserve.

    ``earliest_fit(position, need)`` is the first point ≥ ``position`` at which ``need`` more
    tokens fit beside the requests still in flight there (every placed request starts at or
    before ``position``, so the reserved total only falls as the point moves right)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self._ends: list[int] = []      # sorted
        self._sizes: list[int] = []     # aligned with _ends

    def add(self, end: int, size: int) -> None:
        k = bisect.bisect_right(self._ends, end)
        self._ends.insert(k, end)
        self._sizes.insert(k, size)

    def reserved_at(self, position: int) -> int:
        """KVs reserved at ``position`` by requests with end > position."""
        k = bisect.bisect_right(self._ends, position)
        return sum(self._sizes[k:])

    def earliest_fit(self, position: int, need: int) -> int:
        """Smallest p ≥ ``position`` with reserved_at(p) + need ≤ capacity; raises ValueError
        when ``need`` alone exceeds the capacity."""
        if self.capacity is None:
            return position
        if need > self.capacity:
            raise ValueError(f"{need} KV tokens exceed the capacity {self.capacity}")
        k = bisect.bisect_right(self._ends, position)
        held = sum(self._sizes[k:])
        while held + need > self.capacity:
            held -= self._sizes[k]
            position = max(position, self._ends[k])
            k += 1
        return position
