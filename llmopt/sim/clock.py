"""The simulation's one event clock, which both engines run on: the iteration-level cluster
(:mod:`llmopt.sim.cluster`: arrivals and replicas ready for their next iteration) and the
slice-level one (:mod:`llmopt.sim.slices`: arrivals, batch ends and the scheduler's periods).

Events come in time order. Arrivals are known from the start (the requests' arrival times, taken
in the order (time, index)); timed events are pushed as the run goes, each with a *kind* and a
*key*: events at the same time go in the order of their kind, then of their key (by default the
order they were pushed in). An arrival counts as an event of kind ``arrival_kind`` at its time
minus ``tolerance_ms``: a timed event within that tolerance before an arrival comes after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


class Clock:
    def __init__(self, arrival_ms: Sequence[float], *, arrival_kind: int,
                 tolerance_ms: float = 0.0) -> None:
        self.arrival_ms = list(arrival_ms)
        self.arrival_kind = arrival_kind
        self.tolerance_ms = tolerance_ms
        arr = self.arrival_ms
        self._arrivals = sorted(range(len(arr)), key=lambda i: (arr[i], i))
        self._next = 0
        self._events: list[tuple[float, int, int, int]] = []  # (time, kind, key, payload)
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._events) or self._next < len(self._arrivals)

    def push(self, time: float, kind: int, payload: int, key: int | None = None) -> None:
        """A timed event (``key``: the order among events of one time and kind; default: the
        order of pushing)."""
        if key is None:
            key = self._seq
            self._seq += 1
        heapq.heappush(self._events, (time, kind, key, payload))

    def next_arrival_ms(self) -> float | None:
        """The time of the next arrival, None when every request has arrived."""
        if self._next < len(self._arrivals):
            return self.arrival_ms[self._arrivals[self._next]]
        return None

    def take_arrival(self) -> int:
        """The next arriving request (there is one), taken off the clock."""
        i = self._arrivals[self._next]
        self._next += 1
        return i

    def take_all_arrivals(self) -> list[int]:
        """Every request still to arrive, in arrival order, taken off the clock at once (for
        a loop that interleaves them with events of its own, as one replica does)."""
        rest = self._arrivals[self._next:]
        self._next = len(self._arrivals)
        return rest

    def _arrival_first(self) -> bool:
        if self._next >= len(self._arrivals):
            return False
        if not self._events:
            return True
        time, kind = self._events[0][:2]
        due = self.arrival_ms[self._arrivals[self._next]] - self.tolerance_ms
        return (due, self.arrival_kind) <= (time, kind)

    def next_time(self) -> float:
        """The time of the next event (there is one)."""
        if self._arrival_first():
            return self.arrival_ms[self._arrivals[self._next]]
        return self._events[0][0]

    def pop(self) -> tuple[float, int, int]:
        """The next event (there is one) as (time, kind, payload); an arrival's payload is its
        request and its kind ``arrival_kind``."""
        if self._arrival_first():
            i = self.take_arrival()
            return self.arrival_ms[i], self.arrival_kind, i
        time, kind, _, payload = heapq.heappop(self._events)
        return time, kind, payload


__all__ = ["Clock"]
